#include "core/experiment/runner.h"

#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <unistd.h>

#include "core/evaluate/evaluate.h"
#include "core/experiment/journal.h"
#include "core/experiment/metrics.h"
#include "core/experiment/strategy_registry.h"
#include "core/common/parallel_for.h"
#include "core/search/frontier.h"
#include "core/strategies/hypergraph.h"

namespace cpbench {
namespace {

namespace fs = std::filesystem;
// A finished point travels to rank 0 as a header (its size in bytes, or kDone: the rank has sent
// every point it finished) and then its JSON. Communicator tags match in order per peer.
constexpr int kTagHeader = 7301;
constexpr int kTagPoint = 7302;
constexpr uint64_t kDone = ~uint64_t{0};

// Rank 0's side: a header receive kept posted from every other rank, polled between points.
class PointInbox {
 public:
  explicit PointInbox(Communicator& comm) : comm_(comm), headers_(comm.size(), 0), pending_(comm.size()) {}
  // Posts the first header receive from every other rank.
  Status open() {
    for (int r = 1; r < comm_.size(); ++r)
      if (auto s = post(r); !s) return s;
    return ok_status();
  }
  // One finished point that arrived, if any (its wire JSON); counts the ranks that said done.
  Expected<std::optional<std::string>> poll() {
    for (int r = 1; r < comm_.size(); ++r) {
      if (!pending_[r].pending()) continue;
      auto done = comm_.test(pending_[r]);
      if (!done) return done.errors();
      if (!*done) continue;
      if (headers_[r] == kDone) {
        ++done_ranks_;
        continue;  // nothing more comes from r
      }
      std::string wire(headers_[r], '\0');
      if (auto s = comm_.recv(std::as_writable_bytes(std::span<char>(wire)), r, kTagPoint); !s) return s.errors();
      if (auto s = post(r); !s) return s.errors();
      return std::optional<std::string>(std::move(wire));
    }
    return std::optional<std::string>();
  }
  bool all_done() const { return done_ranks_ == comm_.size() - 1; }

 private:
  Status post(int r) {
    auto req = comm_.irecv(std::as_writable_bytes(std::span<uint64_t>(&headers_[r], 1)), r, kTagHeader);
    if (!req) return req.errors();
    pending_[r] = std::move(*req);
    return ok_status();
  }
  Communicator& comm_;
  std::vector<uint64_t> headers_;
  std::vector<Request> pending_;
  int done_ranks_ = 0;
};

// Another rank's side: a point (or kDone) to rank 0.
Status send_point(Communicator& comm, const std::string& wire) {
  const uint64_t header = wire.size();
  if (auto s = comm.send(std::as_bytes(std::span<const uint64_t>(&header, 1)), 0, kTagHeader); !s) return s;
  return comm.send(std::as_bytes(std::span<const char>(wire)), 0, kTagPoint);
}
Status send_done(Communicator& comm) {
  const uint64_t header = kDone;
  return comm.send(std::as_bytes(std::span<const uint64_t>(&header, 1)), 0, kTagHeader);
}

std::string sanitize(const std::string& id) {
  std::string s;
  for (char c : id) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '_';
  return s;
}

json result_to_wire(size_t index, const PointResult& r) {
  return {{"index", index}, {"id", r.id},           {"status", r.status},
          {"reason", r.reason}, {"metrics", r.metrics}, {"timings", r.timings}};
}

std::pair<size_t, PointResult> result_from_wire(const json& j) {
  PointResult r{j["id"], j["status"], j["reason"], j["metrics"].get<std::map<std::string, double>>(),
                j["timings"].get<std::map<std::string, double>>()};
  return {j["index"].get<size_t>(), r};
}

// Progress on stderr: a bar with points done/total and ETA on a terminal, plain lines otherwise;
// and, for points that run long, a line every `every_s` seconds naming them and how long they have
// run (started/finished record them; heartbeat() is called from its own thread).
class Progress {
 public:
  Progress(std::string name, size_t total, size_t already_done, double every_s)
      : name_(std::move(name)), total_(total), done_(already_done), tty_(isatty(STDERR_FILENO)),
        start_(std::chrono::steady_clock::now()), start_done_(already_done), every_s_(every_s),
        last_line_(start_) {}

