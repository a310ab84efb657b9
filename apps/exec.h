// exec.h — `cpbench exec`: the point the flags name (core/experiment/exec_point.h: a static
// layout, DCP or Dynamic-CP on the job's ranks) planned as `run` plans it, every round of its Plan
// executed on the MPI ranks of this job (the plan walker, core/runtime/plan_exec.h), each group
// checked against the single-device reference and its bytes, printed per round and rank.
// Requires: MPI (run under mpirun -np CP). Note: a failing or hanging rank ends every rank with a
// non-zero exit and a message naming it, within --timeout seconds.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <filesystem>
#include <string>
#include <vector>

#include "core/experiment/exec_point.h"

namespace cpbench {

class Communicator;
class MpiCommunicator;
struct DeviceRuntime;

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

// The GPU runtime built into this binary (null without CUDA), for what needs a device.
const DeviceRuntime* built_in_device();
// Before anything is read or written: "" when `backend` (a row of the backend table, or exec's
// "cpu" / "cuda") can run here, else one line saying why not: a backend that needs a GPU in a build
// without CUDA, on a machine without a device, or under a launcher (`job_ranks` > 1) unless the
// command runs one GPU per rank (`gpu_per_rank`: exec and validate, over NCCL, where it is built;
// `run` asks with job_ranks 1: its ranks take points, each on its own GPU).
std::string backend_refusal(const std::string& backend, int job_ranks, bool gpu_per_rank = false);

int cmd_exec(const ExecArgs& args, const std::filesystem::path& experiments_dir);

// `cpbench validate`: the same plan executed here (every round; best of 3 timed runs after a
// warm-up, unchecked) and simulated with a hardware preset (normally the cpu_local one `calibrate --local` wrote); prints
// measured against predicted step time and per-rank kernel time.
int cmd_validate(const ExecArgs& args, const std::string& preset, const std::filesystem::path& experiments_dir);

// `cpbench calibrate --local`: measures this machine (SGEMM, memory, the attention kernel, MPI
// transfers when run under mpirun -np 2) and writes a fitted cpu_local preset to `out`, and the
// measurements beside it (out with .csv).
int cmd_calibrate_local(const std::string& out, const std::filesystem::path& experiments_dir);

}  // namespace cpbench
