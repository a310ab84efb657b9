// cpu_attention_kernels.h — CpuAttentionKernels: AttentionKernels on kernels/cpu's tiled flash
// attention (OpenBLAS, OpenMP), and execute_attention on them.
// Requires: kernels/cpu. The one place core/runtime reaches kernels/cpu for execution, so the
// executor and a GPU backend's binary do not depend on OpenBLAS.
#pragma once

#include "core/runtime/attention_kernels.h"
#include "core/runtime/executor.h"
#include "kernels/cpu/flash_attention.h"

namespace cpbench {

class CpuAttentionKernels final : public AttentionKernels {
 public:
  explicit CpuAttentionKernels(const kernels::FlashConfig& config = {}) : config_(config) {}
  kernels::PartialOutput tile_forward(const kernels::TileInput& tile) override;
  void tile_backward(const kernels::TileInput& tile, const float* out, const float* lse, int64_t lse_stride,
                     const float* dout, float* dq, float* dk, float* dv) override;

 private:
  kernels::FlashConfig config_;
};

// execute_attention on kernels/cpu.
Expected<ExecutionReport> execute_attention(const AttentionPlan& plan, Communicator& comm, const AttentionInputs& in,
                                            bool backward, const kernels::FlashConfig& config = {});

}  // namespace cpbench
