#include "core/sim/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <queue>
#include <stdexcept>
#include <utility>

namespace cpbench {

int TaskGraph::add(TaskSpec t) {
  device_count_ = std::max(device_count_, t.device + 1);
  stream_count_ = std::max(stream_count_, t.stream + 1);
  tasks_.push_back(std::move(t));
  return static_cast<int>(tasks_.size()) - 1;
}

namespace {

// An event of the simulation: a task became ready, or a link finished its current task.
struct Event {
  double time_s;
  uint64_t seq;  // push order: equal times are served first-come first-served
  int32_t id;    // task id (kReady) or dense link index (kLinkFree)
  int32_t type;
};
constexpr int32_t kReady = 0;
constexpr int32_t kLinkFree = 1;
constexpr int32_t kComputeEnd = 2;  // id: the device; stale unless seq is the device's end_seq
constexpr int32_t kCommEnd = 3;     // id: a contending communication task that ends

struct Later {
  bool operator()(const Event& a, const Event& b) const {
    return a.time_s != b.time_s ? a.time_s > b.time_s : a.seq > b.seq;
  }
};

std::string describe(const TaskGraph& g, int id) {
  const TaskSpec& t = g.task(id);
  return "task " + std::to_string(id) + " '" + t.name + "' (device " + std::to_string(t.device) +
         ", stream " + std::to_string(t.stream) + ")";
}

// Maps arbitrary non-negative ids (collective, link) to 0..n-1; -1 stays -1.
std::vector<int> dense_ids(const std::vector<TaskSpec>& tasks, int TaskSpec::*field, int& count) {
  std::vector<int> ids;
  for (const TaskSpec& t : tasks)
    if (t.*field >= 0) ids.push_back(t.*field);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  count = static_cast<int>(ids.size());
  std::vector<int> dense(tasks.size(), -1);
  for (size_t i = 0; i < tasks.size(); ++i) {
    const int v = tasks[i].*field;
    if (v >= 0) dense[i] = static_cast<int>(std::lower_bound(ids.begin(), ids.end(), v) - ids.begin());
  }
  return dense;
}

std::string validate(const TaskGraph& g) {
  const int n = static_cast<int>(g.size());
  for (int i = 0; i < n; ++i) {
    const TaskSpec& t = g.task(i);
    if (t.device < 0 || t.stream < 0) return describe(g, i) + ": negative device or stream";
    if (!std::isfinite(t.duration_s) || t.duration_s < 0)
      return describe(g, i) + ": duration_s must be finite and >= 0, got " + std::to_string(t.duration_s);
    if (!(t.sm_share >= 0 && t.sm_share <= 1 && t.hbm_share >= 0 && t.hbm_share <= 1 && t.sm_bound >= 0 &&
          t.sm_bound <= 1))
      return describe(g, i) + ": sm_share, hbm_share and sm_bound must lie in [0, 1]";
    if (t.collective >= 0 && t.link >= 0)
      return describe(g, i) + ": a collective member cannot also hold link " + std::to_string(t.link) +
             " (model the transfer as a separate task)";
    for (int d : t.deps)
      if (d < 0 || d >= n)
        return describe(g, i) + ": dependency " + std::to_string(d) + " is not a task id (graph has " +
               std::to_string(n) + " tasks)";
  }
  return "";
}

}  // namespace

Expected<SimResult> simulate_checked(const TaskGraph& g) {
  if (std::string bad = validate(g); !bad.empty()) return Error{"", "", "simulate: " + bad};
  const std::vector<TaskSpec>& tasks = g.tasks();
  const int n = static_cast<int>(tasks.size());
  const int streams_per_device = std::max(1, g.stream_count());

  // Stream order: each task's predecessor and successor on its (device, stream).
  std::vector<int> prev_in_stream(n, -1), next_in_stream(n, -1);
  {
    std::vector<int> last(static_cast<size_t>(g.device_count()) * streams_per_device, -1);
    for (int i = 0; i < n; ++i) {
      int& l = last[static_cast<size_t>(tasks[i].device) * streams_per_device + tasks[i].stream];
      if (l >= 0) next_in_stream[l] = i;
      prev_in_stream[i] = l;
      l = i;
    }
  }
  // Successors through deps, as CSR; pending = deps not yet ended + the stream predecessor.
  std::vector<int> succ_begin(n + 1, 0), pending(n, 0);
  for (int i = 0; i < n; ++i) {
    for (int d : tasks[i].deps) ++succ_begin[d + 1];
    pending[i] = static_cast<int>(tasks[i].deps.size()) + (prev_in_stream[i] >= 0 ? 1 : 0);
  }
  for (int i = 0; i < n; ++i) succ_begin[i + 1] += succ_begin[i];
  std::vector<int> succ(succ_begin[n]);
  {
    std::vector<int> fill(succ_begin.begin(), succ_begin.end() - 1);
    for (int i = 0; i < n; ++i)
      for (int d : tasks[i].deps) succ[fill[d]++] = i;
  }
  int n_collectives = 0, n_links = 0;
  const std::vector<int> coll = dense_ids(tasks, &TaskSpec::collective, n_collectives);
  const std::vector<int> link = dense_ids(tasks, &TaskSpec::link, n_links);
  std::vector<int> coll_begin(n_collectives + 1, 0), coll_arrived(n_collectives, 0);
  for (int i = 0; i < n; ++i)
    if (coll[i] >= 0) ++coll_begin[coll[i] + 1];
  for (int c = 0; c < n_collectives; ++c) coll_begin[c + 1] += coll_begin[c];
  std::vector<int> coll_members(coll_begin[n_collectives]);
  {
    std::vector<int> fill(coll_begin.begin(), coll_begin.end() - 1);
    for (int i = 0; i < n; ++i)
      if (coll[i] >= 0) coll_members[fill[coll[i]]++] = i;
  }
  // Link wait queues: intrusive FIFO lists threaded through wait_next.
  std::vector<char> link_busy(n_links, 0);
  std::vector<int> wait_head(n_links, -1), wait_tail(n_links, -1), wait_next(n, -1);

  SimResult r;
  r.start_s.assign(n, 0.0);
  r.end_s.assign(n, 0.0);
  std::vector<double> ready_s(n, 0.0);
  std::vector<char> arrived(n, 0), ran(n, 0);  // popped as ready; started (deadlock report)
  std::vector<Event> heap_storage;
  heap_storage.reserve(static_cast<size_t>(n) + 16);
  std::priority_queue<Event, std::vector<Event>, Later> heap(Later{}, std::move(heap_storage));
  uint64_t seq = 0;
  int started = 0;

  // Contention (TaskSpec::sm_share): on a device with a contending communication task, its
  // stream-0 compute tasks are elastic — their end is known only when they finish, so they
  // release their successors then; every other task releases them when it starts, its end fixed.
  auto contends = [&](int i) { return tasks[i].kind == 'm' && (tasks[i].sm_share > 0 || tasks[i].hbm_share > 0); };
  std::vector<char> contended(g.device_count(), 0);
  for (int i = 0; i < n; ++i)
    if (contends(i)) contended[tasks[i].device] = 1;
  auto elastic = [&](int i) { return contended[tasks[i].device] && tasks[i].stream == 0 && tasks[i].kind != 'm'; };
  struct DeviceLoad {
    int running = -1;         // the elastic compute task running, or -1
    double remaining_s = 0;   // its work left, in seconds at full rate
    double since_s = 0;       // when remaining_s was last brought up to date
    double sm = 0, hbm = 0;   // shares held by the communication tasks running now
    uint64_t end_seq = 0;     // the seq of its valid kComputeEnd event
  };
  std::vector<DeviceLoad> load(g.device_count());
  auto rate = [&](const DeviceLoad& d) {
    const double b = tasks[d.running].sm_bound;
    return std::max(kMinComputeRate, 1 - (b * d.sm + (1 - b) * d.hbm));
  };
  auto advance = [&](DeviceLoad& d, double t) {  // brings remaining_s to time t
    if (d.running < 0) return;
    d.remaining_s = std::max(0.0, d.remaining_s - (t - d.since_s) * rate(d));
    d.since_s = t;
  };
  auto schedule_end = [&](int device, double t) {
    DeviceLoad& d = load[device];
    if (d.running < 0) return;
    d.end_seq = seq;
    heap.push({t + d.remaining_s / rate(d), seq++, device, kComputeEnd});
  };

  auto release = [&](int s, double end) {
    if (ready_s[s] < end) ready_s[s] = end;
    if (--pending[s] == 0) heap.push({ready_s[s], seq++, s, kReady});
  };
  auto finish = [&](int i, double end) {
    r.end_s[i] = end;
    for (int k = succ_begin[i]; k < succ_begin[i + 1]; ++k) release(succ[k], end);
    if (next_in_stream[i] >= 0) release(next_in_stream[i], end);
    if (link[i] >= 0) heap.push({end, seq++, link[i], kLinkFree});
  };
  auto start = [&](int i, double t) {
    r.start_s[i] = t;
    ran[i] = 1;
    ++started;
    const int device = tasks[i].device;
    if (elastic(i)) {
      load[device] = {i, tasks[i].duration_s, t, load[device].sm, load[device].hbm, 0};
      schedule_end(device, t);
      return;
    }
    if (contends(i)) {
      DeviceLoad& d = load[device];
      advance(d, t);
      d.sm += tasks[i].sm_share;
      d.hbm += tasks[i].hbm_share;
      schedule_end(device, t);
      heap.push({t + tasks[i].duration_s, seq++, i, kCommEnd});
    }
    finish(i, t + tasks[i].duration_s);
  };

  for (int i = 0; i < n; ++i)
    if (pending[i] == 0) heap.push({0.0, seq++, i, kReady});
  // Events pop in non-decreasing time: every push is at or after the current event's time.
  while (!heap.empty()) {
    const Event e = heap.top();
    heap.pop();
    if (e.type == kComputeEnd) {
      DeviceLoad& d = load[e.id];
      if (d.running < 0 || e.seq != d.end_seq) continue;  // rescheduled since
      const int i = d.running;
      d.running = -1;
      finish(i, e.time_s);
      continue;
    }
    if (e.type == kCommEnd) {
      DeviceLoad& d = load[tasks[e.id].device];
      advance(d, e.time_s);
      d.sm = std::max(0.0, d.sm - tasks[e.id].sm_share);
      d.hbm = std::max(0.0, d.hbm - tasks[e.id].hbm_share);
      schedule_end(tasks[e.id].device, e.time_s);
      continue;
    }
    if (e.type == kLinkFree) {
      const int l = e.id;
      const int w = wait_head[l];
      if (w < 0) {
        link_busy[l] = 0;
        continue;
      }
      wait_head[l] = wait_next[w];
      if (wait_head[l] < 0) wait_tail[l] = -1;
      start(w, e.time_s);
      continue;
    }
    const int i = e.id;
    arrived[i] = 1;
    if (coll[i] >= 0) {
      const int c = coll[i];
      if (++coll_arrived[c] == coll_begin[c + 1] - coll_begin[c])
        for (int k = coll_begin[c]; k < coll_begin[c + 1]; ++k) start(coll_members[k], e.time_s);
    } else if (link[i] >= 0) {
      const int l = link[i];
      if (!link_busy[l]) {
        link_busy[l] = 1;
        start(i, e.time_s);
      } else {
        if (wait_tail[l] >= 0) wait_next[wait_tail[l]] = i; else wait_head[l] = i;
        wait_tail[l] = i;
      }
    } else {
      start(i, e.time_s);
    }
  }

  if (started < n) {
    // Every task that never ran waits for another that never ran (an unended dep or stream
    // predecessor, or a collective partner that never became ready), so following "waits for"
    // from any of them must close a cycle; report it.
    auto blocker = [&](int i) -> std::pair<int, std::string> {
      if (pending[i] > 0) {
        if (prev_in_stream[i] >= 0 && !ran[prev_in_stream[i]]) return {prev_in_stream[i], "stream order"};
        for (int d : tasks[i].deps)
          if (!ran[d]) return {d, "dependency"};
      }
      const int c = coll[i];
      for (int k = coll_begin[c]; k < coll_begin[c + 1]; ++k)
        if (!arrived[coll_members[k]])
          return {coll_members[k], "collective " + std::to_string(tasks[i].collective) + " partner"};
      return {-1, ""};
    };
    int first = 0;
    while (ran[first]) ++first;
    std::vector<int> seen_at(n, -1);
    std::vector<std::pair<int, std::string>> path;
    int cur = first;
    while (cur >= 0 && seen_at[cur] < 0) {
      seen_at[cur] = static_cast<int>(path.size());
      auto b = blocker(cur);
      path.push_back({cur, b.second});
      cur = b.first;
    }
    std::string msg = "simulate: deadlock: " + std::to_string(n - started) + " of " + std::to_string(n) +
                      " tasks never ran; wait cycle: ";
    for (size_t k = cur >= 0 ? seen_at[cur] : 0; k < path.size(); ++k)
      msg += describe(g, path[k].first) + " waits for (" + path[k].second + ") ";
    if (cur >= 0) msg += describe(g, cur);
    return Error{"", "", msg};
  }

  r.compute_busy_s.assign(g.device_count(), 0.0);
  r.exposed_comm_s.assign(g.device_count(), 0.0);
  r.comm_busy_s.assign(g.device_count(), 0.0);
  r.contention_s.assign(g.device_count(), 0.0);
  for (int i = 0; i < n; ++i) {
    const TaskSpec& t = tasks[i];
    r.makespan_s = std::max(r.makespan_s, r.end_s[i]);
    if (t.kind == 'm') r.comm_busy_s[t.device] += t.duration_s;
    if (t.blocking && t.stream != 0) r.exposed_comm_s[t.device] += t.duration_s;
    if (t.stream != 0) continue;
    if (t.kind == 'm') {
      r.exposed_comm_s[t.device] += t.duration_s;
    } else if (elastic(i)) {
      r.compute_busy_s[t.device] += r.end_s[i] - r.start_s[i];
      r.contention_s[t.device] += std::max(0.0, r.end_s[i] - r.start_s[i] - t.duration_s);
    } else {
      r.compute_busy_s[t.device] += t.duration_s;
    }
    // The binding communication input: the kind-'m' dep that ended last.
    int comm = -1;
    double other_ready = prev_in_stream[i] >= 0 ? r.end_s[prev_in_stream[i]] : 0.0;
    for (int d : t.deps) {
      if (tasks[d].kind != 'm' || tasks[d].blocking) other_ready = std::max(other_ready, r.end_s[d]);
      else if (comm < 0 || r.end_s[d] > r.end_s[comm]) comm = d;
    }
    if (comm < 0) continue;
    double comm_inputs_ready = 0;
    for (int d : tasks[comm].deps) comm_inputs_ready = std::max(comm_inputs_ready, r.end_s[d]);
    r.exposed_comm_s[t.device] +=
        std::max(0.0, std::min(r.start_s[i], r.end_s[comm]) - std::max(other_ready, comm_inputs_ready));
  }
  return r;
}

SimResult simulate(const TaskGraph& g) {
  Expected<SimResult> r = simulate_checked(g);
  if (!r.ok()) throw std::logic_error(r.error_str());
  return std::move(*r);
}

}  // namespace cpbench