  void started(size_t index, const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    running_[index] = {id, std::chrono::steady_clock::now()};
  }
  void finished(size_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(index);
  }

  // Names the points of this process running for every_s or longer, once nothing was printed for
  // every_s.
  void heartbeat() {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (running_.empty() || every_s_ <= 0 || std::chrono::duration<double>(now - last_line_).count() < every_s_) return;
    std::string line;
    for (const auto& [index, point] : running_) {
      const double elapsed = std::chrono::duration<double>(now - point.second).count();
      if (elapsed < every_s_) continue;
      char text[32];
      std::snprintf(text, sizeof text, " (%.1f s)", elapsed);
      line += " " + point.first + text;
    }
    if (line.empty()) return;
    line = name_ + ": still running" + line;
    std::fprintf(stderr, "%s%s\n", tty_ ? "\r" : "", line.c_str());
    std::fflush(stderr);
    last_line_ = now;
  }

  void point_done(const std::string& id, const std::string& status) {
    std::lock_guard<std::mutex> lock(mu_);
    last_line_ = std::chrono::steady_clock::now();
    ++done_;
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    size_t ran = done_ - start_done_;
    double eta = ran ? elapsed / ran * (total_ - done_) : 0;
    double rate = elapsed > 0 ? ran / elapsed : 0;  // points per second of this run
    if (tty_) {
      constexpr int kWidth = 30;
      int filled = total_ ? static_cast<int>(kWidth * done_ / total_) : kWidth;
      std::fprintf(stderr, "\r%s [%s%s] %zu/%zu  %.3g points/s  ETA %.0fs ", name_.c_str(),
                   std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(), done_, total_, rate,
                   eta);
      if (done_ == total_) std::fprintf(stderr, "\n");
    } else {
      std::fprintf(stderr, "%s: [%zu/%zu] %s %s (%.3g points/s, ETA %.0fs)\n", name_.c_str(), done_, total_,
                   id.c_str(), status.c_str(), rate, eta);
    }
    std::fflush(stderr);
  }

 private:
  std::string name_;
  size_t total_, done_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  size_t start_done_;
  double every_s_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point last_line_;
  std::map<size_t, std::pair<std::string, std::chrono::steady_clock::time_point>> running_;
};

// Calls progress.heartbeat() every 50 ms on its own thread while it lives.
class HeartbeatThread {
 public:
  explicit HeartbeatThread(Progress* progress) {
    if (!progress) return;
    thread_ = std::thread([this, progress] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, std::chrono::milliseconds(50), [this] { return stop_; })) progress->heartbeat();
    });
  }
  ~HeartbeatThread() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

namespace {

// A reconfiguration point: the layouts before (the point's "parallel") and after ("reconfigure")
// and the route its strategy gives the state.
PlannedPoint plan_change(const PointConfig& point) {
  PlannedPoint out;
  const ParallelConfig& p = point.parallel;
  const ReconfigureConfig& r = point.reconfigure;
  // load_spec refused what cannot divide (check_reconfigure): cp = 1, tp·pp dividing both counts.
  ReshardRequest q;
  q.from = StateLayout{p.tp, p.pp, p.num_gpus / (p.tp * p.pp), p.distributed_optimizer};
  q.to = StateLayout{r.tp, r.pp, r.num_gpus / (r.tp * r.pp), r.distributed_optimizer};
  q.gpus_per_node = point.cluster.gpus_per_node;
  q.lost = r.lost;
  q.to_gpus = r.target_gpus;
  q.max_seq = r.max_seq;
  const ReconfigurationStrategyInfo* strategy = find_reconfiguration_strategy(point.strategy);
  if (!strategy) return {"error", "unknown reconfiguration strategy " + point.strategy, {}, {}, {}, {}, {}};
  const auto start = std::chrono::steady_clock::now();
  auto planned = plan_reconfiguration(point.model, q, strategy->store);
  out.plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!planned) return {"infeasible", planned.error_str(), {}, {}, out.plan_ms, {}, {}};
  out.change = std::move(*planned);
  return out;
}

}  // namespace

