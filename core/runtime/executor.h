// executor.h — runs an AttentionPlan on real ranks: posts each stage's transfers before computing
// the previous stage's tiles (non-blocking sends and receives overlap the CPU kernel), merges
// partial outputs with the LSE rule, and runs the derived backward pass.
// Requires: a Communicator of plan.ranks ranks; every rank passes the same whole batch (inputs are
// generated from a seed), of which it reads only what it holds. Decides nothing: the plan does.
// Note: what moves is exactly forward_transfers and the backward_phases of the plan, one message per
// transfer, so the Communicator's byte counters must equal plan_bytes (tests check it).
// The walker calls two small interfaces: Communicator (transfers: MPI today, NCCL next) and
// AttentionKernels (the tile kernels: CPU today, CUDA next); a device backend is one more
// implementation of each, the plan walk stays the same.
#pragma once

#include <span>
#include <vector>

#include "core/common/expected.h"
#include "core/plan/attention_plan.h"
#include "core/runtime/communicator.h"
#include "kernels/cpu/flash_attention.h"

namespace cpbench {

// The packed batch, sequences concatenated in plan.seq_lengths order (fp32, row-major):
// q, dout [T, heads_q, d]; k, v [T, heads_kv, d].
struct AttentionInputs {
  std::span<const float> q, k, v, dout;
};

// This rank's home slices after the run, each packed like the inputs: out, dq [tokens, Hq, d];
// lse [Hq, tokens]; dk, dv [tokens, Hkv, d].
struct HomeResult {
  AttnSlice slice;
  std::vector<float> out, lse, dq, dk, dv;
};

struct ExecutionReport {
  std::vector<HomeResult> home;
  double compute_s = 0;    // wall time in kernels
  double wait_s = 0;       // wall time blocked on communication
  double bytes_sent = 0, bytes_received = 0;  // payload, as counted by the Communicator
};

// The tile kernels a rank runs, on its rank-local buffers (fp32, packed as kernels/cpu documents).
class AttentionKernels {
 public:
  virtual ~AttentionKernels() = default;
  // Forward of a tile (or a block of its query rows): normalised output and LSE over its keys.
  virtual kernels::PartialOutput tile_forward(const kernels::TileInput& tile) = 0;
  // Gradients of a tile added into dq, dk, dv, from the final out and lse of its query rows.
  virtual void tile_backward(const kernels::TileInput& tile, const float* out, const float* lse, int64_t lse_stride,
                             const float* dout, float* dq, float* dk, float* dv) = 0;
};

// kernels/cpu's tiled flash attention.
class CpuAttentionKernels final : public AttentionKernels {
 public:
  explicit CpuAttentionKernels(const kernels::FlashConfig& config = {}) : config_(config) {}
  kernels::PartialOutput tile_forward(const kernels::TileInput& tile) override;
  void tile_backward(const kernels::TileInput& tile, const float* out, const float* lse, int64_t lse_stride,
                     const float* dout, float* dq, float* dk, float* dv) override;

 private:
  kernels::FlashConfig config_;
};

Expected<ExecutionReport> execute_attention(const AttentionPlan& plan, Communicator& comm, AttentionKernels& kernels,
                                            const AttentionInputs& in, bool backward);
// The same on kernels/cpu.
Expected<ExecutionReport> execute_attention(const AttentionPlan& plan, Communicator& comm, const AttentionInputs& in,
                                            bool backward, const kernels::FlashConfig& config = {});

// Offsets of each sequence's first row in the packed batch (size = sequences + 1).
std::vector<int64_t> packed_offsets(const AttentionPlan& plan);

}  // namespace cpbench
