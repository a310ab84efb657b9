#include "apps/exec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>

#include <unistd.h>

#include "core/cost/cost_model.h"
#include "core/evaluate/evaluate.h"
#include "core/experiment/registry.h"
#include "core/experiment/runner.h"
#include "core/runtime/cpu_attention_kernels.h"
#include "core/runtime/host_memory.h"
#include "core/runtime/local_measure.h"
#include "core/runtime/mpi_communicator.h"
#include "core/runtime/mpi_session.h"
#include "core/runtime/plan_exec.h"
#include "core/runtime/thread_communicator.h"
#include "core/sim/attention_sim.h"
#ifdef CPBENCH_HAVE_CUDA
#include "core/runtime/cuda/cuda_runtime.h"
#endif

namespace cpbench {

const DeviceRuntime* built_in_device() {
#ifdef CPBENCH_HAVE_CUDA
  return &cuda_runtime();
#else
  return nullptr;
#endif
}

std::string backend_refusal(const std::string& backend, int job_ranks, bool gpu_per_rank) {
  const Backend* b = find_backend(backend);
  if (!b || !b->needs_devices) return "";
  if (job_ranks > 1 && !gpu_per_rank)
    return "--backend " + backend + " runs every rank of a plan as a thread of one process on this machine's GPU: "
           "start it without mpirun";
  const DeviceRuntime* device = built_in_device();
  if (!device) return "--backend " + backend + ": this cpbench was built without CUDA (nvcc was not found when it was built)";
  // One GPU per rank over NCCL: a build without NCCL says so before anything else.
  if (job_ranks > 1 && !device->world_over) return "--backend " + backend + " under mpirun needs NCCL, which this build lacks";
  const std::string why = device->unavailable();
  return why.empty() ? "" : "--backend " + backend + ": " + why;
}

[[noreturn]] void fail(const std::string& message) { MpiCommunicator::abort_job(message, 1); }

int refuse_input(int rank, const std::string& command, const std::string& why) {
  if (rank == 0) std::cerr << "cpbench " << command << ": " << why << "\n";
  return 2;
}

std::string host_memory_verdict(Communicator& comm, double rank_bytes, const std::string& what) {
  struct Record {
    char host[64];
    double bytes, physical;
  };
  Record mine{};
  if (::gethostname(mine.host, sizeof mine.host - 1) != 0) std::snprintf(mine.host, sizeof mine.host, "?");
  mine.bytes = rank_bytes;
  mine.physical = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  const int n = comm.size();
  std::vector<Record> all(n);
  std::vector<std::size_t> counts(n, sizeof(Record)), displs(n);
  for (int r = 0; r < n; ++r) displs[r] = r * sizeof(Record);
  if (auto s = comm.all_gatherv(std::as_bytes(std::span<const Record>(&mine, 1)), std::as_writable_bytes(std::span<Record>(all)),
                                counts, displs);
      !s)
    fail(s.error_str());
  struct Host {
    double bytes = 0, physical = 0;
    int ranks = 0;
  };
  std::map<std::string, Host> hosts;
  for (const Record& r : all) {
    Host& h = hosts[std::string(r.host, strnlen(r.host, sizeof r.host))];
    h.bytes += r.bytes;
    h.physical = r.physical;
    ++h.ranks;
  }
  for (const auto& [name, h] : hosts)
    if (h.physical > 0 && h.bytes > h.physical) {
      char why[400];
      std::snprintf(why, sizeof why, "%s: the %d rank(s) on %s would hold about %.1f GiB; it has %.1f GiB of memory", what.c_str(),
                    h.ranks, name.c_str(), h.bytes / (1u << 30), h.physical / (1u << 30));
      return why;
    }
  return "";
}

std::unique_ptr<MpiCommunicator> open_world(const char* command, std::chrono::milliseconds timeout) {
  auto world = MpiCommunicator::world(timeout);
  if (!world) {
    std::cerr << "cpbench " << command << ": " << world.error_str() << "\n";
    return nullptr;
  }
  return std::move(*world);
}

// Rank 0 prints every rank's text in rank order (an all_gatherv of the texts).
void print_in_rank_order(Communicator& comm, const std::string& text) {
  const int n = comm.size();
  std::vector<double> sizes(n, 0.0);
  sizes[comm.rank()] = static_cast<double>(text.size());
  if (auto s = comm.all_reduce(std::span<double>(sizes), ReduceOp::kSum); !s) fail(s.error_str());
  std::vector<std::size_t> counts(n), displs(n);
  std::size_t total = 0;
  for (int r = 0; r < n; ++r) {
    counts[r] = static_cast<std::size_t>(sizes[r]);
    displs[r] = total;
    total += counts[r];
  }
  std::vector<std::byte> all(total);
  auto mine = std::as_bytes(std::span<const char>(text.data(), text.size()));
  if (auto s = comm.all_gatherv(mine, std::span<std::byte>(all), counts, displs); !s) fail(s.error_str());
  if (comm.rank() != 0) return;
  std::fwrite(all.data(), 1, all.size(), stdout);
  std::fflush(stdout);
}

namespace {

// Every rank holds the whole batch's Q, K, V and dO and computes the reference beside its own
// results (about three copies of the inputs), so a batch too large for the machine is refused up
// front (host_memory_verdict over the job's ranks) instead of ending in std::bad_alloc or the
// kernel's OOM killer part-way through.
Status check_host_memory(Communicator& comm, const ExecArgs& a, const std::vector<int64_t>& lengths) {
  double tokens = 0;
  for (int64_t L : lengths) tokens += static_cast<double>(L);
  const double bytes = 3.0 * tokens * 2.0 * (a.heads + a.kv_heads) * a.head_dim * sizeof(float);
  char what[200];
  std::snprintf(what, sizeof what, "%.0f tokens with --heads %d --kv-heads %d --head-dim %d (inputs and the reference on every rank)",
                tokens, a.heads, a.kv_heads, a.head_dim);
  if (auto why = host_memory_verdict(comm, bytes, what); !why.empty()) return Error{"--lengths", "", why};
  return ok_status();
}

// The Plan of the point `a` names on the job's ranks (exec_point, planned by plan_point as `run`
// plans a point), with its batch; or why it cannot run, the same verdict on every rank (it depends
// on the arguments and the job's size only). A static layout pads a sequence only with --pad.
struct ExecPlan {
  PlannedPoint planned;
  std::vector<std::vector<PlanGroup>> rounds;  // plan_round_groups of every round
};

Expected<ExecPlan> plan_from_args(const ExecArgs& a, Communicator& comm, const std::filesystem::path& experiments_dir) {
  auto batch = exec_batch(a, experiments_dir);
  if (!batch) return batch.errors();
  if (auto fits = check_host_memory(comm, a, batch->lengths); !fits) return fits.errors();
  auto point = exec_point(a, comm.size(), experiments_dir);
  if (!point) return point.errors();
  ExecPlan out;
  out.planned = plan_point(*point, *batch);
  if (out.planned.status != "ok") return Error{"", "", point->strategy + ": " + out.planned.reason};
  const Plan& plan = out.planned.plan;
  for (size_t k = 0; k < plan_rounds(plan); ++k) {
    auto groups = plan_round_groups(plan, k);
    if (!groups) return groups.errors();
    out.rounds.push_back(std::move(*groups));
  }
  if (std::all_of(out.rounds.begin(), out.rounds.end(), [](const auto& groups) { return groups.empty(); }))
    return Error{"", "", point->strategy + " planned no context-parallel attention on " + std::to_string(comm.size()) +
                             " rank(s)"};
  // A static layout's group holds the batch in order: its padding is visible sequence by sequence.
  if (!a.pad && point->strategy == "cp_attention") {
    const AttentionPlan& at = *out.rounds.front().front().attention;
    for (size_t i = 0; i < at.seq_lengths.size() && i < batch->lengths.size(); ++i)
      if (at.seq_lengths[i] != batch->lengths[i])
        return Error{"", "", a.layout + " on " + std::to_string(comm.size()) + " rank(s) pads sequence " +
                                 std::to_string(i) + " from " + std::to_string(batch->lengths[i]) + " to " +
                                 std::to_string(at.seq_lengths[i]) + " tokens (its divisibility rule); pass --pad to run it padded"};
  }
  return out;
}

// Every round's groups simulated with `preset`, index-aligned with ExecPlan::rounds.
using RoundSims = std::vector<std::vector<AttentionSimResult>>;
Expected<RoundSims> simulate_rounds(const ExecPlan& ep, const std::filesystem::path& preset, bool backward) {
  auto cost = load_cost_model(preset);
  if (!cost) return Error{preset.string(), "", cost.error_str()};
  RoundSims out;
  for (const auto& groups : ep.rounds) {
    out.emplace_back();
    for (const PlanGroup& g : groups) {
      auto sim = simulate_attention_plan(*g.attention, *cost, backward, Link::nvlink);
      if (!sim) return sim.errors();
      out.back().push_back(std::move(*sim));
    }
  }
  return out;
}

// The time `runs` executions of the plan are predicted to take here (`sims`, simulated with
// `preset`): each round runs its groups' plans side by side on their own ranks, so a round lasts
// as its slowest group; with `reference`, exec's single-device check follows (each rank computes
// its group's whole attention: about the kernels of all the group's ranks one after the other).
// An error naming the estimate and the limit when it is above --time-limit; otherwise rank 0 says
// it when it is long. Every rank reaches the same verdict (the same simulation).
Status check_predicted_time(const ExecArgs& a, const RoundSims& sims, int rank, const std::filesystem::path& preset,
                            int runs, bool reference) {
  double step = 0, check = 0;
  for (const auto& groups : sims) {
    double slowest = 0, slowest_with_check = 0, its_check = 0;
    for (const AttentionSimResult& sim : groups) {
      const double kernels = sim.serial_kernel_s();
      slowest = std::max(slowest, sim.step_time_s);
      if (sim.step_time_s + kernels > slowest_with_check) {
        slowest_with_check = sim.step_time_s + kernels;
        its_check = kernels;
      }
    }
    step += slowest;
    check += its_check;
  }
  const double total = runs * step + (reference ? check : 0);
  char what[400];
  std::snprintf(what, sizeof what, "predicted about %.3g s here: %d run%s of the plan%s at %.3g s%s (simulated with %s)",
                total, runs, runs == 1 ? "" : "s", sims.size() > 1 ? "s of every round" : "", step,
                reference ? (", the reference check " + std::to_string(static_cast<long long>(std::ceil(check))) + " s").c_str() : "",
                preset.string().c_str());
  if (total > a.time_limit_s) {
    char limit[120];
    std::snprintf(limit, sizeof limit, ", above --time-limit %.3g s: raise it to run this", a.time_limit_s);
    return Error{"", "", std::string(what) + limit};
  }
  if (rank == 0 && total > 10) std::cerr << "cpbench: " << what << "\n";
  return ok_status();
}

// --timeout is range-checked by the command line (finite, at most a week), so the product fits.
std::chrono::milliseconds timeout_of(const ExecArgs& a) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(a.timeout_s * 1000)));
}