PlannedPoint plan_point(const PointConfig& point, std::optional<GlobalBatch> batch) {
  if (point.reconfigure.present) return plan_change(point);
  PlannedPoint out;
  if (auto why = check_parallel_config(point.parallel); !why.empty()) return {"infeasible", why, {}, {}, {}, {}, {}};
  const StrategyInfo* strategy = find_strategy(point.strategy);
  if (!strategy) return {"error", "unknown strategy " + point.strategy, {}, {}, {}, {}, {}};
  out.batch = batch ? std::move(*batch) : point.workload.batch();
  const auto start = std::chrono::steady_clock::now();
  PlanOutcome planned = strategy->plan(StrategyInput{point.cluster, point.model, point.parallel, out.batch, &point.search});
  out.plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  out.status = planned.status;
  out.reason = planned.reason;
  out.plan = std::move(planned.plan);
  return out;
}

std::string describe_point(const PointConfig& point) {
  PlannedPoint pp = plan_point(point);
  if (pp.status != "ok") return "    " + pp.status + ": " + pp.reason + "\n";
  if (pp.change) {
    Evaluation e = evaluate_reconfiguration(point.cluster, point.model, *pp.change, "sim");
    char line[300];
    if (e.status == "ok")
      std::snprintf(line, sizeof line, "    %s → %s: %s; network %.3g GB, local %.3g GB, busiest node %.3g GB\n    predicted (sim): %.3g s\n",
                    pp.change->request.from.str().c_str(), pp.change->request.to.str().c_str(),
                    pp.change->store == StateStore::parallel
                        ? (std::to_string(pp.change->transfers.transfers.size()) + " slices from their cheapest holders").c_str()
                        : "the state through node 0's store",
                    e.metrics["reshard_network_bytes"] / 1e9, e.metrics["reshard_local_bytes"] / 1e9,
                    e.metrics["reshard_critical_bytes"] / 1e9, e.metrics["reconfigure_time_s"]);
    else
      std::snprintf(line, sizeof line, "    %s: %s\n", e.status.c_str(), e.reason.c_str());
    return line;
  }
  // A point of several batches: its first batch's plan (a run plans and prices each).
  const std::string batches = point.workload.batches > 1
                                  ? "    batch 1 of " + std::to_string(point.workload.batches) + " (the run reports their mean)\n"
                                  : "";
  std::string out = batches + (pp.reason.empty() ? "" : "    " + pp.reason + "\n") + plan_summary(pp.plan, point.cluster);
  // The prediction is the sim backend's (a dry run executes nothing, whatever the backend).
  Evaluation e = evaluate(EvalInput{point.cluster, point.model, pp.batch, point.flops_definition, {}, {}, 0}, pp.plan,
                          "sim");
  char line[160];
  if (e.status == "ok" && pp.plan.attention_only)  // one layer's attention: no step, no memory
    std::snprintf(line, sizeof line, "    predicted (sim): attention %.4g s (forward %.4g s), %.4g TFLOP/s per GPU\n",
                  e.metrics["attention_time_s"], e.metrics["attention_fwd_s"], e.metrics["attention_tflops_per_gpu"]);
  else if (e.status == "ok")
    std::snprintf(line, sizeof line, "    predicted (sim): step %.4g s, %.4g TFLOP/s per GPU, %.3g GiB peak\n",
                  e.metrics["step_time_s"], e.metrics["tflops_per_gpu"], e.metrics["peak_memory_gib"]);
  else
    std::snprintf(line, sizeof line, "    %s: ", e.status.c_str());
  return out + line + (e.status == "ok" ? "" : e.reason + "\n");
}

