// attention_kernels.h — AttentionKernels, the tile kernels a rank runs: the executor's one way to
// compute (kernels/cpu today through CpuAttentionKernels, kernels/cuda and cuDNN next).
// Requires: tiles as kernels/reference/attention_problem.h shapes them (fp32, packed rows, per-row
// key ranges); the buffers are the rank's own.
// Note: an implementation decides nothing about the plan; it computes what the walker hands it.
#pragma once

#include <cstdint>

#include "kernels/reference/attention_problem.h"

namespace cpbench {

class AttentionKernels {
 public:
  virtual ~AttentionKernels() = default;
  // Forward of a tile (or a block of its query rows): normalised output and LSE over its keys.
  virtual kernels::PartialOutput tile_forward(const kernels::TileInput& tile) = 0;
  // Gradients of a tile added into dq, dk, dv, from the final out and lse of its query rows.
  virtual void tile_backward(const kernels::TileInput& tile, const float* out, const float* lse, int64_t lse_stride,
                             const float* dout, float* dq, float* dk, float* dv) = 0;
};

}  // namespace cpbench