std::string join(const std::vector<int64_t>& xs) {
  std::string s;
  for (int64_t x : xs) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

// One rank's line of a round. A round of one group of every rank (a static layout, DCP) names no
// group; otherwise the group, its sequences and their padded lengths.
std::string rank_line(const Plan& plan, size_t k, const RoundRun& r, int rank, bool one_group, const std::string& indent) {
  if (r.idle()) {
    const auto& mine = plan.micro_batches[static_cast<size_t>(rank)][k];
    if (mine.lengths.empty()) return indent + "rank " + std::to_string(rank) + ": idle\n";
    return indent + "rank " + std::to_string(rank) + ": a group of one rank, lengths {" + join(mine.lengths) +
           "}: no context-parallel attention to execute\n";
  }
  const GroupRun& g = r.run;
  std::string where;
  if (!one_group)
    where = "group " + std::to_string(r.group) + " ranks [" + std::to_string(r.where.first_rank) + ", " +
            std::to_string(r.where.first_rank + r.where.cp) + ") cp rank " + std::to_string(r.group_rank) + ", lengths {" +
            join(plan.micro_batches[static_cast<size_t>(rank)][k].lengths) + "} padded {" +
            join(r.where.attention->seq_lengths) + "}, ";
  char line[320];
  std::snprintf(line, sizeof line,
                "compute %.3f s, wait %.3f s, sent %.0f B (plan %.0f), received %.0f B (plan %.0f), max error %.3g "
                "(%.2f of tolerance, %lld of %lld values wrong",
                g.compute_s, g.wait_s, g.bytes_sent, g.plan_bytes_sent, g.bytes_received, g.plan_bytes_received,
                g.check.max_abs_error, g.check.worst, static_cast<long long>(g.check.wrong),
                static_cast<long long>(g.check.checked));
  // Built as a string: a group with many sequences must not lose the verdict at the end of the line.
  return indent + "rank " + std::to_string(rank) + ": " + where + line +
         (g.check.worst > 1 ? ", worst at " + g.check.where : "") + ")" + (g.bytes_match() ? "" : "  BYTES DIFFER FROM PLAN") +
         "\n";
}

// What the run is, in one line (rank 0 prints it before the rounds).
std::string header(const ExecArgs& a, const ExecPlan& ep, int ranks) {
  const Plan& plan = ep.planned.plan;
  int64_t tokens = 0;
  for (int64_t L : ep.planned.batch.lengths) tokens += L;
  char line[400];
  std::snprintf(line, sizeof line,
                "%s, mask %s, %d rank%s, %zu sequences, %lld tokens, heads %d/%d, d %d, %s, %s values on the wire, %s; "
                "%zu round%s\n",
                a.dynamic_cp ? ("dynamic-cp (" + a.layout + " groups, max " + std::to_string(a.max_seqlen_per_rank) +
                                " tokens per rank)").c_str()
                             : a.layout.c_str(),
                a.mask.c_str(), ranks, ranks == 1 ? "" : "s", ep.planned.batch.lengths.size(), static_cast<long long>(tokens),
                a.heads, a.kv_heads, a.head_dim, a.backward ? "forward + backward" : "forward", a.dtype.c_str(),
                a.per_tile ? "per tile" : "fused stages", plan_rounds(plan), plan_rounds(plan) == 1 ? "" : "s");
  return std::string(line) + (ep.planned.reason.empty() ? "" : "  " + ep.planned.reason + "\n");
}

// The kernels --kernels asks for (checked available by backend_refusal).
std::unique_ptr<AttentionKernels> (*kernels_of(const DeviceRuntime& device, const ExecArgs& a))() {
  return a.kernels == "fast" ? device.make_fast_kernels : device.make_kernels;
}

// Under mpirun with --backend cuda: this process's GPU, its kernels, and the job's NCCL
// communicator (made over the MPI world, on the kernels' stream); --ranks, if given, must be the
// job's size. A rank that cannot set up ends the job naming itself.
int on_gpu_per_rank(const char* command, const ExecArgs& a, const DeviceRuntime& device,
                    const std::function<int(Communicator&, AttentionKernels&)>& body) {
  auto world = open_world(command, timeout_of(a));
  if (!world) return 2;
  if (a.ranks > 0 && a.ranks != world->size()) {
    if (world->rank() == 0)
      std::cerr << "cpbench " << command << ": --ranks " << a.ranks << " under mpirun -np " << world->size()
                << ": the ranks are the job's, one GPU each; leave --ranks out\n";
    return 2;
  }
  auto placement = node_placement(*world);
  if (!placement) fail("rank " + std::to_string(world->rank()) + ": " + placement.error_str());
  if (Status s = device.use_device(placement->local_rank); !s)
    fail("rank " + std::to_string(world->rank()) + ": " + s.error_str());
  std::unique_ptr<AttentionKernels> kernels = kernels_of(device, a)();
  auto nccl = device.world_over(*world, *kernels);
  if (!nccl) fail("rank " + std::to_string(world->rank()) + ": NCCL: " + nccl.error_str());
  (*nccl)->set_timeout(timeout_of(a));
  return body(**nccl, *kernels);
}

// Runs body(communicator, kernels) on the job's ranks: with --backend cpu the MPI world and CPU
// kernels; with cuda, under mpirun, one GPU per rank (device local_rank % GPUs of the host) and an
// NCCL communicator over the world; else a.ranks thread ranks of this process on its GPU, each
// with its own kernels (stream) and the device's copy, the worst exit code of them returned
// (2 bad input, 1 failure).
int on_the_ranks(const char* command, const ExecArgs& a,
                 const std::function<int(Communicator&, AttentionKernels&)>& body) {
  if (a.backend != "cuda") {
    auto world = open_world(command, timeout_of(a));
    if (!world) return 2;
    CpuAttentionKernels kernels;
    return body(*world, kernels);
  }
  int job = 1, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &job);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (const std::string why = backend_refusal("cuda", job, true); !why.empty()) {
    if (me == 0) std::cerr << "cpbench " << command << ": " << why << "\n";
    return 1;
  }
  const DeviceRuntime& device = *built_in_device();
  if (!kernels_of(device, a)) {
    if (me == 0) std::cerr << "cpbench " << command << ": --kernels fast needs cuDNN and cudnn-frontend, which this build lacks\n";
    return 1;
  }
  if (job > 1) return on_gpu_per_rank(command, a, device, body);
  if (a.ranks < 1) {
    std::cerr << "cpbench " << command << ": --backend cuda runs the plan on --ranks N threads of this process "
                 "(or on one GPU per rank under mpirun): give --ranks\n";
    return 2;
  }
  const auto make = kernels_of(device, a);
  std::vector<int> codes(static_cast<size_t>(a.ranks), 0);
  const std::vector<Status> st = run_thread_ranks(
      a.ranks,
      [&](Communicator& comm) -> Status {
        std::unique_ptr<AttentionKernels> kernels = make();
        codes[static_cast<size_t>(comm.rank())] = body(comm, *kernels);
        return ok_status();
      },
      timeout_of(a), device.copy);
  for (size_t r = 0; r < st.size(); ++r)
    if (!st[r]) {
      std::cerr << "cpbench " << command << ": thread rank " << r << ": " << st[r].error_str() << "\n";
      return 1;
    }
  return *std::max_element(codes.begin(), codes.end());
}

