// reshard.h — `cpbench reshard`: Tenplex's re-sharding of a model's training state from one (TP,
// PP, DP) layout to another, planned (core/reshard/reshard_plan.h) and executed with real tensors
// on the MPI ranks of this job (core/reshard/reshard_exec.h); prints per rank the bytes it sent and
// received by link class against the plan, its time, and the bit-for-bit check.
// Requires: mpirun with one rank per GPU the change involves (reshard_gpus: the source's GPUs and
// the target's, which skip lost GPUs) to execute; with one process it prints the plan only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace cpbench {

struct ReshardArgs {
  std::string from, to;        // "t,p,d" with an optional ",dist-opt"
  std::string model = "tiny_gpt";
  std::vector<int64_t> lost;   // ranks of `from` lost to a failure
  int64_t gpus_per_node = 8;
  double staging_mib = 0;      // per rank and stage; 0 = one stage
  int64_t max_seq = 2048;
  double timeout_s = 120;
};

// Exit 0 when every rank's state matches and moved the plan's bytes; 1 otherwise or on a failed
// run; 2 for bad input (a layout that does not parse or split, a lost rank outside `from`), and
// for a change that needs a checkpoint (a lost rank without a replica), which it names.
int cmd_reshard(const ReshardArgs& args, const std::filesystem::path& experiments_dir);

}  // namespace cpbench
