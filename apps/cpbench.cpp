// cpbench.cpp — the command-line tool: list, run and show experiments; calibrate stack presets.
// Requires: CLI11; MPI when launched under mpirun (points of `run` are spread over the ranks).
// Note: exit codes — 0 success; 1 a point ended in "error" or an I/O failure; 2 bad input (an
// invalid spec, an unknown experiment, a bad flag), in which case nothing is written.
#include <atomic>
#include <cmath>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>
#include <tuple>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>
#include <algorithm>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <mpi.h>
#include <unistd.h>

#include "apps/commbench.h"
#include "apps/compare.h"
#include "apps/exec.h"
#include "apps/reshard.h"
#include "core/cost/calibrate.h"
#include "core/evaluate/evaluate.h"
#include "core/experiment/audit.h"
#include "core/experiment/fit.h"
#include "core/experiment/journal.h"
#include "core/experiment/registry.h"
#include "core/experiment/runner.h"
#include "core/experiment/show.h"
#include "core/experiment/spec.h"
#include "core/runtime/mpi_communicator.h"
#include "core/runtime/mpi_session.h"
#include "core/search/search.h"
#include "core/experiment/strategy_registry.h"
#include "core/reshard/reconfigure.h"
#ifdef CPBENCH_HAVE_CUDA
#include "kernels/cuda/device_query.h"
#endif

namespace {

namespace fs = std::filesystem;
using namespace cpbench;

constexpr int kExitOk = 0, kExitFailed = 1, kExitBadInput = 2;
// exec/validate bounds: a sequence (or token budget) a 32-bit token index can address, and a week
// of waiting for a peer (the watchdog's deadline is then far from any clock overflow).
constexpr int64_t kMaxExecLength = (int64_t{1} << 31) - 1;
constexpr double kMaxTimeout_s = 7 * 24 * 3600;

// `cpbench --version`: the build, and the GPUs the CUDA runtime sees when CUDA was built in.
std::string version_text() {
  std::string text = std::string("cpbench ") + CPBENCH_VERSION + " (" + CPBENCH_BUILD_TYPE + ")";
#ifdef CPBENCH_HAVE_CUDA
  text += "\nCUDA runtime " + cuda::runtime_version() + ": ";
  const auto gpus = cuda::devices();
  if (gpus.empty()) text += cuda::no_devices_reason();
  for (const auto& d : gpus) {
    char line[200];
    std::snprintf(line, sizeof line, "\n  GPU %d: %s, sm_%d%d, %d SMs, %.0f GiB", d.index, d.name.c_str(), d.sm_major,
                  d.sm_minor, d.sm_count, d.memory_gib);
    text += line;
  }
#else
  text += "\nCUDA: not built (no nvcc at configure time)";
#endif
  return text;
}

// True when a launcher (mpirun, srun) started this process; MPI is initialised only then, so a
// plain `cpbench run` needs no MPI runtime.
bool under_mpi_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_NUM_TASKS"})
    if (std::getenv(v)) return true;
  return false;
}

// Whether MPI is up: initialised and not yet finalised (calibrate --local opens and closes it).
bool mpi_up() {
  int on = 0, done = 0;
  MPI_Initialized(&on);
  MPI_Finalized(&done);
  return on && !done;
}

// This process's rank, 0 outside MPI; the job's ranks, 1 outside MPI.
int mpi_rank() {
  int rank = 0;
  if (mpi_up()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
int mpi_world_size() {
  int size = 1;
  if (mpi_up()) MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}



// A numeric flag's value: finite and within [lo, hi]. CLI::Range alone lets "nan" through (every
// comparison with nan is false), and a timeout of "inf" or 1e300 overflows the arithmetic on it.
CLI::Validator finite_range(double lo, double hi) {
  std::ostringstream desc;
  desc << "NUMBER in [" << lo << " - " << hi << "]";
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        double x = 0;
        if (!CLI::detail::lexical_cast(text, x)) return "expected a number, got " + text;
        if (std::isfinite(x) && x >= lo && x <= hi) return "";
        std::ostringstream why;
        why << "expected a finite number in [" << lo << ", " << hi << "], got " << text;
        return why.str();
      },
      desc.str());
}

int report_errors(const Errors& errors) {
  if (mpi_rank() == 0) std::cerr << "cpbench: error:\n" << errors.str() << "\n";
  return kExitBadInput;
}

std::vector<std::pair<std::string, std::string>> parse_sets(const std::vector<std::string>& sets, Errors& errors) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& s : sets) {
    auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) {
      errors.list.push_back({"command line", "--set " + s, "expected key=value, e.g. --set parallel.tp=2"});
      continue;
    }
    out.emplace_back(s.substr(0, eq), s.substr(eq + 1));
  }
  return out;
}

// SIGINT/SIGTERM during `run`: the first sets the flag (the runner starts no new point, writes
// results.json, and cmd_run says how to resume); SA_RESETHAND makes a second one end the process
// at once, for a point that takes long to finish (the journal keeps every finished point).
std::atomic<int> g_stop_signal{0};

void on_stop_signal(int sig) {
  g_stop_signal.store(sig);
  static const char msg[] =
      "\ncpbench: interrupted: finishing the points in progress (interrupt again to stop at once)\n";
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// A word as a POSIX shell reads it back: quoted unless it is made of safe characters only.
std::string shell_quote(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                              "_-+=/.,:@%") == std::string::npos)
    return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct RunArgs {
  std::string experiment;
  std::string out = "results";
  std::vector<std::string> sets;
  int jobs = 1;
  bool resume = false, trace = false, dry_run = false;
  std::string backend = "sim";
  size_t first = 0;  // run only the first N points (when first_given; at least 1)
  bool first_given = false;
  double cpu_budget_s = 60;
  double progress_every_s = 10;
  std::string resume_command;  // this command line with --resume, printed when a run is interrupted
  std::string command_line;    // this command line, as the results folder's lock names its holder
};

