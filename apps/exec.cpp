#include "apps/exec.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>

#include <unistd.h>

#include "baselines/cp_layouts.h"
#include "core/cost/cost_model.h"
#include "core/experiment/registry.h"
#include "core/runtime/attention_check.h"
#include "core/runtime/cpu_attention_kernels.h"
#include "core/runtime/dynamic_cp_exec.h"
#include "core/runtime/host_memory.h"
#include "core/strategies/dcp.h"
#include "core/strategies/dynamic_cp.h"
#include "core/runtime/local_measure.h"
#include "core/sim/attention_sim.h"
#include "core/runtime/mpi_communicator.h"
#include "core/runtime/mpi_session.h"
#include "core/workload/batch.h"
#include "core/workload/length_profile.h"

namespace cpbench {

namespace {

constexpr int kTagResult = 900;

}  // namespace

[[noreturn]] void fail(const std::string& message) { MpiCommunicator::abort_job(message, 1); }

int refuse_input(int rank, const std::string& command, const std::string& why) {
  if (rank == 0) std::cerr << "cpbench " << command << ": " << why << "\n";
  return 2;
}

// The time `runs` executions of a job are predicted to take here, by its plans simulated with
// `preset`: each round (one, or Dynamic-CP's) runs its groups' plans side by side on their own
// ranks, so a round lasts as its slowest group; with `reference`, exec's single-device check
// follows (each rank computes its group's whole attention: about the kernels of all the group's
// ranks one after the other). An error naming the estimate and the limit when it is above
// --time-limit; otherwise rank 0 says it when it is long. Every rank reaches the same verdict
// (the same simulation).
Status check_predicted_time(const ExecArgs& a, const std::vector<std::vector<AttentionPlan>>& rounds, int rank,
                            const std::filesystem::path& preset, int runs, bool reference) {
  auto cost = load_cost_model(preset);
  if (!cost) return Error{preset.string(), "", cost.error_str()};
  double step = 0, check = 0;
  for (const auto& groups : rounds) {
    double slowest = 0, slowest_with_check = 0, its_check = 0;
    for (const AttentionPlan& plan : groups) {
      auto sim = simulate_attention_plan(plan, *cost, a.backward, Link::nvlink);
      if (!sim) return sim.errors();
      const double kernels = sim->serial_kernel_s();
      slowest = std::max(slowest, sim->step_time_s);
      if (sim->step_time_s + kernels > slowest_with_check) {
        slowest_with_check = sim->step_time_s + kernels;
        its_check = kernels;
      }
    }
    step += slowest;
    check += its_check;
  }
  const double total = runs * step + (reference ? check : 0);
  char what[400];
  std::snprintf(what, sizeof what, "predicted about %.3g s here: %d run%s of the plan%s at %.3g s%s (simulated with %s)",
                total, runs, runs == 1 ? "" : "s", rounds.size() > 1 ? "s of every round" : "", step,
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

// The batch's lengths: --lengths as given, or --dataset sampled up to --tokens.
Expected<std::vector<int64_t>> lengths_from_args(const ExecArgs& a, const std::filesystem::path& experiments_dir) {
  if (!a.lengths.empty()) return a.lengths;
  auto profile = load_length_profile(experiments_dir / "datasets" / (a.dataset + ".json"));
  if (!profile) return profile.errors();
  return make_global_batch(*profile, {0, a.tokens, profile->min_length, std::min(profile->max_length, a.tokens),
                                      a.seed}).lengths;
}

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

// The plan of the batch `a` describes, on comm.size() ranks (every rank calls it together).
// How a static layout's or a Dynamic-CP round's plan runs: values on the wire in --dtype, and
// TransformerEngine's style (fused stages, pipelined backward) unless --per-tile.
void apply_run_style(const ExecArgs& a, AttentionPlan& plan) {
  plan.value_bytes = a.dtype == "bf16" ? 2 : 4;
  plan.fused_stages = !a.per_tile;
  plan.pipelined_backward = !a.per_tile;
}

// --layout dcp: DCP's blockwise placement planned as the dcp strategy plans a CP group
// (dcp_request: the heads, DCP's block-size heuristic unless --block-tokens, 4 divisions,
// all-to-all exchanges, values on the wire in --dtype), the job's ranks --gpus-per-node to a
// simulated node, on this machine's cost model (cpu_local). DCP's executor runs fused stages;
// --per-tile calls the kernel per tile.
Expected<AttentionPlan> plan_dcp_from_args(const ExecArgs& a, Communicator& comm, const std::vector<int64_t>& lengths,
                                           const MaskSpec& mask, const std::filesystem::path& experiments_dir) {
  ModelShape model;
  model.heads = a.heads;
  model.kv_heads = a.kv_heads;
  model.hidden = int64_t{a.heads} * a.head_dim;
  ParallelConfig layout;
  layout.dtype = a.dtype;
  layout.dcp_block_tokens = a.block_tokens;
  const int32_t per_node = a.gpus_per_node > 0 ? std::min(a.gpus_per_node, comm.size()) : comm.size();
  const DcpRequest r = dcp_request(lengths, mask, model, layout, comm.size(), per_node);
  auto cost = load_cost_model(hardware_preset_path("cpu_local", experiments_dir));
  if (!cost) return cost.errors();
  auto d = plan_dcp(r, *cost);
  if (!d) return d.errors();
  if (a.per_tile) d->plan.fused_stages = false;
  return d->plan;
}

Expected<AttentionPlan> plan_from_args(const ExecArgs& a, Communicator& comm, const std::filesystem::path& experiments_dir) {
  CpLayoutRequest req;
  req.layout = a.layout;
  req.cp = comm.size();
  req.a2a_size = a.a2a_size;
  req.window = a.window;
  req.heads_q = a.heads;
  req.heads_kv = a.kv_heads;
  req.head_dim = a.head_dim;
  req.pad = a.pad;
  auto mask = mask_from_name(a.mask);
  if (!mask) return Error{"--mask", "", mask.error_str()};
  req.mask = *mask;
  auto lengths = lengths_from_args(a, experiments_dir);
  if (!lengths) return lengths.errors();
  if (auto fits = check_host_memory(comm, a, *lengths); !fits) return fits.errors();
  req.seq_lengths = *lengths;
  if (a.layout == "dcp") return plan_dcp_from_args(a, comm, *lengths, *mask, experiments_dir);
  auto plan = plan_cp_layout(req);
  if (!plan) return plan;
  apply_run_style(a, *plan);
  return plan;
}

// --timeout is range-checked by the command line (finite, at most a week), so the product fits.
std::chrono::milliseconds timeout_of(const ExecArgs& a) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(a.timeout_s * 1000)));
}

}  // namespace

