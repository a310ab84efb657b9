// executor.h — runs an AttentionPlan on real ranks: posts each stage's transfers before computing
// the previous stage's tiles (non-blocking sends and receives overlap the kernels), merges partial
// outputs with the LSE rule, and runs the derived backward pass.
// Requires: a Communicator of plan.ranks ranks; every rank passes the same whole batch (inputs are
// generated from a seed), of which it reads only what it holds. Decides nothing: the plan does.
// Note: what moves is exactly forward_transfers and the backward_phases of the plan, one message per
// transfer, so the Communicator's byte counters must equal plan_bytes (tests check it).
// The walker calls three small interfaces: Communicator (transfers: MPI and thread ranks today,
// NCCL next), AttentionKernels (the tile kernels: CPU today, CUDA next) and the TensorOps its
// kernels address (host memory today, device memory next): it computes addresses and never touches
// a value, so a device backend is one more implementation of each and the plan walk stays the same.
#pragma once

#include <span>
#include <vector>

#include "core/common/expected.h"
#include "core/plan/attention_plan.h"
#include "core/runtime/communicator.h"
#include "core/runtime/attention_kernels.h"

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
  double compute_s = 0;    // time in kernels: the host's wall time, or the device's own (CUDA events)
  double wait_s = 0;       // wall time blocked on communication
  double bytes_sent = 0, bytes_received = 0;  // payload, as counted by the Communicator
};

Expected<ExecutionReport> execute_attention(const AttentionPlan& plan, Communicator& comm, AttentionKernels& kernels,
                                            const AttentionInputs& in, bool backward);
// On kernels/cpu: core/runtime/cpu_attention_kernels.h.

// Offsets of each sequence's first row in the packed batch (size = sequences + 1).
std::vector<int64_t> packed_offsets(const AttentionPlan& plan);

}  // namespace cpbench