int cmd_run(const RunArgs& a, const fs::path& experiments_dir) {
  // Under mpirun the points are spread over the ranks; with a device backend each rank runs its
  // points' plans on its own GPU, so the job's size does not matter here.
  if (const std::string why = backend_refusal(a.backend, 1); !why.empty() && !a.dry_run) {
    if (mpi_rank() == 0) std::cerr << "cpbench run: " << why << "\n";
    return kExitFailed;
  }
  auto ref = resolve_experiment(a.experiment, experiments_dir);
  if (!ref) return report_errors(ref.errors());
  Errors set_errors;
  SpecOptions options{experiments_dir, parse_sets(a.sets, set_errors), {}};
  if (!set_errors.list.empty()) return report_errors(set_errors);
  if (a.dry_run) {
    // Streamed: each point is printed as it is expanded and then dropped, so a sweep of any size
    // runs in the memory of one point.
    size_t shown = 0;
    const bool root = mpi_rank() == 0;
    options.stream_points = [&](const PointConfig& p) {
      if (!root || (a.first_given && shown >= a.first)) return;
      ++shown;
      std::cout << "  " << p.id << "  [" << p.cluster.name << ", " << p.model.name << ", " << p.workload.dataset_name
                << ", tp" << p.parallel.tp << " pp" << p.parallel.pp << " cp" << p.parallel.cp << " gpus "
                << p.parallel.num_gpus << "]\n"
                << describe_point(p) << std::flush;
    };
    if (root) std::cout << ref->name << ":\n";
    auto spec = load_spec(ref->file, ref->name, options);
    if (!spec) return report_errors(spec.errors());
    if (root) std::cout << ref->name << ": " << shown << " points\n";
    return kExitOk;
  }
  auto spec = load_spec(ref->file, ref->name, options);
  if (!spec) return report_errors(spec.errors());
  if (!spec->frontier_objectives.empty()) {
    // A frontier search prunes its points in one pass and writes no timelines: these flags
    // would be ignored (--first still cuts the spec's points before the search).
    Errors refused;
    const std::string why = " does not apply to a frontier spec (its search runs every layout it does not prune "
                            "in one pass, and writes no timelines)";
    if (a.resume) refused.list.push_back({"command line", "--resume", "--resume" + why});
    if (a.trace) refused.list.push_back({"command line", "--trace", "--trace" + why});
    if (!refused.list.empty()) return report_errors(refused);
  }
  if (a.first_given && spec->points.size() > a.first) spec->points.resize(a.first);
  // The job's ranks, when there are several: the runner spreads points over them.
  std::unique_ptr<MpiCommunicator> world;
  if (mpi_world_size() > 1) {
    auto w = MpiCommunicator::world();
    if (!w) return report_errors(w.errors());
    world = std::move(*w);
  }
  RunOptions run{a.out, a.jobs, {}, a.trace, a.backend, experiments_dir, a.cpu_budget_s, &g_stop_signal,
                 a.progress_every_s, world.get()};
  run.device = built_in_device();
  // A device backend under mpirun: each rank on GPU local_rank % (GPUs of its host).
  if (const Backend* b = find_backend(a.backend); world && b && b->needs_devices && run.device && !a.dry_run) {
    auto placement = node_placement(*world);
    if (!placement) return report_errors(placement.errors());
    if (Status s = run.device->use_device(placement->local_rank); !s) return report_errors(s.errors());
  }
  const fs::path dir = fs::path(a.out) / spec->name;
  // One run at a time per results folder: rank 0 writes it and takes its lock; every rank learns
  // the verdict, so a refused job ends on all of them.
  RunLock lock;
  int locked = 1;
  if (mpi_rank() == 0) {
    const Provenance here = current_provenance(spec->seed);  // the host and start time results record
    auto taken = RunLock::acquire(dir, "pid " + std::to_string(::getpid()) + " on " + here.host + " since " +
                                           here.started_utc + ": " + a.command_line);
    if (taken) lock = std::move(*taken);
    else {
      locked = 0;
      report_errors(taken.errors());
    }
  }
  if (world) {  // rank 0's verdict to every rank (the others add nothing)
    double verdict = world->rank() == 0 ? locked : 0;
    if (auto s = world->all_reduce(std::span<double>(&verdict, 1)); !s) return report_errors(s.errors());
    locked = verdict != 0;
  }
  if (!locked) return kExitBadInput;
  if (a.resume) {  // an unusable or foreign results file is bad input: nothing is run or written
    auto finished = load_finished_points(dir / "results.json", *spec);
    if (!finished) return report_errors(finished.errors());
    // A killed run's points since its start are in the journal only.
    if (auto s = load_journal(journal_path(dir), *spec, *finished); !s) return report_errors(s.errors());
    run.finished = std::move(*finished);
  }
  install_stop_handlers();
  auto results = run_experiment(*spec, run);
  if (!results) {
    if (mpi_rank() == 0) std::cerr << "cpbench: error:\n" << results.error_str() << "\n";
    return kExitFailed;
  }
  if (const int sig = g_stop_signal.load(); sig != 0) {
    if (mpi_rank() == 0) {
      size_t kept = 0;
      for (const auto& r : *results) kept += r && r->status != "error";
      std::cerr << "cpbench: interrupted by " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ": " << kept << " of "
                << results->size() << " points kept in " << (dir / "results.json").string()
                << "; to run the rest:\n  " << a.resume_command << "\n";
    }
    return 128 + sig;  // as a shell reports a process ended by the signal: 130 (SIGINT), 143 (SIGTERM)
  }
  if (mpi_rank() != 0) return kExitOk;
  size_t errors = 0;
  for (const auto& r : *results)
    if (r && r->status == "error") {
      ++errors;
      std::cerr << "cpbench: point " << r->id << " failed: " << r->reason << "\n";
    }
  std::cerr << "cpbench: wrote " << (dir / "results.json").string() << "\n";
  return errors ? kExitFailed : kExitOk;
}

int cmd_show(const std::string& file) {
  fs::path path(file);
  if (fs::is_directory(path)) path /= "results.json";
  auto j = load_json_file(path);
  if (!j) return report_errors(j.errors());
  auto text = format_results(*j, path.string());
  if (!text) return report_errors(text.errors());
  std::cout << *text;
  return kExitOk;
}

// The stack to calibrate: `stack` (a name or file, as stack_preset_path reads it) or the hardware
// preset's default stack, loaded on that machine; `file` is where the stack was read from.
struct StackToFit {
  ClusterSpec machine;
  json stack;
  std::string file;
};

Expected<StackToFit> stack_to_fit(const std::string& preset, const std::string& stack, const fs::path& experiments_dir) {
  const fs::path hardware_file = hardware_preset_path(preset, experiments_dir);
  auto machine = load_hardware(hardware_file, stack);
  if (!machine) return machine.errors();
  StackToFit out{*machine, json::object(), machine->stack_file};
  if (out.file.empty()) {  // the hardware file carries its stack inline
    auto raw = load_json_file(hardware_file);
    if (!raw) return raw.errors();
    out.stack = (*raw)["default_stack"];
    return out;
  }
  auto raw = load_stack_json(out.file);
  if (!raw) return raw.errors();
  out.stack = *raw;
  return out;
}

// A fitted constant pinned at a bound of its range is written (the stack stays usable), but said.
// `source_prefix`: how the sources of the constants this fit wrote begin.
void warn_constants_at_bounds(const json& efficiency, const std::string& source_prefix, const std::string& file) {
  if (mpi_rank() != 0) return;
  for (const std::string& why : fitted_constants_at_bounds(efficiency, source_prefix))
    std::cerr << "cpbench: warning: " << file << ": /efficiency/" << why << "\n";
}