int cmd_exec(const ExecArgs& a, const std::filesystem::path& experiments_dir) {
  if (a.dynamic_cp) return cmd_exec_dynamic_cp(a, experiments_dir);
  keep_freed_host_memory();
  MpiSession session;  // a singleton MPI job when not started by mpirun
  auto world = open_world("exec", timeout_of(a));
  if (!world) return 2;
  Communicator& comm = *world;
  const int rank = comm.rank();
  auto plan = plan_from_args(a, comm, experiments_dir);
  if (!plan) {
    if (rank == 0) std::cerr << "cpbench exec: " << plan.error_str() << "\n";
    return 2;  // every rank reaches the same verdict: nothing to abort
  }
  if (auto s = check_predicted_time(a, {{*plan}}, rank, hardware_preset_path("cpu_local", experiments_dir), 1, true); !s)
    return refuse_input(rank, "exec", s.error_str());
  OwnedInputs in = make_attention_inputs(*plan, a.seed);
  auto rep = execute_attention(*plan, comm, in.view(), a.backward);
  if (!rep) fail("rank " + std::to_string(rank) + ": " + rep.error_str());
  const RankBytes predicted = plan_bytes(*plan, a.backward);

  // Every rank checks its own rows against the reference (each computes it: inputs are tiny
  // next to what the ranks hold, and no result has to travel).
  ReferenceAttention ref = reference_attention(*plan, in, a.backward);
  CheckResult worst;
  for (const auto& h : rep->home) {
    CheckResult c = check_home(*plan, h, ref, a.backward);
    if (c.worst >= worst.worst) worst = c;
  }
  const bool bytes_ok = rep->bytes_sent == predicted.sent[rank] && rep->bytes_received == predicted.received[rank];
  char line[512];
  std::snprintf(line, sizeof line,
                "rank %d: compute %.3f s, wait %.3f s, sent %.0f B (plan %.0f), received %.0f B (plan %.0f), "
                "max error %.3g (%.2f of tolerance%s)%s\n",
                rank, rep->compute_s, rep->wait_s, rep->bytes_sent, predicted.sent[rank], rep->bytes_received,
                predicted.received[rank], worst.max_abs_error, worst.worst,
                worst.worst > 1 ? (", worst at " + worst.where).c_str() : "", bytes_ok ? "" : "  BYTES DIFFER FROM PLAN");
  // Rank 0 prints every rank's line in order.
  std::string mine(line);
  if (rank == 0) {
    int64_t tokens = 0;
    for (int64_t L : plan->seq_lengths) tokens += L;
    std::printf("%s, mask %s, cp %d, %zu sequences, %lld tokens (padded), heads %d/%d, d %d, %s; reference: %s\n",
                a.layout.c_str(), a.mask.c_str(), comm.size(), plan->seq_lengths.size(), static_cast<long long>(tokens),
                a.heads, a.kv_heads, a.head_dim, a.backward ? "forward + backward" : "forward", ref.kind.c_str());
    std::fputs(line, stdout);
    for (int r = 1; r < comm.size(); ++r) {
      std::vector<std::byte> buf(512);
      if (auto s = comm.recv(std::span<std::byte>(buf), r, kTagResult); !s) fail(s.error_str());
      std::fputs(reinterpret_cast<const char*>(buf.data()), stdout);
    }
    std::fflush(stdout);
  } else {
    std::vector<std::byte> buf(512);
    std::copy_n(reinterpret_cast<const std::byte*>(mine.c_str()), std::min<size_t>(mine.size() + 1, 511), buf.begin());
    if (auto s = comm.send(std::span<const std::byte>(buf), 0, kTagResult); !s) fail(s.error_str());
  }
  double ok = (worst.worst <= 1 && bytes_ok) ? 1 : 0;
  std::vector<double> all{ok};
  if (auto s = comm.all_reduce(std::span<double>(all), ReduceOp::kSum); !s) fail(s.error_str());
  return all[0] == comm.size() ? 0 : 1;
}