namespace {

// The backend's verdict on a planned point: its planning time, the strategy's note beside the
// backend's, the metrics (each one the registry knows). May throw.
PointResult evaluate_planned(const PointConfig& point, const PlannedPoint& pp, const fs::path& trace_path,
                             const PointBackend& backend) {
  PointResult r{point.id, "ok", "", {}, {}};
  if (pp.plan_ms) r.timings["plan_time_ms"] = *pp.plan_ms;
  if (pp.status != "ok") {
    r.status = pp.status;
    r.reason = pp.reason;
    return r;
  }
  EvalInput in{point.cluster, point.model, pp.batch, point.flops_definition, trace_path,
               backend.experiments_dir / "hardware" / "cpu_local.json", backend.cpu_budget_s};
  in.world = backend.world;
  in.kernels = backend.kernels;
  in.device = backend.device;
  if (pp.memory) in.memory = &*pp.memory;
  Evaluation out = pp.change ? evaluate_reconfiguration(point.cluster, point.model, *pp.change, backend.name)
                             : evaluate(in, pp.plan, backend.name);
  r.status = out.status;
  // The strategy's note (what a search chose), then the backend's.
  r.reason = pp.reason.empty() || out.reason.empty() ? pp.reason + out.reason : pp.reason + "; " + out.reason;
  r.metrics = std::move(out.metrics);
  r.timings.insert(out.timings.begin(), out.timings.end());
  for (const auto& [k, v] : r.metrics) {
    if (!find_metric(k)) {
      r.status = "error";
      r.reason = "backend " + backend.name + " reported unknown metric " + k;
    }
  }
  return r;
}

PointResult exception_result(const PointConfig& point, const std::exception& e) {
  return {point.id, "error", std::string("exception: ") + e.what(), {}, {}};
}

}  // namespace

namespace {

PointResult run_point_untimed(const PointConfig& point, const fs::path& trace_path, const PointBackend& backend) {
  try {
    // The strategy decides, and the backend prices what it decided.
    if (point.reconfigure.present || point.workload.batches == 1)
      return evaluate_planned(point, plan_point(point), trace_path, backend);
    // Several batches: each planned and priced on its own (a trace for the first only), the
    // metrics combined as combine_batches says; the first batch that does not run decides.
    std::vector<GlobalBatch> batches = point.workload.all_batches();
    const size_t n = batches.size();
    std::vector<std::map<std::string, double>> metrics, timings;
    PointResult first;
    for (size_t k = 0; k < n; ++k) {
      PointResult r = evaluate_planned(point, plan_point(point, std::move(batches[k])), k == 0 ? trace_path : fs::path(),
                                       backend);
      if (r.status != "ok") {
        r.reason = "batch " + std::to_string(k + 1) + " of " + std::to_string(n) + ": " + r.reason;
        return r;
      }
      metrics.push_back(std::move(r.metrics));
      timings.push_back(std::move(r.timings));
      if (k == 0) first = std::move(r);
    }
    first.metrics = combine_batches(metrics);
    first.timings = combine_batches(timings);
    first.reason = "mean of " + std::to_string(n) + " batches" + (first.reason.empty() ? "" : "; batch 1: " + first.reason);
    return first;
  } catch (const std::exception& e) {
    return exception_result(point, e);
  }
}

}  // namespace

PointResult run_point(const PointConfig& point, const fs::path& trace_path, const PointBackend& backend) {
  const auto start = std::chrono::steady_clock::now();
  PointResult r = run_point_untimed(point, trace_path, backend);
  r.timings["point_time_ms"] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return r;
}