// A stack written to `out` is named after its file, as every stack preset is.
Status write_stack(const std::string& out, json stack) {
  stack["name"] = fs::path(out).stem().string();
  return write_file_atomic(out, stack.dump(2) + "\n");
}

// Fits the efficiency constants of a stack (on a hardware preset) to measured op times and writes
// the fitted stack (every fitted constant's source names the measurement file).
int cmd_calibrate(const std::string& measurements, const std::string& preset, const std::string& stack,
                  const std::string& out, const fs::path& experiments_dir) {
  auto start = stack_to_fit(preset, stack, experiments_dir);
  if (!start) return report_errors(start.errors());
  auto rows = load_measurements(measurements);
  if (!rows) return report_errors(rows.errors());
  auto fitted = calibrate_stack(start->machine, start->stack, *rows, measurements);
  if (!fitted) return report_errors(fitted.errors());
  if (auto st = write_stack(out, *fitted); !st) {
    std::cerr << "cpbench: error:\n" << st.error_str() << "\n";
    return kExitFailed;
  }
  std::cerr << "cpbench: wrote " << out << " (" << rows->size() << " measurements)\n";
  auto before = op_family_errors(start->machine, start->stack, *rows);
  auto after = op_family_errors(start->machine, *fitted, *rows);
  if (before && after) std::cerr << format_family_errors(*before, *after);
  warn_constants_at_bounds((*fitted)["efficiency"], fitted_source_prefix(measurements), out);
  return kExitOk;
}

// `cpbench calibrate FILE --preset P [--stack S] --check`: the stack's error on each op family of
// the measurements, and their sums measured and predicted (one layer replayed on a device:
// scripts/measure_gpu_ops.py --replay), without fitting or writing anything.
int cmd_calibrate_check(const std::string& measurements, const std::string& preset, const std::string& stack,
                        const fs::path& experiments_dir) {
  auto start = stack_to_fit(preset, stack, experiments_dir);
  if (!start) return report_errors(start.errors());
  auto rows = load_measurements(measurements);
  if (!rows) return report_errors(rows.errors());
  auto errors = op_family_errors(start->machine, start->stack, *rows);
  if (!errors) return report_errors(errors.errors());
  std::printf("%-14s %4s %14s %14s %10s %8s  %s\n", "op family", "n", "measured ms", "predicted ms", "error", "rms log",
              "worst (predicted/measured)");
  double measured_all = 0, predicted_all = 0;
  for (const FamilyError& e : *errors) {
    measured_all += e.measured_s;
    predicted_all += e.predicted_s;
    std::printf("%-14s %4zu %14.4f %14.4f %+9.1f%% %8.3f  %.2f (%s)\n", e.family.c_str(), e.n, 1e3 * e.measured_s,
                1e3 * e.predicted_s, 100 * (e.predicted_s / e.measured_s - 1), e.rms_log, e.worst_ratio, e.worst.c_str());
  }
  if (measured_all > 0)
    std::printf("%-14s %4s %14.4f %14.4f %+9.1f%%\n", "all", "", 1e3 * measured_all, 1e3 * predicted_all,
                100 * (predicted_all / measured_all - 1));
  return kExitOk;
}

// Searches the layouts of an experiment's first point (its cluster, model, workload and the
// switches the search does not vary), prints the top `top` by simulated step time, and with
// `spec_out` writes a runnable spec holding them as `ptdp` strategy entries (`cpbench run FILE`
// then records them, with their MFU, in results.json).
int cmd_search(const std::string& experiment, const std::vector<std::string>& sets, size_t top,
               const std::string& spec_out, const fs::path& experiments_dir) {
  auto ref = resolve_experiment(experiment, experiments_dir);
  if (!ref) return report_errors(ref.errors());
  // Where the spec goes is checked before the search, which may take minutes.
  if (std::error_code ec; !spec_out.empty() && fs::is_directory(spec_out, ec))
    return report_errors(Errors{{{"--spec-out", "", spec_out + " is a folder: give the path of a file to write"}}});
  Errors set_errors;
  auto spec = load_spec(ref->file, ref->name, SpecOptions{experiments_dir, parse_sets(sets, set_errors), {}});
  if (!set_errors.list.empty()) return report_errors(set_errors);
  if (!spec) return report_errors(spec.errors());
  if (spec->points.empty()) return report_errors(Errors{{{ref->file.string(), "", "no points"}}});
  const PointConfig& p = spec->points.front();
  const auto& w = p.workload;
  const GlobalBatch batch = w.batch();
  const bool tty = isatty(STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  // Progress on stderr: each phase in tenths (a line each when stderr is not a terminal), the
  // bounding phase with the time left at its rate so far, the simulations with the best so far.
  auto phase_start = start;
  std::string phase;
  size_t shown = 0;
  auto show = [&](const SearchProgress& w) {
    const auto now = std::chrono::steady_clock::now();
    if (phase != w.phase) std::tie(phase, phase_start, shown) = std::make_tuple(std::string(w.phase), now, size_t{0});
    const size_t tenth = w.total ? 10 * w.done / w.total : 10;
    if (w.done != w.total && tenth < shown) return;
    shown = tenth + 1;
    char line[320];
    if (phase == "bounding") {
      const double elapsed = std::chrono::duration<double>(now - phase_start).count();
      std::snprintf(line, sizeof line, "search: bounding %zu/%zu layouts whose sizes divide (plan, memory, a lower bound on the step), %.0f s left",
                    w.done, w.total, w.done ? elapsed / w.done * (w.total - w.done) : 0.0);
    } else {
      std::snprintf(line, sizeof line, "search: simulated %zu of %zu that fit, lowest bound first (%zu pruned: their bound cannot rank); best %s, %.3f s",
                    w.done - w.pruned, w.total, w.pruned, w.best.c_str(), w.best_step_s);
    }
    std::fprintf(stderr, tty ? "\r%s\x1b[K%s" : "%s%s", line, w.done == w.total || !tty ? "\n" : "");
  };
  const SearchResult found = search_configurations(p.cluster, p.model, batch, p.parallel, p.flops_definition, SearchSpace{}, top,
                                                   show, std::max(1u, std::thread::hardware_concurrency()));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %s on %lld GPUs of %s, %zu sequences\n", ref->name.c_str(), p.model.name.c_str(),
              static_cast<long long>(p.parallel.num_gpus), p.cluster.name.c_str(), batch.lengths.size());
  std::printf("%zu combinations: %zu do not divide or pair, %zu out of memory (no simulation), %zu infeasible, %zu "
              "simulated, %zu pruned by a lower bound on their step (no simulation), in %.1f s\n",
              found.enumerated, found.invalid, found.out_of_memory, found.infeasible, found.simulated, found.pruned,
              seconds);
  std::printf("%4s  %-40s %8s %12s %10s %10s %10s\n", "rank", "layout", "MFU", "tokens/s/GPU", "step (s)", "bound (s)",
              "peak GiB");
  for (size_t i = 0; i < found.top.size(); ++i) {
    const auto& m = found.top[i].metrics;
    std::printf("%4zu  %-40s %7.1f%% %12.1f %10.3f %10.3f %10.1f\n", i + 1, found.top[i].label().c_str(),
                100 * m.at("mfu"), m.at("tokens_per_s_per_gpu"), m.at("step_time_s"), m.at("step_time_lower_bound_s"),
                m.at("peak_memory_gib"));
  }
  if (spec_out.empty()) return kExitOk;
  auto raw = load_json_file(ref->file);
  if (!raw) return report_errors(raw.errors());
  json out = *raw;
  for (const char* key : {"cases", "grid", "published", "plot"}) out.erase(key);
  out["description"] = "The top " + std::to_string(found.top.size()) + " layouts `cpbench search " + ref->name +
                       "` found (by simulated step time), as ptdp entries: " + out.value("description", std::string());
  out["strategies"] = json::array();
  for (const SearchCandidate& c : found.top) {
    const ParallelConfig& L = c.layout;
    out["strategies"].push_back({{"name", "ptdp"},
                                 {"label", c.label()},
                                 {"set",
                                  {{"parallel.tp", L.tp},
                                   {"parallel.cp", L.cp},
                                   {"parallel.pp", L.pp},
                                   {"parallel.vp", L.vp},
                                   {"parallel.recompute", L.recompute},
                                   {"parallel.activation_offload_ratio", L.activation_offload_ratio},
                                   {"parallel.micro_batch_size", L.micro_batch_size},
                                   {"parallel.sequence_parallel", L.sequence_parallel},
                                   {"parallel.tp_comm_overlap", L.tp_comm_overlap}}}});
  }
  if (auto st = write_file_atomic(spec_out, out.dump(2) + "\n"); !st) {
    std::cerr << "cpbench: error:\n" << st.error_str() << "\n";
    return kExitFailed;
  }
  std::fprintf(stderr, "cpbench: wrote %s (run it with: cpbench run %s)\n", spec_out.c_str(), spec_out.c_str());
  return kExitOk;
}