namespace {

std::string join(const std::vector<int64_t>& xs) {
  std::string s;
  for (int64_t x : xs) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

// One rank's line of a round.
std::string round_line(const DynCpRoundReport& r, const std::vector<int64_t>& lengths, int rank) {
  if (r.idle()) return "  rank " + std::to_string(rank) + ": idle\n";
  std::vector<int64_t> original;
  for (int64_t id : r.seq_ids) original.push_back(lengths[id]);
  char times[160];
  std::snprintf(times, sizeof times, "compute %.3f s, wait %.3f s, sent %.0f B (plan %.0f), received %.0f B (plan %.0f), ",
                r.compute_s, r.wait_s, r.bytes_sent, r.plan_bytes_sent, r.bytes_received, r.plan_bytes_received);
  char error[96];
  std::snprintf(error, sizeof error, "max error %.3g (%.2f of tolerance", r.check.max_abs_error, r.check.worst);
  // Built as a string: a group with many sequences must not lose the verdict at the end of the line.
  return "  rank " + std::to_string(rank) + ": group " + std::to_string(r.group) + " ranks [" +
         std::to_string(r.first_rank) + ", " + std::to_string(r.first_rank + r.group_size) + ") cp rank " +
         std::to_string(r.group_rank) + ", sequences {" + join(r.seq_ids) + "} lengths {" + join(original) +
         "} padded {" + join(r.padded_lengths) + "}, " + times + error +
         (r.check.worst > 1 ? ", worst at " + r.check.where : "") + ")" +
         (r.bytes_match() ? "" : "  BYTES DIFFER FROM PLAN") + "\n";
}


}  // namespace

int cmd_exec_dynamic_cp(const ExecArgs& a, const std::filesystem::path& experiments_dir) {
  keep_freed_host_memory();
  MpiSession session;
  auto world = open_world("exec", timeout_of(a));
  if (!world) return 2;
  Communicator& comm = *world;
  const int rank = comm.rank();
  // Every verdict before the first round depends on the arguments only: every rank returns 2
  // alike, and rank 0 says why.
  auto refuse = [rank](const std::string& why) { return refuse_input(rank, "exec --dynamic-cp", why); };
  if (a.max_seqlen_per_rank < 1) return refuse("give --max-seqlen-per-rank N (tokens per rank, N ≥ 1)");
  auto lengths = lengths_from_args(a, experiments_dir);
  if (!lengths) return refuse(lengths.error_str());
  if (auto fits = check_host_memory(comm, a, *lengths); !fits) return refuse(fits.error_str());
  auto schedule = schedule_dynamic_cp_main(*lengths, comm.size(), a.max_seqlen_per_rank);
  if (!schedule) return refuse(schedule.error_str());
  std::vector<std::vector<AttentionPlan>> round_plans;
  for (size_t r = 0; r < schedule->rounds.size(); ++r) {
    auto plans = plan_dyncp_round(schedule->rounds[r], *lengths, comm.size(), a.layout, a.mask, a.heads, a.kv_heads,
                                a.head_dim, dyncp_pad_multiple(comm.size(), 1));
    if (!plans) return refuse("round " + std::to_string(r) + ": " + plans.error_str());
    for (AttentionPlan& plan : *plans) apply_run_style(a, plan);
    round_plans.push_back(std::move(*plans));
  }
  if (auto s = check_predicted_time(a, round_plans, rank, hardware_preset_path("cpu_local", experiments_dir), 1, true); !s)
    return refuse(s.error_str());
  if (rank == 0) {
    std::printf("dynamic-cp: %s, mask %s, %d ranks, %zu sequences, max %lld tokens per rank, %zu rounds, "
                "heads %d/%d, d %d, %s\n",
                a.layout.c_str(), a.mask.c_str(), comm.size(), lengths->size(),
                static_cast<long long>(a.max_seqlen_per_rank), schedule->rounds.size(), a.heads, a.kv_heads,
                a.head_dim, a.backward ? "forward + backward" : "forward");
  }
  double ok = 1;
  for (size_t r = 0; r < schedule->rounds.size(); ++r) {
    auto rep = execute_dyncp_round(comm, schedule->rounds[r], round_plans[r], a.backward, a.seed);
    if (!rep) fail("rank " + std::to_string(rank) + ", round " + std::to_string(r) + ": " + rep.error_str());
    if (!rep->ok()) ok = 0;
    std::string text = rank == 0 ? "round " + std::to_string(r) + ":\n" : "";
    print_in_rank_order(comm, text + round_line(*rep, *lengths, rank));
  }
  std::vector<double> all{ok};
  if (auto s = comm.all_reduce(std::span<double>(all), ReduceOp::kSum); !s) fail(s.error_str());
  return all[0] == comm.size() ? 0 : 1;
}

}  // namespace cpbench