int exec_on(Communicator& comm, AttentionKernels& kernels, const ExecArgs& a,
            const std::filesystem::path& experiments_dir) {
  const int rank = comm.rank();
  const std::string command = a.dynamic_cp ? "exec --dynamic-cp" : "exec";
  // Every verdict before the first round depends on the arguments and the job's size only: every
  // rank returns 2 alike, and rank 0 says why.
  auto ep = plan_from_args(a, comm, experiments_dir);
  if (!ep) return refuse_input(rank, command, ep.error_str());
  const std::filesystem::path preset = hardware_preset_path("cpu_local", experiments_dir);
  auto sims = simulate_rounds(*ep, preset, a.backward);
  if (!sims) return refuse_input(rank, command, sims.error_str());
  if (auto s = check_predicted_time(a, *sims, rank, preset, 1, true); !s) return refuse_input(rank, command, s.error_str());
  const Plan& plan = ep->planned.plan;
  if (rank == 0) std::fputs(header(a, *ep, comm.size()).c_str(), stdout);
  double ok = 1;
  std::string reference;
  for (size_t k = 0; k < ep->rounds.size(); ++k) {
    auto run = execute_plan_round(plan, k, comm, kernels, a.seed, GroupRunOptions{a.backward, true});
    if (!run) fail("rank " + std::to_string(rank) + ", round " + std::to_string(k) + ": " + run.error_str());
    if (!run->idle()) {
      if (!run->run.ok()) ok = 0;
      reference = run->run.reference_kind;
    }
    const bool one_group = ep->rounds[k].size() == 1 && ep->rounds[k].front().cp == comm.size();
    const bool rounds = ep->rounds.size() > 1;
    const std::string title = rank == 0 && rounds ? "round " + std::to_string(k) + ":\n" : "";
    print_in_rank_order(comm, title + rank_line(plan, k, *run, rank, one_group, rounds ? "  " : ""));
  }
  if (rank == 0 && !reference.empty()) std::printf("reference: %s\n", reference.c_str());
  std::vector<double> all{ok};
  if (auto s = comm.all_reduce(std::span<double>(all), ReduceOp::kSum); !s) fail(s.error_str());
  return all[0] == comm.size() ? 0 : 1;
}

}  // namespace