namespace {

// A frontier run (spec "frontier", TensorOpt's frontier tracking, core/search/frontier.h): every
// point planned once and bounded (memory, bytes, a step time it cannot beat) on `jobs` threads, then
// simulated in the order of that bound unless a point already simulated dominates its bounds;
// those are "pruned", naming the point that dominates them. Simulated points get metric
// pareto_optimal. Rank 0 does it all (a frontier run takes seconds); it is not resumable.
// A strategy that needs MPI (DCP partitions with Zoltan) gets its session here, on the main
// thread, before worker threads plan (a plain run starts none). A failure is left to the points.
void prepare_partitioner(const Spec& spec) {
  for (const PointConfig& p : spec.points)
    if (const StrategyInfo* s = find_strategy(p.strategy); s && s->needs_mpi) {
      (void)init_partitioner();
      return;
    }
}

// What evaluate needs of the run's options: the backend, its presets and budget, and the job's ranks
// for a backend that runs every point on all of them.
PointBackend point_backend(const RunOptions& options) {
  const Backend* b = find_backend(options.backend);
  return {options.backend, options.experiments_dir, options.cpu_budget_s,
          b && b->every_rank_together ? options.world : nullptr, options.kernels, options.device};
}

Expected<PointResults> run_frontier(const Spec& spec, const RunOptions& options, int rank, bool together) {
  const size_t n = spec.points.size();
  PointResults results(n);
  // A backend that runs each plan across every rank (cpu) needs them all in every evaluation:
  // they all run the same search, which is deterministic on one thread (the same bounds, the same
  // order, the same pruning), and rank 0 writes. Otherwise rank 0 searches alone.
  if (rank != 0 && !together) return results;
  const int jobs = together ? 1 : std::max(1, options.jobs);
  prepare_partitioner(spec);
  const std::vector<std::string>& objectives = spec.frontier_objectives;
  // An objective of a point from its metrics; "num_gpus" is the layout's. Absent: nullopt.
  auto objective = [&](size_t i, const std::map<std::string, double>& metrics, const std::string& name) -> std::optional<double> {
    if (name == "num_gpus") return static_cast<double>(spec.points[i].parallel.num_gpus);
    auto it = metrics.find(name);
    return it == metrics.end() ? std::nullopt : std::optional<double>(it->second);
  };
  // Each point planned once: bounded from its plan (evaluate_bound: no simulation), and the plan
  // simulated later if the frontier does not prune it.
  std::vector<PlannedPoint> planned(n);
  std::vector<PointResult> bounded(n);
  parallel_for(n, jobs, [&](size_t i) {
    const PointConfig& point = spec.points[i];
    try {
      planned[i] = plan_point(point);
      if (planned[i].status != "ok") {
        bounded[i] = {point.id, planned[i].status, planned[i].reason, {}, {}};
        return;
      }
      // A change of layout is priced in closed form: its exact metrics are its bound.
      const Evaluation b =
          planned[i].change
              ? evaluate_reconfiguration(point.cluster, point.model, *planned[i].change, "sim")
              : evaluate_bound(EvalInput{point.cluster, point.model, planned[i].batch, point.flops_definition, {}, {}, 0},
                               planned[i].plan, &planned[i].memory);
      bounded[i] = {point.id, b.status, b.reason, b.metrics, {}};
    } catch (const std::exception& e) {
      bounded[i] = exception_result(point, e);
    }
  });
  std::vector<std::optional<Objectives>> bounds(n);
  for (size_t i = 0; i < n; ++i) {
    if (bounded[i].status != "ok") {
      results[i] = PointResult{spec.points[i].id, bounded[i].status, bounded[i].reason, {}, {}};
      continue;
    }
    Objectives lb;
    for (const std::string& name : objectives) {
      // The step's bound; what the bound knows exactly (memory, bytes, GPUs); else no bound.
      const std::string key = name == "step_time_s" ? "step_time_lower_bound_s" : name;
      lb.push_back(objective(i, bounded[i].metrics, key).value_or(-std::numeric_limits<double>::infinity()));
    }
    bounds[i] = lb;
  }
  const FrontierResult frontier = track_frontier(bounds, [&](size_t i) -> std::optional<Objectives> {
    PointResult r;
    try {
      r = evaluate_planned(spec.points[i], planned[i], {}, point_backend(options));
    } catch (const std::exception& e) {
      r = exception_result(spec.points[i], e);
    }
    std::optional<Objectives> values;
    if (r.status == "ok") {
      values = Objectives{};
      for (const std::string& name : objectives) {
        auto v = objective(i, r.metrics, name);
        if (!v) values.reset();
        else if (values) values->push_back(*v);
        if (!values) break;
      }
    }
    results[i] = std::move(r);  // each index from one thread
    return values;
  }, jobs);
  size_t on_frontier = 0;
  for (size_t i = 0; i < n; ++i) {
    if (frontier.state[i] == FrontierResult::State::pruned)
      results[i] = PointResult{spec.points[i].id, "pruned",
                               "dominated by " + spec.points[*frontier.dominated_by[i]].id +
                                   " (its objectives at or below this point's bounds; not simulated)",
                               {}, {}};
    else if (frontier.state[i] == FrontierResult::State::evaluated) {
      results[i]->metrics["pareto_optimal"] = frontier.on_frontier[i] ? 1 : 0;
      on_frontier += frontier.on_frontier[i];
    }
  }
  if (rank == 0)
    std::fprintf(stderr, "%s: frontier over %zu points: %zu cannot run, %zu simulated, %zu pruned, %zu on the frontier\n",
               spec.name.c_str(), n, n - frontier.evaluated - frontier.failed - frontier.pruned, frontier.evaluated + frontier.failed,
               frontier.pruned, on_frontier);
  if (rank != 0) return results;
  if (auto s = write_results(options.out_dir / spec.name, spec, current_provenance(spec.seed), results); !s) return s.errors();
  return results;
}

}  // namespace