namespace cpbench {

int cmd_validate(const ExecArgs& a, const std::string& preset, const std::filesystem::path& experiments_dir) {
  keep_freed_host_memory();
  MpiSession session;
  auto world = open_world("validate", timeout_of(a));
  if (!world) return 2;
  Communicator& comm = *world;
  const int rank = comm.rank();
  auto plan = plan_from_args(a, comm, experiments_dir);
  std::filesystem::path preset_file = hardware_preset_path(preset, experiments_dir);
  auto cost = load_cost_model(preset_file);
  if (!plan || !cost) {
    if (rank == 0) std::cerr << "cpbench validate: " << (plan ? cost.error_str() : plan.error_str()) << "\n";
    return 2;
  }
  if (auto s = check_predicted_time(a, {{*plan}}, rank, preset_file, 4, false); !s)  // a warm-up and three timed runs
    return refuse_input(rank, "validate", s.error_str());
  OwnedInputs in = make_attention_inputs(*plan, a.seed);
  // A warm-up run (page faults, thread start-up), then the best of three.
  std::vector<double> best{1e30, 1e30};  // step, this rank's kernel time
  for (int run = 0; run < 4; ++run) {
    if (auto s = comm.barrier(); !s) fail(s.error_str());
    auto t0 = std::chrono::steady_clock::now();
    auto rep = execute_attention(*plan, comm, in.view(), a.backward);
    if (!rep) fail("rank " + std::to_string(rank) + ": " + rep.error_str());
    std::vector<double> step{std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
    if (auto s = comm.all_reduce(std::span<double>(step), ReduceOp::kMax); !s) fail(s.error_str());
    if (run > 0 && step[0] < best[0]) best = {step[0], rep->compute_s};
  }
  std::vector<double> kernel_times(comm.size(), 0.0);
  kernel_times[rank] = best[1];
  if (auto s = comm.all_reduce(std::span<double>(kernel_times), ReduceOp::kSum); !s) fail(s.error_str());
  if (rank != 0) return 0;
  auto sim = simulate_attention_plan(*plan, *cost, a.backward, Link::nvlink);
  if (!sim) {
    std::cerr << "cpbench validate: " << sim.error_str() << "\n";
    return 1;
  }
  std::printf("%s, mask %s, cp %d, %s, preset %s\n", a.layout.c_str(), a.mask.c_str(), comm.size(),
              a.backward ? "forward + backward" : "forward", preset_file.string().c_str());
  std::printf("step time: measured %.4f s, simulated %.4f s, error %+.1f%%\n", best[0], sim->step_time_s,
              100 * (sim->step_time_s - best[0]) / best[0]);
  for (int r = 0; r < comm.size(); ++r)
    std::printf("rank %d kernels: measured %.4f s, simulated %.4f s\n", r, kernel_times[r], sim->compute_s[r]);
  return 0;
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
