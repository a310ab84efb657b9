// reshard_exec.h — executes a re-shard plan on the ranks of a Communicator with real tensors: every
// rank builds its state under the source layout (deterministic values: 16-bit weights, fp32
// master weights and Adam moments), the plan's stages move the sub-slices (one all_to_allv per
// stage; a rank's own slices are copied in place), and each rank compares what it assembled with
// the state built directly under the target layout, bit for bit, and the bytes it moved with the
// plan's.
// Requires: a communicator of reshard_gpus(request) ranks (rank i is GPU i of the plan); a plan from
// plan_reshard with no unrecoverable pieces (those need a checkpoint: an error says so). Every
// rank calls it together.
#pragma once

#include <cstdint>
#include <string>

#include "core/reshard/reshard_plan.h"
#include "core/runtime/communicator.h"

namespace cpbench {

struct ReshardRun {
  double seconds = 0;  // this rank: from the first stage to the last received byte
  uint64_t bytes_sent = 0, bytes_received = 0;            // counted by the Communicator
  uint64_t plan_bytes_sent = 0, plan_bytes_received = 0;  // what the plan says this rank moves (not its own copies)
  uint64_t bytes_copied = 0;                              // in place (the plan's local transfers)
  bool state_matches = false;  // the assembled state equals the state built under the target layout, bit for bit
  std::string mismatch;        // the first difference, when not
};

Expected<ReshardRun> execute_reshard(Communicator& comm, const ModelShape& model, const ReshardRequest& request,
                                     const ReshardPlan& plan);

// The bytes execute_reshard holds on GPU `gpu` at its peak: its source state, its target state
// twice (assembled, and built to compare with) and its largest stage's buffers. The MPI command
// checks it against the machine's memory before it allocates anything.
Expected<double> reshard_peak_bytes(const ModelShape& model, const ReshardRequest& request, const ReshardPlan& plan,
                                    int64_t gpu);

// The state a rank holds under `layout` with the deterministic values (one buffer per piece of
// rank_state, row-major, bytes_per_element bytes per element); exposed for tests.
std::vector<std::vector<std::byte>> generate_state(const std::vector<Piece>& pieces);

}  // namespace cpbench