int cmd_exec(const ExecArgs& a, const std::filesystem::path& experiments_dir) {
  keep_freed_host_memory();
  MpiSession session;  // a singleton MPI job when not started by mpirun
  return on_the_ranks("exec", a, [&](Communicator& comm, AttentionKernels& kernels) {
    return exec_on(comm, kernels, a, experiments_dir);
  });
}

namespace {

int validate_on(Communicator& comm, AttentionKernels& kernels, const ExecArgs& a, const std::string& preset,
                const std::filesystem::path& experiments_dir) {
  const int rank = comm.rank();
  auto ep = plan_from_args(a, comm, experiments_dir);
  if (!ep) return refuse_input(rank, "validate", ep.error_str());
  const std::filesystem::path preset_file = hardware_preset_path(preset, experiments_dir);
  auto sims = simulate_rounds(*ep, preset_file, a.backward);
  if (!sims) return refuse_input(rank, "validate", sims.error_str());
  if (auto s = check_predicted_time(a, *sims, rank, preset_file, 4, false); !s)  // a warm-up and three timed runs
    return refuse_input(rank, "validate", s.error_str());
  const Plan& plan = ep->planned.plan;
  // Every round's group communicators made and inputs drawn once, outside the timed runs (as a job
  // creates its groups at start-up); a warm-up run (page faults, thread start-up), then the best of three; a
  // run is every round.
  std::vector<RoundSeat> seats;
  RoundSplits splits;  // rounds split alike share one communicator (Megatron main's Dynamic-CP)
  for (size_t k = 0; k < ep->rounds.size(); ++k) {
    auto seat = take_round_seat(plan, k, comm, a.seed, &splits);
    if (!seat) fail("rank " + std::to_string(rank) + ", round " + std::to_string(k) + ": " + seat.error_str());
    seats.push_back(std::move(*seat));
  }
  std::vector<double> best{1e30, 1e30};  // step, this rank's kernel time
  for (int run = 0; run < 4; ++run) {
    if (auto s = comm.barrier(); !s) fail(s.error_str());
    auto t0 = std::chrono::steady_clock::now();
    double kernel_s = 0;
    for (const RoundSeat& seat : seats) {
      auto r = run_round_seat(seat, kernels, GroupRunOptions{a.backward, false});
      if (!r) fail("rank " + std::to_string(rank) + ", round " + std::to_string(seat.round) + ": " + r.error_str());
      kernel_s += r->run.compute_s;
    }
    std::vector<double> step{std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
    if (auto s = comm.all_reduce(std::span<double>(step), ReduceOp::kMax); !s) fail(s.error_str());
    if (run > 0 && step[0] < best[0]) best = {step[0], kernel_s};
  }
  std::vector<double> kernel_times(comm.size(), 0.0);
  kernel_times[rank] = best[1];
  if (auto s = comm.all_reduce(std::span<double>(kernel_times), ReduceOp::kSum); !s) fail(s.error_str());
  if (rank != 0) return 0;
  // The same rounds simulated: a round lasts as its slowest group; a rank's kernels are its group's.
  double predicted = 0;
  std::vector<double> predicted_kernels(comm.size(), 0.0);
  for (size_t k = 0; k < ep->rounds.size(); ++k) {
    double slowest = 0;
    for (size_t i = 0; i < ep->rounds[k].size(); ++i) {
      const PlanGroup& g = ep->rounds[k][i];
      const AttentionSimResult& sim = (*sims)[k][i];
      slowest = std::max(slowest, sim.step_time_s);
      for (int64_t r = 0; r < g.cp; ++r) predicted_kernels[static_cast<size_t>(g.first_rank + r)] += sim.compute_s[r];
    }
    predicted += slowest;
  }
  std::fputs(header(a, *ep, comm.size()).c_str(), stdout);
  std::printf("preset %s\n", preset_file.string().c_str());
  std::printf("step time: measured %.4f s, simulated %.4f s, error %+.1f%%\n", best[0], predicted,
              100 * (predicted - best[0]) / best[0]);
  for (int r = 0; r < comm.size(); ++r)
    std::printf("rank %d kernels: measured %.4f s, simulated %.4f s\n", r, kernel_times[r], predicted_kernels[r]);
  int job = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &job);
  if (a.backend == "cuda" && job == 1) {
    // The ranks are threads sharing one GPU: its kernels run one after the other, not side by side.
    double serial = 0;
    for (const auto& groups : *sims)
      for (const AttentionSimResult& sim : groups) serial += sim.serial_kernel_s();
    std::printf("the %d ranks share one GPU: every rank's kernels one after the other, simulated %.4f s, error %+.1f%%\n",
                comm.size(), serial, 100 * (serial - best[0]) / best[0]);
  }
  return 0;
}

}  // namespace

