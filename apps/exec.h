// exec.h — `cpbench exec`: plan a batch with a CP layout, execute it on the MPI ranks of this job,
// compare with the single-device reference, and print per rank what it computed and moved.
// Requires: MPI (run under mpirun -np CP). Note: a failing or hanging rank ends every rank with a
// non-zero exit and a message naming it, within --timeout seconds.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <filesystem>
#include <string>
#include <vector>

namespace cpbench {

class Communicator;
class MpiCommunicator;

// Shared by the MPI commands (exec, reshard):
// the job's world communicator with a deadline on every wait, or null after printing why;
std::unique_ptr<MpiCommunicator> open_world(const char* command, std::chrono::milliseconds timeout);
// stops every rank with exit code 1 (a failed run; 2 is only for bad input), naming this rank:
// an error on one rank must not leave the others waiting for it;
[[noreturn]] void fail(const std::string& message);
// rank 0 prints every rank's text in rank order (an all_gatherv of the texts);
void print_in_rank_order(Communicator& comm, const std::string& text);
// a verdict every rank reaches alike from the arguments (bad input): rank 0 prints
// "cpbench COMMAND: WHY", every rank returns exit code 2.
int refuse_input(int rank, const std::string& command, const std::string& why);
// whether the job fits in its hosts' memory, before it allocates: every rank gives the bytes it
// will hold, the ranks on one host (by host name) are summed against that host's physical memory;
// "" when every host has room, else why (the estimate and the limit), the same text on every rank.
// `what` names what the bytes hold. Every rank calls it together.
std::string host_memory_verdict(Communicator& comm, double rank_bytes, const std::string& what);

struct ExecArgs {
  std::string layout = "zigzag";
  std::string mask = "causal";
  std::vector<int64_t> lengths;     // explicit sequence lengths, or …
  std::string dataset;              // … a dataset preset sampled up to `tokens`
  int64_t tokens = 16384;
  uint64_t seed = 1;
  int heads = 8, kv_heads = 8, head_dim = 128, a2a_size = 0, window = 0;
  // --layout dcp: ranks per simulated node (0: all on one) and DCP's token block (0: its heuristic).
  int gpus_per_node = 0;
  int64_t block_tokens = 0;
  bool pad = false, backward = false;
  // How the plan runs, as an experiment's plan runs by default (baselines/cp_layouts.h
  // plan_micro_batch_attention): values on the wire in `dtype`, fused stages and the pipelined
  // backward; per_tile = one kernel call per tile and the three-phase backward. Static layouts,
  // DCP and every Dynamic-CP round alike.
  std::string dtype = "fp32";
  bool per_tile = false;
  double timeout_s = 120;
  // The work refused before it starts: the plan's runs (and exec's reference check) simulated
  // with the machine's preset must be predicted to end within this many seconds.
  double time_limit_s = 600;
  // --dynamic-cp: schedule the lengths with schedule_dynamic_cp_main over the job's ranks and run
  // every round, each group as one `layout` (always padded) on its own ranks.
  bool dynamic_cp = false;
  int64_t max_seqlen_per_rank = 0;
};

int cmd_exec(const ExecArgs& args, const std::filesystem::path& experiments_dir);

// `cpbench exec --dynamic-cp` (cmd_exec calls it when args.dynamic_cp): prints per round and rank
// the group, its sequences, kernel and wait time, bytes against the plan and the worst error;
// exit 0 only when every rank of every round matches, 2 for a batch or round that cannot run.
int cmd_exec_dynamic_cp(const ExecArgs& args, const std::filesystem::path& experiments_dir);

// `cpbench validate`: the same plan executed here (best of 3 timed runs after a warm-up) and
// simulated with a hardware preset (normally the cpu_local one `calibrate --local` wrote); prints
// measured against predicted step time and per-rank kernel time.
int cmd_validate(const ExecArgs& args, const std::string& preset, const std::filesystem::path& experiments_dir);

// `cpbench calibrate --local`: measures this machine (SGEMM, memory, the attention kernel, MPI
// transfers when run under mpirun -np 2) and writes a fitted cpu_local preset to `out`, and the
// measurements beside it (out with .csv).
int cmd_calibrate_local(const std::string& out, const std::filesystem::path& experiments_dir);

}  // namespace cpbench