Expected<PointResults> run_experiment(const Spec& spec, const RunOptions& options) {
  Communicator* world = options.world && options.world->size() > 1 ? options.world : nullptr;
  const int rank = world ? world->rank() : 0, size = world ? world->size() : 1;
  const Backend* backend = find_backend(options.backend);
  if (!backend) return Error{"", "", "unknown backend '" + options.backend + "'"};
  // A backend that runs every point on all ranks together (its plans execute across them).
  const bool together = backend->every_rank_together;
  if (!spec.frontier_objectives.empty()) return run_frontier(spec, options, rank, together && size > 1);
  const fs::path dir = options.out_dir / spec.name;
  // Every rank read the same file, so all agree on which points remain.
  PointResults results = options.finished.empty() ? PointResults(spec.points.size()) : options.finished;
  std::vector<size_t> todo;
  for (size_t i = 0; i < results.size(); ++i)
    if (!results[i]) todo.push_back(i);
  // The cpu backend runs every point on all ranks together (its plans execute across them), on
  // the main thread (MPI is funneled); otherwise points are spread over ranks and threads.
  std::vector<size_t> mine;
  for (size_t k = 0; k < todo.size(); ++k)
    if (together || static_cast<int>(k % size) == rank) mine.push_back(todo[k]);

  Provenance prov = current_provenance(spec.seed);
  std::optional<Progress> progress;
  Journal journal;
  if (rank == 0) {
    progress.emplace(spec.name, spec.points.size(), spec.points.size() - todo.size(), options.progress_every_s);
    // results.json first (with what --resume kept), then a fresh journal: whatever a kill
    // interrupts, every finished point is in one of the two.
    if (auto s = write_results(dir, spec, prov, results); !s) return s.errors();
    if (auto s = journal.open(dir, spec); !s) return s.errors();
  }
  auto stopped = [&] { return options.stop && options.stop->load() != 0; };

  // Worker threads evaluate this rank's points; only the main thread touches MPI and the files.
  std::mutex mu;
  std::deque<std::pair<size_t, PointResult>> finished;
  std::atomic<size_t> next{0};
  auto run_index = [&](size_t i) {
    fs::path trace = options.trace ? dir / "traces" / (sanitize(spec.points[i].id) + ".json") : fs::path();
    if (progress) progress->started(i, spec.points[i].id);
    PointResult r = run_point(spec.points[i], trace, point_backend(options));
    if (progress) progress->finished(i);
    return r;
  };
  HeartbeatThread heartbeat(progress ? &*progress : nullptr);
  auto worker = [&] {
    for (size_t k; !stopped() && (k = next++) < mine.size();) {
      size_t i = mine[k];
      PointResult r = run_index(i);
      std::lock_guard<std::mutex> lock(mu);
      finished.emplace_back(i, std::move(r));
    }
  };
  Status io_status = ok_status(), comm_status = ok_status();
  auto record = [&](size_t i, PointResult r) {
    if (io_status) io_status = journal.append(i, r);
    progress->point_done(spec.points[i].id, r.status);
    results[i] = std::move(r);
  };
  // A point this rank finished: rank 0 records it, the others send it to rank 0.
  auto deliver = [&](size_t i, PointResult r) {
    if (rank == 0) {
      record(i, std::move(r));
      return;
    }
    if (comm_status) comm_status = send_point(*world, result_to_wire(i, r).dump());
    results[i] = std::move(r);
  };
  // Rank 0: records a point another rank sent.
  auto receive = [&](const std::string& wire) {
    auto [i, r] = result_from_wire(json::parse(wire));
    record(i, std::move(r));
  };
  // The end of a run, finished or stopped: results.json gets every finished point, and the
  // journal, now redundant, goes (a failed write leaves it for --resume).
  auto finish = [&]() -> Expected<PointResults> {
    if (rank == 0 && io_status) io_status = write_results(dir, spec, prov, results);
    if (rank == 0 && io_status) io_status = journal.remove();
    if (!io_status) return io_status.errors();
    if (!comm_status) return comm_status.errors();
    return results;
  };
  // Whether any rank was stopped: the ranks of the cpu backend enter each point's collectives
  // together, so they agree before each one (a rank stopping alone would leave the others waiting).
  auto stopped_anywhere = [&] {
    double any = stopped() ? 1 : 0;
    if (world && comm_status) comm_status = world->all_reduce(std::span<double>(&any, 1), ReduceOp::kMax);
    return any != 0 || !comm_status;
  };
  if (together) {
    for (size_t i : mine) {
      if (stopped_anywhere()) break;
      PointResult r = run_index(i);
      if (rank == 0) record(i, std::move(r));
      else results[i] = std::move(r);
    }
    return finish();
  }
  // A device backend runs one point at a time on the rank's GPU, so that a point's measured time
  // is its own.
  int jobs = backend->needs_devices ? 1 : std::max(1, std::min<int>(options.jobs, static_cast<int>(std::max<size_t>(mine.size(), 1))));
  std::vector<std::thread> threads;
  prepare_partitioner(spec);
  for (int t = 0; t < jobs; ++t) threads.emplace_back(worker);

  std::optional<PointInbox> inbox;
  if (world && rank == 0) {
    inbox.emplace(*world);
    comm_status = inbox->open();
  }
  // Rank 0: every point another rank sent so far.
  auto receive_arrived = [&]() -> size_t {
    size_t n = 0;
    while (comm_status) {
      auto wire = inbox->poll();
      if (!wire) comm_status = wire.errors();
      if (!wire || !*wire) break;
      receive(**wire);
      ++n;
    }
    return n;
  };
  size_t local_left = mine.size();
  size_t remote_left = rank == 0 ? todo.size() - mine.size() : 0;
  while ((local_left > 0 || remote_left > 0) && comm_status) {
    // Stopped: the workers start no new point; what they are running is recorded after the join.
    if (stopped()) break;
    bool idle = true;
    std::deque<std::pair<size_t, PointResult>> batch;
    {
      std::lock_guard<std::mutex> lock(mu);
      batch.swap(finished);
    }
    for (auto& [i, r] : batch) {
      idle = false;
      --local_left;
      deliver(i, std::move(r));
    }
    if (inbox && remote_left > 0)
      if (const size_t n = receive_arrived(); n > 0) {
        remote_left -= std::min(n, remote_left);
        idle = false;
      }
    if (idle) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (auto& t : threads) t.join();
  // Points that finished while a stop was handled: every rank sends rank 0 what it has not sent
  // yet, then a done marker; rank 0 records its own and receives until every rank is done, so a
  // stop loses no finished point on any rank.
  for (auto& [i, r] : finished) deliver(i, std::move(r));
  if (world && rank != 0 && comm_status) comm_status = send_done(*world);
  // Rank 0 receives until every rank said done (a rank may still be finishing a long point: no
  // deadline here, as for the points themselves).
  while (inbox && comm_status && !inbox->all_done())
    if (receive_arrived() == 0 && !inbox->all_done()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return finish();
}

}  // namespace cpbench
