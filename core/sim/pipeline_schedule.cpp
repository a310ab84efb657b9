#include "core/sim/pipeline_schedule.h"

#include <algorithm>

namespace cpbench {

namespace {

// Megatron forward_backward_pipelining_without_interleaving: warm-up, steady 1F1B, cool-down.
std::vector<PipeOp> one_f_one_b(int p, int m, int stage) {
  const int warmup = std::min(p - stage - 1, m);
  const int remaining = m - warmup;
  std::vector<PipeOp> ops;
  ops.reserve(2 * m);
  for (int k = 0; k < warmup; ++k) ops.push_back({true, k, 0});
  for (int k = 0; k < remaining; ++k) {
    ops.push_back({true, warmup + k, 0});
    ops.push_back({false, k, 0});
  }
  for (int k = remaining; k < m; ++k) ops.push_back({false, k, 0});
  return ops;
}

// Megatron forward_backward_pipelining_with_interleaving; k counts the stage's virtual
// micro-batches (m·v of them) in execution order.
std::vector<PipeOp> interleaved(int p, int m, int v, int stage) {
  const int total = m * v;
  int warmup;
  if (m == p) {
    warmup = total;  // Megatron: "run all forward passes and then all backward passes"
  } else {
    warmup = std::min((p - stage - 1) * 2 + (v - 1) * p, total);
  }
  const int remaining = total - warmup;
  auto op = [&](int k, bool forward) {
    const int in_group = k % (p * v);
    int chunk = in_group / p;
    if (!forward) chunk = v - 1 - chunk;
    return PipeOp{forward, (k / (p * v)) * p + k % p, chunk};
  };
  std::vector<PipeOp> ops;
  ops.reserve(2 * total);
  for (int k = 0; k < warmup; ++k) ops.push_back(op(k, true));
  for (int k = 0; k < remaining; ++k) {
    ops.push_back(op(warmup + k, true));
    ops.push_back(op(k, false));
  }
  for (int k = remaining; k < total; ++k) ops.push_back(op(k, false));
  return ops;
}

}  // namespace

Expected<PipelineSchedule> pipeline_schedule(const std::string& kind, int p, int m, int v) {
  auto fail = [&](const std::string& what) {
    return Error{"", "", "pipeline schedule '" + kind + "' (p = " + std::to_string(p) + ", m = " +
                             std::to_string(m) + ", v = " + std::to_string(v) + "): " + what};
  };
  if (kind != "gpipe" && kind != "1f1b" && kind != "interleaved")
    return fail("unknown kind; expected one of \"gpipe\", \"1f1b\", \"interleaved\"");
  if (p < 1 || m < 1 || v < 1) return fail("p, m and v must be >= 1");
  if (kind != "interleaved" && v != 1) return fail("v (model chunks per stage) must be 1; use \"interleaved\"");
  if (kind == "interleaved") {
    if (v < 2) return fail("interleaving needs v >= 2 model chunks per stage; use \"1f1b\" for v = 1");
    // Megatron-LM (SC'21 version) asserts this: micro-batches are issued in groups of p.
    if (m % p != 0) return fail("the interleaved schedule needs m to be a multiple of p");
  }
  PipelineSchedule s(p);
  for (int stage = 0; stage < p; ++stage) {
    if (kind == "gpipe") {
      for (int k = 0; k < m; ++k) s[stage].push_back({true, k, 0});
      for (int k = 0; k < m; ++k) s[stage].push_back({false, k, 0});
    } else if (kind == "1f1b") {
      s[stage] = one_f_one_b(p, m, stage);
    } else {
      s[stage] = interleaved(p, m, v, stage);
    }
  }
  return s;
}

int consumer_stage(int p, int v, int stage, const PipeOp& op) {
  const int j = op.chunk * p + stage;  // virtual stage
  const int next = op.forward ? j + 1 : j - 1;
  if (next < 0 || next >= p * v) return -1;
  return next % p;
}

std::optional<PipeInput> pipe_input(int p, int v, int stage, const PipeOp& op) {
  const int j = op.chunk * p + stage;
  if (op.forward) {
    if (j == 0) return std::nullopt;
    return PipeInput{true, j - 1};
  }
  return j == p * v - 1 ? PipeInput{true, j} : PipeInput{false, j + 1};
}

namespace {

// A dense index of a schedule's ops by (forward?, virtual stage, micro-batch).
struct OpSlots {
  int p = 0, v = 0, m = 0;
  explicit OpSlots(const PipelineSchedule& schedule) : p(static_cast<int>(schedule.size())) {
    for (const auto& ops : schedule)
      for (const PipeOp& op : ops) {
        m = std::max(m, op.micro_batch + 1);
        v = std::max(v, op.chunk + 1);
      }
  }
  size_t operator()(bool forward, int virtual_stage, int mb) const {
    return (static_cast<size_t>(forward ? 0 : 1) * p * v + virtual_stage) * m + mb;
  }
  size_t of(int stage, const PipeOp& op) const { return (*this)(op.forward, op.chunk * p + stage, op.micro_batch); }
  size_t size() const { return 2 * static_cast<size_t>(p) * v * m; }
};

}  // namespace

Expected<std::vector<std::vector<double>>> pipeline_op_ends(const PipelineSchedule& schedule,
                                                            const std::function<double(int stage, const PipeOp&)>& compute_s,
                                                            const std::function<double(int stage, const PipeOp&)>& blocking_s) {
  const OpSlots slot(schedule);
  const int p = slot.p, v = slot.v;
  std::vector<double> compute_end(slot.size(), -1);
  std::vector<std::vector<double>> ends(p);
  std::vector<double> stage_free(p, 0);
  size_t left = 0;
  for (const auto& ops : schedule) left += ops.size();
  // Sweep the stages, running each as far as its inputs allow, until every op has run.
  while (left > 0) {
    size_t ran = 0;
    for (int s = 0; s < p; ++s)
      for (size_t k = ends[s].size(); k < schedule[s].size(); ++k) {
        const PipeOp& op = schedule[s][k];
        double ready = stage_free[s];
        if (const auto in = pipe_input(p, v, s, op)) {
          const double input = compute_end[slot(in->forward, in->virtual_stage, op.micro_batch)];
          if (input < 0) break;
          ready = std::max(ready, input);
        }
        const double c = ready + compute_s(s, op);
        compute_end[slot.of(s, op)] = c;
        stage_free[s] = c + blocking_s(s, op);
        ends[s].push_back(stage_free[s]);
        ++ran;
      }
    if (ran == 0) return Error{"", "", "the pipeline schedule waits on itself (an op's input never runs)"};
    left -= ran;
  }
  return ends;
}

PipelineTasks append_pipeline_tasks(TaskGraph& g, const PipelineSchedule& schedule,
                                    const std::function<double(int stage, const PipeOp&)>& compute_s,
                                    const std::function<double(int stage, const PipeOp&)>& p2p_s,
                                    int first_device, const OpTail& tail) {
  // Dense lookup (forward?, virtual stage, micro-batch) -> task id; -1 when absent.
  const OpSlots slot(schedule);
  const int p = slot.p, v = slot.v;
  std::vector<int> compute_id(slot.size(), -1);
  std::vector<int> send_id(compute_id.size(), -1);
  std::vector<int> output_id(compute_id.size(), -1);  // a blocking segment that delivers the output
  PipelineTasks ids;
  ids.compute.resize(p);
  ids.send.resize(p);
  ids.done.resize(p);
  // The op that consumes this op's output, as (stage, virtual stage); stage -1 when none.
  auto consumer = [&](int stage, const PipeOp& op) { return consumer_stage(p, v, stage, op); };

  // Ids first (compute tasks, then tail segments, then transfers), so that edges can point forward.
  int next_id = static_cast<int>(g.size());
  for (int s = 0; s < p; ++s)
    for (const PipeOp& op : schedule[s]) {
      ids.compute[s].push_back(next_id);
      compute_id[slot.of(s, op)] = next_id++;
    }
  std::vector<std::vector<std::vector<OpSegment>>> tails(p);
  std::vector<std::vector<int>> first_tail(p);
  for (int s = 0; s < p; ++s)
    for (size_t k = 0; k < schedule[s].size(); ++k) {
      const PipeOp& op = schedule[s][k];
      std::vector<OpSegment> segs;
      if (tail)
        for (OpSegment& seg : tail(s, op))
          if (seg.duration_s > 0) segs.push_back(std::move(seg));
      first_tail[s].push_back(next_id);
      for (const OpSegment& seg : segs) {
        if (seg.carries_output) output_id[slot.of(s, op)] = next_id;
        ++next_id;
      }
      ids.done[s].push_back(segs.empty() ? ids.compute[s][k] : next_id - 1);
      tails[s].push_back(std::move(segs));
    }
  std::vector<std::vector<double>> send_s(p);
  for (int s = 0; s < p; ++s)
    for (const PipeOp& op : schedule[s]) {
      const int to = consumer(s, op);
      const double t = to >= 0 && to != s ? p2p_s(s, op) : 0.0;
      send_s[s].push_back(t);
      if (t > 0) send_id[slot.of(s, op)] = next_id;
      ids.send[s].push_back(t > 0 ? next_id++ : -1);
    }
  g.reserve(static_cast<size_t>(next_id));

  // What the op (mb, virtual stage j) waits for: the producer's transfer if any, else the producer.
  auto input_of = [&](int s, const PipeOp& op) {
    const auto in = pipe_input(p, v, s, op);
    if (!in) return -1;
    const size_t producer = slot(in->forward, in->virtual_stage, op.micro_batch);
    if (send_id[producer] >= 0) return send_id[producer];
    return output_id[producer] >= 0 ? output_id[producer] : compute_id[producer];
  };
  auto name = [](const PipeOp& op) {
    std::string s(1, op.forward ? 'F' : 'B');
    s += std::to_string(op.micro_batch);
    s += '.';
    s += std::to_string(op.chunk);
    return s;
  };
  for (int s = 0; s < p; ++s)
    for (size_t k = 0; k < schedule[s].size(); ++k) {
      const PipeOp& op = schedule[s][k];
      TaskSpec t;
      t.device = first_device + s;
      t.stream = 0;
      t.duration_s = compute_s(s, op);
      t.name = name(op);
      t.kind = 'c';
      if (const int in = input_of(s, op); in >= 0) t.deps.push_back(in);
      // The previous op's blocking tail holds the compute stream.
      if (k > 0 && ids.done[s][k - 1] != ids.compute[s][k - 1]) t.deps.push_back(ids.done[s][k - 1]);
      g.add(std::move(t));
    }
  for (int s = 0; s < p; ++s)
    for (size_t k = 0; k < schedule[s].size(); ++k) {
      int prev = ids.compute[s][k];
      for (const OpSegment& seg : tails[s][k]) {
        TaskSpec t;
        t.device = first_device + s;
        t.stream = seg.stream;
        t.duration_s = seg.duration_s;
        t.name = name(schedule[s][k]) + " " + seg.label;
        t.kind = seg.kind;
        t.blocking = seg.kind == 'm';
        t.deps.push_back(prev);
        prev = g.add(std::move(t));
      }
    }
  for (int s = 0; s < p; ++s)
    for (size_t k = 0; k < schedule[s].size(); ++k) {
      if (ids.send[s][k] < 0) continue;
      const PipeOp& op = schedule[s][k];
      TaskSpec t;
      t.device = first_device + s;
      t.stream = op.forward ? 1 : 2;
      t.duration_s = send_s[s][k];
      t.name = "send ";
      t.name += name(op);
      t.kind = 'm';
      t.deps.push_back(ids.done[s][k]);
      g.add(std::move(t));
    }
  return ids;
}

TaskGraph build_pipeline_graph(const PipelineSchedule& schedule, double fwd_s, double bwd_s, double p2p_s) {
  TaskGraph g;
  append_pipeline_tasks(
      g, schedule, [&](int, const PipeOp& op) { return op.forward ? fwd_s : bwd_s; },
      [&](int, const PipeOp&) { return p2p_s; });
  return g;
}

}  // namespace cpbench