// Fits chosen efficiency constants of the stack an experiment's points run on (`stack`, when
// given, must be that one) to its published values of `metric`, trained on the labels in `train`
// (all when empty), prints every value before the held-out ones, and writes the fitted stack with
// its fit record.
int cmd_calibrate_experiment(const std::string& experiment, const std::string& stack, const std::vector<std::string>& keys,
                             const std::vector<std::string>& metrics, const std::vector<std::string>& train,
                             const std::string& train_match, const std::string& out, const fs::path& experiments_dir) {
  auto ref = resolve_experiment(experiment, experiments_dir);
  if (!ref) return report_errors(ref.errors());
  auto spec = load_spec(ref->file, ref->name, SpecOptions{experiments_dir, {}, {}});
  if (!spec) return report_errors(spec.errors());
  if (spec->points.empty()) return report_errors(Errors{{{ref->file.string(), "", "no points"}}});
  std::set<std::string> trained(train.begin(), train.end());
  if (!train_match.empty()) {
    // Labels often hold commas, which --train splits on: a pattern picks them instead.
    std::regex pattern;
    try {
      pattern = std::regex(train_match, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return report_errors(Errors{{{"--train-match", "", "not a regular expression: " + std::string(e.what())}}});
    }
    size_t matched = 0;
    for (const PublishedValue& pv : spec->published)
      if (pv.kind == "value" && std::find(metrics.begin(), metrics.end(), pv.metric) != metrics.end() &&
          std::regex_search(pv.label, pattern)) {
        trained.insert(pv.label);
        ++matched;
      }
    if (matched == 0)
      return report_errors(Errors{{{"--train-match", "", "'" + train_match + "' matches no published value of the fitted metrics"}}});
  }
  const ClusterSpec& first = spec->points.front().cluster;
  json raw;
  if (!stack.empty()) {
    fs::path file = fs::path(stack).extension() == ".json" ? fs::path(stack) : experiments_dir / "stacks" / (stack + ".json");
    auto j = load_stack_json(file);
    if (!j) return report_errors(j.errors());
    raw = *j;
  } else if (!first.stack_file.empty()) {
    auto j = load_stack_json(first.stack_file);
    if (!j) return report_errors(j.errors());
    raw = *j;
  } else {
    return report_errors(Errors{{{ref->file.string(), "", "its stack is written inline: give --stack FILE"}}});
  }
  auto fit = fit_stack_to_experiment(*spec, raw, keys, metrics, trained);
  if (!fit) return report_errors(fit.errors());
  for (const std::string& k : keys)
    std::printf("%-28s %.4g\n", k.c_str(), fit->stack["efficiency"][k]["value"].get<double>());
  for (const FitRow& r : fit->rows)
    std::printf("%-32s published %10.4g  before %10.4g %+6.1f%%  after %10.4g %+6.1f%%  %s\n", r.label.c_str(),
                r.published, r.before, 100 * (r.before / r.published - 1), r.reproduced,
                100 * (r.reproduced / r.published - 1), r.trained ? "fitted" : "held out");
  std::printf("rms log error: fitted %.4f, held out %.4f\n", fit->train_rms_log, fit->holdout_rms_log);
  if (auto st = write_stack(out, fit->stack); !st) {
    std::cerr << "cpbench: error:\n" << st.error_str() << "\n";
    return kExitFailed;
  }
  std::cerr << "cpbench: wrote " << out << "\n";
  // As core/experiment/fit.cpp writes the sources of the constants it fitted.
  warn_constants_at_bounds(fit->stack["efficiency"], "fitted by cpbench calibrate --experiment " + spec->name + " ", out);
  return kExitOk;
}

// `calibrate --local`: apps/exec.cpp measures this machine and writes one object (machine facts,
// memory and efficiency) to `stack_out`, starting from a100_80gb_dgx.json's "efficiency" in the
// folder it is given. That folder is a temporary one holding the A100 machine with its default
// stack beside it, as exec.cpp reads it; the object is then split into the stack preset
// (`stack_out`) and the hardware preset (`hardware_out`) naming it as its default stack.
int cmd_calibrate_local_presets(const std::string& stack_out, const std::string& hardware_out,
                                const fs::path& experiments_dir) {
  const fs::path a100 = experiments_dir / "hardware" / "a100_80gb_dgx.json";
  auto start = stack_to_fit(a100.string(), "", experiments_dir);
  auto machine = load_json_file(a100);
  if (!start || !machine) return report_errors(start ? machine.errors() : start.errors());
  const fs::path scratch = fs::temp_directory_path() / ("cpbench_calibrate_local_" + std::to_string(::getpid()));
  json one = *machine;
  one.erase("default_stack");
  one["memory"] = start->stack["memory"];
  one["efficiency"] = start->stack["efficiency"];
  std::error_code ec;
  fs::create_directories(scratch / "hardware", ec);
  if (auto st = write_file_atomic(scratch / "hardware" / "a100_80gb_dgx.json", one.dump(2)); !st) {
    std::cerr << "cpbench: error:\n" << st.error_str() << "\n";
    return kExitFailed;
  }
  // The rank before the call: without a launcher cmd_calibrate_local opens and closes MPI itself.
  const int rank = mpi_rank();
  const int code = cmd_calibrate_local(stack_out, scratch);
  fs::remove_all(scratch, ec);
  if (code != kExitOk || rank != 0) return code;
  auto written = load_json_file(stack_out);
  if (!written) return report_errors(written.errors());
  json stack = {{"name", fs::path(stack_out).stem().string()},
                {"description", "This machine's own stack, as cpbench calibrate --local measured it: OpenBLAS SGEMM, the "
                                "tiled CPU flash-attention kernels of kernels/cpu, MPI transfers between ranks on one host "
                                "(fitted to " + fs::path(stack_out).replace_extension(".csv").string() + ")."},
                {"memory", (*written)["memory"]},
                {"efficiency", (*written)["efficiency"]}};
  json hardware = *written;
  hardware.erase("memory");
  hardware.erase("efficiency");
  hardware["name"] = fs::path(hardware_out).stem().string();
  hardware["default_stack"] = stack_reference(stack_out, hardware_out);
  for (const auto& [file, text] : {std::pair{hardware_out, hardware.dump(2)}, std::pair{stack_out, stack.dump(2)}})
    if (auto st = write_file_atomic(file, text + "\n"); !st) {
      std::cerr << "cpbench: error:\n" << st.error_str() << "\n";
      return kExitFailed;
    }
  std::cerr << "cpbench: wrote " << hardware_out << " (the machine) and " << stack_out << " (its stack)\n";
  // core/runtime/local_measure fits to the measurements it wrote beside the stack.
  warn_constants_at_bounds(stack["efficiency"], fitted_source_prefix(fs::path(stack_out).replace_extension(".csv").string()),
                           stack_out);
  return kExitOk;
}

int cmd_list(bool show_strategies, const fs::path& experiments_dir) {
  if (show_strategies) {
    for (const auto& s : strategies()) std::printf("%-16s %s\n", s.name.c_str(), s.summary.c_str());
    std::printf("\nreconfiguration strategies (points with \"reconfigure\": a change of layout):\n");
    for (const auto& s : reconfiguration_strategies()) std::printf("%-16s %s\n", s.name.c_str(), s.summary.c_str());
    return kExitOk;
  }
  for (const auto& name : list_experiments(experiments_dir)) {
    auto raw = load_json_file(experiments_dir / (name + ".json"));
    std::string desc = raw && raw->is_object() ? raw->value("description", "") : "(unreadable: run it for details)";
    std::printf("%-40s %s\n", name.c_str(), desc.c_str());
  }
  return kExitOk;
}

int run_cli(int argc, char** argv) {
  CLI::App app{"cpbench — reproduce and compare parallelism strategies for LLM training on variable-length data"};
  app.set_version_flag("--version", [] { return version_text(); });
  app.require_subcommand(1);
  std::string experiments_dir;
  app.add_option("--experiments", experiments_dir,
                 "folder of experiment specs and presets (default: $CPBENCH_EXPERIMENTS, else the first experiments/ "
                 "upward from the current directory, else beside the executable, in its parent folder or in "
                 "../share/cpbench/ where `cmake --install` puts it)")
      ->envname("CPBENCH_EXPERIMENTS");

  bool show_strategies = false;
  auto* list = app.add_subcommand("list", "list the registered experiments (or strategies)");
  list->add_flag("--strategies", show_strategies, "list the registered strategies instead");

  std::vector<std::string> preset_names;
  bool audit = false, audit_full = false;
  auto* presets = app.add_subcommand(
      "presets", "the hardware and stack presets, each constant counted by the kind of evidence it rests on (datasheet, "
                 "published or device measurement, calibration fit, estimate, assumption)");
  presets->add_option("names", preset_names, "hardware or stack presets (default: all)");
  presets->add_flag("--audit", audit, "every constant: value, kind and source");
  presets->add_flag("--full", audit_full, "with --audit, sources uncut");

  RunArgs ra;
  auto* run = app.add_subcommand("run", "run an experiment and write DIR/NAME/results.json and results.csv");
  run->add_option("experiment", ra.experiment, "registered name (see `cpbench list`) or a spec file")->required();
  run->add_option("--out", ra.out, "results folder")->capture_default_str();
  run->add_option("--set", ra.sets, "override a per-point field for every point, e.g. parallel.tp=2 (repeatable)");
  run->add_option("--jobs,-j", ra.jobs, "worker threads per process")->check(CLI::Range(1, 1024))->capture_default_str();
  run->add_flag("--resume", ra.resume, "keep the finished points of an earlier run of the same spec");
  run->add_flag("--trace", ra.trace, "write a Perfetto/Chrome timeline per point under DIR/NAME/traces/");
  run->add_option("--first", ra.first, "run only the first N points of the spec (a quick check)")
      ->check(CLI::Range(size_t{1}, std::numeric_limits<size_t>::max()))
      ->each([&ra](const std::string&) { ra.first_given = true; });
  run->add_flag("--dry-run", ra.dry_run,
                "print each resolved point's plan and predicted step time; no results are written");
  run->add_option("--progress-every", ra.progress_every_s,
                  "seconds without output after which the points still running are named with their elapsed "
                  "time (0: never)")
      ->check(finite_range(0.0, 1e6))
      ->capture_default_str();
  run->add_option("--cpu-budget", ra.cpu_budget_s,
                  "cpu backend: seconds a plan may be predicted to take here before it is skipped")
      ->check(finite_range(0.0, 1e6))
      ->capture_default_str();
  std::string backend_help = "where plans are evaluated:";
  for (const Backend& b : backends()) backend_help += std::string(" ") + b.name + " (" + b.help + ");";
  backend_help.pop_back();
  run->add_option("--backend", ra.backend, backend_help)
      ->check(CLI::IsMember(backend_names()))
      ->capture_default_str();

  std::string cal_file, cal_preset, cal_stack, cal_out, cal_hardware_out;
  auto* calibrate = app.add_subcommand("calibrate", "fit a software-stack preset's efficiency constants to measured op "
                                                    "times or published values, and write the fitted stack");
  bool cal_local = false;
  calibrate->add_option("measurements", cal_file, "CSV of measured ops: op,key=value;key=value,time_s");
  calibrate->add_option("--preset", cal_preset, "hardware preset (name or file) the measurements were taken on");
  calibrate->add_option("--stack", cal_stack,
                        "stack preset (name or file) to start from; default: the hardware's default stack, or with "
                        "--experiment the stack its points run on");
  calibrate->add_flag("--local", cal_local,
                      "measure this machine (under mpirun -np 2 for transfers) into a stack (--out) and a hardware "
                      "preset (--hardware-out)");
  calibrate->add_option("--out", cal_out, "where to write the fitted stack preset (its name is the file's)");
  bool cal_check = false;
  calibrate->add_flag("--check", cal_check,
                      "fit nothing: print the stack's error per op family on the measurements and their sums, measured "
                      "and predicted (a layer replayed on a device: scripts/measure_gpu_ops.py --replay)");
  calibrate->add_option("--hardware-out", cal_hardware_out, "--local: where to write the measured hardware preset");
  std::string cal_experiment, cal_train_match;
  std::vector<std::string> cal_fit, cal_train, cal_metric = {"tflops_per_gpu"};
  calibrate->add_option("--experiment", cal_experiment,
                        "instead of measurements: fit --fit constants of the experiment's stack to its published values "
                        "(the stack records the fit, and results mark those values as calibration)");
  calibrate->add_option("--fit", cal_fit, "--experiment: the efficiency constants to fit (comma separated)")->delimiter(',');
  calibrate->add_option("--metric", cal_metric,
                        "--experiment: the published metrics to fit (comma separated: one loss over all of them)")
      ->delimiter(',')
      ->capture_default_str();
  calibrate->add_option("--train", cal_train,
                        "--experiment: labels of the published values to fit on (comma separated; default all, the rest "
                        "are held out)")->delimiter(',');
  calibrate->add_option("--train-match", cal_train_match,
                        "--experiment: also fit on the published values whose label matches this regular expression "
                        "(ECMAScript, searched anywhere in the label)");

  ExecArgs ea;
  std::string lengths_text;  // --lengths as typed: CLI11's split drops empty items ("64,,64")
  auto add_exec_options = [&ea, &lengths_text](CLI::App* sub) {
    sub->add_option("--layout", ea.layout,
                    "single | ring | zigzag | all_gather | a2a | a2a+p2p | double_ring | dcp (DCP's blockwise "
                    "placement, planned as the dcp strategy plans a CP group)")
        ->capture_default_str();
    sub->add_option("--gpus-per-node", ea.gpus_per_node, "dcp: the job's ranks per simulated node (0: all on one)")
        ->check(CLI::Range(0, 1 << 20))
        ->capture_default_str();
    sub->add_option("--block-tokens", ea.block_tokens, "dcp: tokens per data block (0: DCP's heuristic)")
        ->check(CLI::Range(int64_t{0}, kMaxExecLength))
        ->capture_default_str();
    sub->add_option("--mask", ea.mask, "full | causal | lambda | shared_question | causal_blockwise")->capture_default_str();
    sub->add_option("--lengths", lengths_text, "sequence lengths in tokens (comma separated)");
    sub->add_option("--dataset", ea.dataset, "or: a dataset preset to sample sequences from");
    sub->add_option("--tokens", ea.tokens, "token budget when sampling a dataset")
        ->check(CLI::Range(int64_t{1}, kMaxExecLength))
        ->capture_default_str();
    sub->add_option("--seed", ea.seed, "seed of the sampled lengths and of the inputs")->capture_default_str();
    sub->add_option("--heads", ea.heads, "query heads")->check(CLI::Range(1, 1024))->capture_default_str();
    sub->add_option("--kv-heads", ea.kv_heads, "key/value heads (GQA)")->check(CLI::Range(1, 1024))->capture_default_str();
    sub->add_option("--head-dim", ea.head_dim, "head dimension")->check(CLI::Range(1, 1024))->capture_default_str();
    sub->add_option("--a2a-size", ea.a2a_size, "a2a+p2p, double_ring: the inner all-to-all group size")
        ->check(CLI::Range(0, 1 << 20))
        ->capture_default_str();
    sub->add_option("--window", ea.window, "double_ring: all-to-all groups per inner ring (LoongTrain's window)")
        ->check(CLI::Range(0, 1 << 20))
        ->capture_default_str();
    sub->add_flag("--pad", ea.pad, "pad sequences to the layout's divisibility rule instead of rejecting them");
    sub->add_flag("--backward", ea.backward, "also run the backward pass");
    sub->add_option("--dtype", ea.dtype, "values on the wire: bf16 (as training runs) or fp32")
        ->check(CLI::IsMember({"bf16", "fp32"}))
        ->capture_default_str();
    sub->add_flag("--per-tile", ea.per_tile,
                  "one kernel call per tile and the backward exchanged before and after all tiles, instead of the "
                  "experiments' TransformerEngine style (fused stages, pipelined backward)");
    sub->add_option("--timeout", ea.timeout_s, "seconds a rank waits for a peer before the job is aborted")
        ->check(finite_range(1e-3, kMaxTimeout_s))
        ->capture_default_str();
    sub->add_option("--time-limit", ea.time_limit_s,
                    "refuse (exit 2) a run predicted to take longer here, by the plan simulated with the machine's "
                    "preset (cpu_local; validate: --preset)")
        ->check(finite_range(1e-3, kMaxTimeout_s))
        ->capture_default_str();
    sub->add_option("--backend", ea.backend,
                    "cpu: the MPI ranks of this job with CPU kernels; cuda: --ranks threads of this process on its "
                    "GPU with CUDA kernels, or under mpirun one GPU per rank over NCCL (without a device it says so "
                    "and exits 1)")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
    sub->add_option("--ranks", ea.ranks, "--backend cuda: the plan's ranks, as threads sharing the GPU")
        ->check(CLI::Range(1, 1024));
    sub->add_option("--kernels", ea.kernels,
                    "--backend cuda: exact (our SIMT kernels, fp32) or fast (bf16 arithmetic: cuDNN's fused attention "
                    "for tiles of its mask modes, our tensor-core forward for the others; needs --dtype bf16)")
        ->check(CLI::IsMember({"exact", "fast"}))
        ->capture_default_str();
    sub->add_flag("--dynamic-cp", ea.dynamic_cp,
                  "plan the batch with Megatron's Dynamic-CP (strategy dynamic_cp) over the job's ranks and run every "
                  "round, each group as TransformerEngine's --layout (zigzag, all_gather, a2a, a2a+p2p; padded) on "
                  "its ranks");
    sub->add_option("--max-seqlen-per-rank", ea.max_seqlen_per_rank,
                    "--dynamic-cp: tokens one rank may hold (max_seqlen_per_dp_cp_rank)")
        ->check(CLI::Range(int64_t{1}, kMaxExecLength));
  };
  auto* exec = app.add_subcommand("exec", "plan a batch's attention as `run` plans a point (a CP layout, DCP or "
                                          "Dynamic-CP), execute every round on the MPI ranks of this job (mpirun -np N) "
                                          "and compare with the single-device reference");
  add_exec_options(exec);
  std::string validate_preset = "cpu_local";
  auto* validate = app.add_subcommand("validate", "execute a CP layout here and simulate the same plan with a preset: "
                                                  "measured against predicted time");
  add_exec_options(validate);
  validate->add_option("--preset", validate_preset, "hardware preset (name or file) to simulate with")->capture_default_str();

  std::string search_experiment, search_spec_out;
  std::vector<std::string> search_sets;
  size_t search_top = 5;
  auto* search = app.add_subcommand("search", "search the layouts (TP, CP, PP, layers per virtual stage, checkpointing, "
                                              "offload ratio) of an experiment's first point by simulated step time");
  search->add_option("experiment", search_experiment, "registered name or a spec file: its first point's cluster, model, "
                                                      "workload and unsearched switches")->required();
  search->add_option("--set", search_sets, "override a field of the point before searching (repeatable)");
  search->add_option("--top", search_top, "how many layouts to print")->check(CLI::Range(1, 1000))->capture_default_str();
  search->add_option("--spec-out", search_spec_out, "write the top layouts as a runnable spec (ptdp entries)");

  ReshardArgs rs;
  auto* reshard = app.add_subcommand("reshard", "Tenplex: re-shard a model's training state from one TP,PP,DP layout to "
                                                "another on the MPI ranks of this job (one per GPU the change involves; without mpirun it prints the count and the plan), "
                                                "checked bit for bit and against the plan's bytes");
  reshard->add_option("--from", rs.from, "source layout t,p,d[,dist-opt]")->required();
  reshard->add_option("--to", rs.to, "target layout t,p,d[,dist-opt]")->required();
  reshard->add_option("--model", rs.model, "model preset (experiments/models/NAME.json); the tiny_* presets fit one machine")
      ->capture_default_str();
  reshard->add_option("--lost", rs.lost, "ranks of --from lost to a failure (their state is gone)")->delimiter(',');
  reshard->add_option("--gpus-per-node", rs.gpus_per_node, "GPUs per node (link classes)")->check(CLI::Range(1, 1024))
      ->capture_default_str();
  reshard->add_option("--staging-mib", rs.staging_mib, "staging memory per rank and stage, MiB (0: one stage)")
      ->check(CLI::Range(0.0, 1e9));
  reshard->add_option("--max-seq", rs.max_seq, "rows of a learned position table")->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  reshard->add_option("--timeout", rs.timeout_s, "seconds a rank waits for a peer")->check(CLI::Range(1.0, 604800.0))
      ->capture_default_str();

  CommbenchArgs cb;
  auto* commbench = app.add_subcommand(
      "commbench", "nccl-tests' table for the ranks of this job (mpirun -np N, one process per rank or GPU): time, algbw, "
                   "busbw and #wrong of send/recv, all-to-all, all-gather, reduce-scatter and all-reduce over a range "
                   "of sizes, every output checked exactly; --csv writes the rows `cpbench calibrate` reads");
  std::vector<std::string> commbench_op_names;
  for (const CommbenchOp& op : commbench_ops()) commbench_op_names.push_back(op.name);
  commbench->add_option("--ops", cb.options.ops, "operations, comma separated (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember(commbench_op_names));
  // CLI11 reads "-5" into an unsigned value as 2^64 − 5: a sign is refused before the size is read.
  const CLI::Validator unsigned_size([](std::string& text) {
    return text.find_first_of("+-") == std::string::npos ? std::string() : "a size has no sign, got " + text;
  }, "");
  commbench->add_option("-b,--min-bytes", cb.options.min_bytes, "smallest size in bytes (K, M, G: powers of 1024)")
      ->check(unsigned_size)
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  commbench->add_option("-e,--max-bytes", cb.options.max_bytes, "largest size in bytes (at most 4G)")
      ->check(unsigned_size)
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  commbench->add_option("-f,--step-factor", cb.options.step_factor, "each size is the last one times this")
      ->check(CLI::Range(std::uint64_t{2}, std::uint64_t{1} << 20))
      ->capture_default_str();
  commbench->add_option("-n,--iters", cb.options.iters, "timed iterations per size")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  commbench->add_option("-w,--warmup", cb.options.warmup, "untimed iterations before them")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  commbench->add_option("--backend", cb.backend,
                        "mpi: the job's MPI ranks on host memory; nccl: NCCL, one GPU per rank (local rank % devices)")
      ->check(CLI::IsMember({"mpi", "nccl"}))
      ->capture_default_str();
  commbench->add_option("--csv", cb.csv, "write the collectives' and sendrecv's times as `cpbench calibrate`'s CSV");
  commbench->add_option("--seed", cb.options.seed, "seed of the checked values")->capture_default_str();

  CompareArgs ca;
  auto* compare = app.add_subcommand("compare", "rank every strategy on your own sequence lengths, model and cluster "
                                                "(same batches for all), and say what to run in Megatron-LM and torchtitan");
  compare->add_option("--lengths", ca.request.lengths, "your lengths: one per line, a CSV with a header, JSON lines, or a "
                                                       "folder of *.jsonl")->required();
  compare->add_option("--column", ca.request.column, "the CSV column or JSON field of the token count (default: the only "
                                                     "column, else length, num_tokens, tokens, …)");
  compare->add_option("--model", ca.request.model, "a model preset name, or a Hugging Face config.json (or its folder)")
      ->required();
  compare->add_option("--hardware", ca.request.hardware, "hardware preset (experiments/hardware)")->capture_default_str();
  compare->add_option("--stack", ca.request.stack, "software stack preset (default: the hardware's)");
  compare->add_option("--gpus", ca.request.num_gpus, "GPU count")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  compare->add_option("--global-batch-sequences", ca.request.global_batch_sequences, "global batch in sequences")
      ->check(CLI::Range(1, 1 << 30));
  compare->add_option("--global-batch-tokens", ca.request.global_batch_tokens, "global batch in tokens (sequences taken "
                                                                               "until the next would overflow it)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50));
  compare->add_option("--max-length", ca.request.max_length, "longest sequence trained (default: the file's longest)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  compare->add_option("--overlong", ca.request.overlong, "lengths above --max-length: error, clip (cut) or drop")
      ->check(CLI::IsMember({"error", "clip", "drop"}))->capture_default_str();
  compare->add_option("--max-seqlen-per-rank", ca.request.max_seqlen_per_rank,
                      "Megatron's max_seqlen_per_dp_cp_rank for packing and Dynamic-CP (default: max length / a node's GPUs)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  compare->add_option("--mask", ca.request.mask, "attention mask of every sequence")->capture_default_str();
  compare->add_option("--batches", ca.request.batches, "batches averaged per strategy")->check(CLI::Range(1, 1000))
      ->capture_default_str();
  compare->add_option("--seed", ca.request.seed, "seed of the batches' shuffle")->capture_default_str();
  compare->add_option("--tp", ca.request.tp, "base tensor-parallel size (default: chosen from memory)")->check(CLI::Range(1, 1024));
  compare->add_option("--pp", ca.request.pp, "base pipeline-parallel size (default: chosen from memory)")->check(CLI::Range(1, 1024));
  compare->add_flag("--quick", ca.request.quick, "fewer variants (p2p CP only, full recompute, two batches, a narrower search)");
  compare->add_option("--out", ca.out, "output folder")->capture_default_str();
  compare->add_option("--jobs,-j", ca.jobs, "worker threads")->check(CLI::Range(1, 1024))->capture_default_str();

  std::string show_file;
  auto* show = app.add_subcommand("show", "print a results file: points, then published vs reproduced");
  show->add_option("file", show_file, "results.json, or the folder holding it")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitBadInput;
  }
  if (!*show && !*commbench && experiments_dir.empty()) {  // `show` reads a results file only, commbench nothing
    std::error_code ec;
    auto found = find_experiments_dir(fs::current_path(ec), fs::read_symlink("/proc/self/exe", ec));
    if (!found) return report_errors(found.errors());
    experiments_dir = found->string();
  }
  if (*list) return cmd_list(show_strategies, experiments_dir);
  if (*presets) {
    auto text = audit_presets(experiments_dir, preset_names, audit, audit_full ? 0 : 100);
    if (!text) return report_errors(text.errors());
    std::cout << *text;
    return kExitOk;
  }
  if (*reshard) return cmd_reshard(rs, experiments_dir);
  if (*commbench) return cmd_commbench(cb);
  if (*search) return cmd_search(search_experiment, search_sets, search_top, search_spec_out, experiments_dir);
  if (*run) {
    for (int i = 0; i < argc; ++i) ra.command_line += (i ? " " : "") + shell_quote(argv[i]);
    ra.resume_command = ra.command_line + (ra.resume ? "" : " --resume");
    return cmd_run(ra, experiments_dir);
  }
  if (*exec || *validate) {
    if (!lengths_text.empty()) {
      std::stringstream items(lengths_text);
      std::string item;
      for (size_t i = 1; std::getline(items, item, ','); ++i) {
        size_t used = 0;
        long long v = 0;
        try {
          v = std::stoll(item, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (item.empty() || used != item.size() || v < 1 || v > kMaxExecLength) {
          std::cerr << "cpbench: error:\ncommand line: --lengths: item " << i << " is "
                    << (item.empty() ? std::string("empty") : "\"" + item + "\"")
                    << ": expected a whole number of tokens from 1 to " << kMaxExecLength << "\n";
          return kExitBadInput;
        }
        ea.lengths.push_back(v);
      }
      if (lengths_text.back() == ',') {
        std::cerr << "cpbench: error:\ncommand line: --lengths: the last item is empty\n";
        return kExitBadInput;
      }
    }
    if (ea.lengths.empty() == ea.dataset.empty()) {
      std::cerr << (ea.lengths.empty() ? "cpbench: give --lengths or --dataset\n"
                                       : "cpbench: error:\ncommand line: --dataset: give --lengths or --dataset, not "
                                         "both (the sequences would come from --lengths alone)\n");
      return kExitBadInput;
    }
    if (ea.kernels == "fast" && (ea.backend != "cuda" || ea.dtype != "bf16")) {
      std::cerr << "cpbench: error:\ncommand line: --kernels fast: applies to --backend cuda with --dtype bf16 (its "
                   "bf16 arithmetic is checked against the reference with bf16's tolerance)\n";
      return kExitBadInput;
    }
    if (ea.ranks > 0 && ea.backend != "cuda") {
      std::cerr << "cpbench: error:\ncommand line: --ranks: applies to --backend cuda (thread ranks on the GPU); with "
                   "cpu the ranks are the job's: mpirun -np N\n";
      return kExitBadInput;
    }
    return *exec ? cmd_exec(ea, experiments_dir) : cmd_validate(ea, validate_preset, experiments_dir);
  }
  if (*compare) {
    for (int i = 0; i < argc; ++i) ca.command_line += (i ? " " : "") + std::string(i == 0 ? "cpbench" : argv[i]);
    return cmd_compare(ca, experiments_dir);
  }
  if (*calibrate) {
    if (cal_check) {
      if (cal_file.empty() || cal_preset.empty() || cal_local || !cal_experiment.empty()) {
        std::cerr << "cpbench calibrate --check: give a measurements file and --preset (and --stack), nothing else\n";
        return kExitBadInput;
      }
      return cmd_calibrate_check(cal_file, cal_preset, cal_stack, experiments_dir);
    }
    if (cal_out.empty()) {
      std::cerr << "cpbench calibrate: --out is required (where to write the fitted stack preset)\n";
      return kExitBadInput;
    }
    if (std::error_code ec; fs::is_directory(cal_out, ec) || (!cal_hardware_out.empty() && fs::is_directory(cal_hardware_out, ec)))
      return report_errors(Errors{{{"command line", fs::is_directory(cal_out, ec) ? "--out" : "--hardware-out",
                                    "is a folder: give the path of the preset file to write"}}});
    if (cal_local) {
      if (cal_hardware_out.empty()) {
        std::cerr << "cpbench calibrate --local: give --hardware-out for the measured machine\n";
        return kExitBadInput;
      }
      return cmd_calibrate_local_presets(cal_out, cal_hardware_out, experiments_dir);
    }
    if (!cal_experiment.empty()) {
      if (cal_fit.empty()) {
        std::cerr << "cpbench calibrate --experiment: give --fit\n";
        return kExitBadInput;
      }
      return cmd_calibrate_experiment(cal_experiment, cal_stack, cal_fit, cal_metric, cal_train, cal_train_match, cal_out,
                                      experiments_dir);
    }
    if (cal_file.empty() || cal_preset.empty()) {
      std::cerr << "cpbench calibrate: give a measurements file and --preset, or --local\n";
      return kExitBadInput;
    }
    return cmd_calibrate(cal_file, cal_preset, cal_stack, cal_out, experiments_dir);
  }
  return cmd_show(show_file);
}

}  // namespace

int main(int argc, char** argv) {
  bool mpi = under_mpi_launcher();
  if (mpi) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);  // see core/runtime/mpi_session.h
    name_rank_on_termination();
  }
  int code = kExitFailed;
  // Library code reports bad input as values; an exception that still escapes (a bug, or memory
  // running out) becomes a message and exit 1 rather than std::terminate's abort (exit 134). Under
  // a launcher the other ranks may be waiting for this one: the job is aborted, naming the rank.
  try {
    code = run_cli(argc, argv);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (mpi) MpiCommunicator::abort_job("unexpected error: " + what, kExitFailed);
    std::cerr << "cpbench: error: unexpected: " << what << "\n";
    return kExitFailed;
  }
  if (mpi) {
    // Every rank agrees on the exit code, so mpirun reports the failure once.
    int worst = code;
    MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    code = worst;
    MPI_Finalize();
  }
  return code;
}
