// attention_kernels.h — AttentionKernels, the tile kernels a rank runs and the memory they address:
// the executor's one way to compute (kernels/cpu today through CpuAttentionKernels, kernels/cuda and
// cuDNN next).
// Requires: tiles as kernels/reference/attention_problem.h shapes them (fp32, packed rows, per-row
// key ranges); q, k, v, out, lse, dout and the gradients point into memory() (the key ranges are
// host memory: a device implementation copies them with the tile).
// Note: an implementation decides nothing about the plan; it computes what the walker hands it.
// The walker hands a stage's tiles over in one stage_* call when its Communicator needs no host
// progress (a GPU launches them together), else tile by tile in blocks of query rows.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "core/runtime/tensor_ops.h"
#include "kernels/reference/attention_problem.h"

namespace cpbench {

// A tile's forward: the output (rows_q, Hq, d), normalised over the tile's keys, and its LSE
// (Hq, rows_q) (−inf where a row has no allowed key), written to out and lse.
struct ForwardCall {
  kernels::TileInput tile;
  float* out = nullptr;
  float* lse = nullptr;
};

// A tile's backward: its dQ, dK, dV added into dq (rows_q, Hq, d), dk, dv (rows_k, Hkv, d), from
// the final out and lse of its query rows (lse row h at lse + h·lse_stride) and dout.
struct BackwardCall {
  kernels::TileInput tile;
  const float* out = nullptr;
  const float* lse = nullptr;
  int64_t lse_stride = 0;
  const float* dout = nullptr;
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
};

class AttentionKernels {
 public:
  virtual ~AttentionKernels() = default;
  // Where the tensors these kernels read and write live, and the ops on them.
  virtual TensorOps& memory() = 0;
  virtual void tile_forward(const ForwardCall& call) = 0;
  virtual void tile_backward(const BackwardCall& call) = 0;
  // A stage's tiles (calls write disjoint outputs); by default one call per tile.
  virtual void stage_forward(std::span<const ForwardCall> calls) {
    for (const ForwardCall& c : calls) tile_forward(c);
  }
  virtual void stage_backward(std::span<const BackwardCall> calls) {
    for (const BackwardCall& c : calls) tile_backward(c);
  }
  // The seconds the device spent in this object's tile calls since the last take (or since it was
  // made), where the device times them itself (a GPU's events: the host's clock around an
  // asynchronous launch measures the launch, not the kernel); waits for those calls to finish.
  // nullopt where the calls run on the host's thread, whose clock is the kernels' time.
  virtual std::optional<double> take_kernel_seconds() { return std::nullopt; }
};

}  // namespace cpbench