int cmd_validate(const ExecArgs& a, const std::string& preset, const std::filesystem::path& experiments_dir) {
  keep_freed_host_memory();
  MpiSession session;
  return on_the_ranks("validate", a, [&](Communicator& comm, AttentionKernels& kernels) {
    return validate_on(comm, kernels, a, preset, experiments_dir);
  });
}

int cmd_calibrate_local(const std::string& out, const std::filesystem::path& experiments_dir) {
  keep_freed_host_memory();
  MpiSession session;
  auto world = open_world("calibrate", std::chrono::minutes(10));
  if (!world) return 2;
  auto m = measure_local(*world);
  if (!m) fail(m.error_str());
  if (world->rank() != 0) return 0;
  auto start = load_json_file(experiments_dir / "hardware" / "a100_80gb_dgx.json");
  if (!start) {
    std::cerr << "cpbench calibrate: " << start.error_str() << "\n";
    return 2;
  }
  std::filesystem::path csv = std::filesystem::path(out).replace_extension(".csv");
  if (auto s = write_file_atomic(csv, measurements_csv(*m)); !s) {
    std::cerr << "cpbench calibrate: " << s.error_str() << "\n";
    return 1;
  }
  auto preset = local_preset(*m, (*start)["efficiency"], csv.string());
  if (!preset) {
    std::cerr << "cpbench calibrate: " << preset.error_str() << "\n";
    return 1;
  }
  if (auto s = write_file_atomic(out, preset->dump(2) + "\n"); !s) {
    std::cerr << "cpbench calibrate: " << s.error_str() << "\n";
    return 1;
  }
  std::fprintf(stderr, "cpbench: wrote %s and %s (SGEMM %.1f GFLOP/s, memory %.1f GB/s, MPI link %.1f GB/s)\n",
               out.c_str(), csv.string().c_str(), m->sgemm_gflops, m->memory_GBps, m->link_GBps);
  return 0;
}

}  // namespace cpbench
