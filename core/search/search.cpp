#include "core/search/search.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <future>
#include <cstdio>
#include <mutex>
#include <thread>
#include <utility>

#include "core/common/parallel_for.h"
#include "core/evaluate/evaluate.h"
#include "core/sim/cp_attention.h"
#include "core/strategies/ptdp.h"

namespace cpbench {

std::string SearchCandidate::label() const {
  const ParallelConfig& L = layout;
  char text[176];
  std::snprintf(text, sizeof text, "t%lld c%lld p%lld vp%lld %s α=%g b%lld%s%s%s", static_cast<long long>(L.tp),
                static_cast<long long>(L.cp), static_cast<long long>(L.pp), static_cast<long long>(L.vp),
                L.recompute.c_str(), L.activation_offload_ratio, static_cast<long long>(L.micro_batch_size),
                L.tp_comm_overlap ? " tp-overlap" : "", L.overlap_param_gather ? " param-gather-overlap" : "",
                L.cp_comm_overlap && L.cp > 1 ? " cp-overlap" : "");
  return text;
}

namespace {

// An axis of overlap switches: its values, or the base layout's own when it lists none.
std::vector<bool> or_base(const std::vector<bool>& axis, bool base) { return axis.empty() ? std::vector<bool>{base} : axis; }

}  // namespace

SearchResult search_configurations(const ClusterSpec& cluster, const ModelShape& model, const GlobalBatch& batch,
                                   const ParallelConfig& base, const std::string& flops_definition,
                                   const SearchSpace& space, size_t top_k,
                                   const std::function<void(const SearchProgress&)>& progress, int jobs) {
  SearchResult out;
  // The layouts whose sizes divide. Each is planned where it is priced, and the plan dropped: a
  // variable-length batch's plan holds an attention plan per micro-batch, and hundreds of plans
  // held at once take gigabytes. Planning is cheap beside pricing.
  std::vector<ParallelConfig> planned;
  for (int64_t t : space.tp)
    for (int64_t c : space.cp)
      for (int64_t p : space.pp)
        for (int64_t l : space.layers_per_virtual_stage)
          for (const std::string& mode : space.recompute)
            for (double alpha : space.offload_ratio)
              for (int64_t b : space.micro_batch_size)
                for (bool tp_overlap : or_base(space.tp_comm_overlap, base.tp_comm_overlap))
                  for (bool param_overlap : or_base(space.overlap_param_gather, base.overlap_param_gather)) {
                ++out.enumerated;
                // Offloading pairs with activations worth moving and stages to hide behind.
                if (alpha > 0 && (mode == "full" || p < 3)) {
                  ++out.invalid;
                  continue;
                }
                ParallelConfig L = base;
                L.tp = t;
                L.cp = c;
                L.pp = p;
                L.micro_batch_size = b;
                L.recompute = mode;
                L.activation_offload_ratio = alpha;
                L.sequence_parallel = t > 1;
                // An overlap that cannot apply (TP overlap at t = 1; the parameter-gather overlap
                // without the distributed optimizer or with a DP×CP group of one) is one layout
                // with it off, counted once.
                if ((tp_overlap && t == 1 && or_base(space.tp_comm_overlap, base.tp_comm_overlap).size() > 1) ||
                    (param_overlap && (!base.distributed_optimizer || base.num_gpus / (t * p) <= 1) &&
                     space.overlap_param_gather.size() > 1)) {
                  ++out.invalid;
                  continue;
                }
                L.tp_comm_overlap = tp_overlap && t > 1;
                L.overlap_param_gather = param_overlap && base.distributed_optimizer;
                L.vp = 1;
                if (l > 0) {
                  if (p < 2 || model.layers % (p * l) != 0 || model.layers / (p * l) < 2) {
                    ++out.invalid;
                    continue;
                  }
                  L.vp = model.layers / (p * l);
                }
                if (!check_parallel_config(L).empty() || !check_model_split(model, L).empty()) {
                  ++out.invalid;
                  continue;
                }
                planned.push_back(L);
              }
  // The candidates repack one batch: their micro-batches' attention plans recur across pipeline
  // depths, virtual stages, checkpointing and offloading, and are simulated once.
  AttentionCostMemo attention_memo;
  EvalInput in{cluster, model, batch, flops_definition, {}, {}, 0};
  in.attention_memo = &attention_memo;
  // A layout PTD-P cannot plan (the batch does not split over it) is "unplanned": counted with
  // the sizes that do not divide.
  // The bound prices memory by the walk alone: a replayed allocator (milliseconds a stage) runs
  // only for the layouts simulated, where an out-of-memory one is counted as such; a pruned layout
  // could not rank whether or not its allocator would have fit.
  auto price = [&](size_t i, bool bound) {
    PlanOutcome outcome = plan_ptdp(StrategyInput{cluster, model, planned[i], batch});
    if (outcome.status != "ok") return Evaluation{"unplanned", outcome.reason, {}, {}};
    return bound ? evaluate_bound(in, outcome.plan, nullptr, false) : evaluate(in, outcome.plan);
  };
  // First the memory check and a lower bound on each layout's step (evaluate_bound: no
  // simulation); then the simulations in the order of that bound, in rounds of kRound, stopping
  // once the next bound exceeds the k-th best step simulated: those left cannot rank (exact: the
  // top is the one simulating every layout would give). Rounds of a fixed size, not one per
  // thread, keep the counts independent of `jobs`.
  SearchProgress where{"bounding", 0, planned.size(), 0, 0, ""};
  std::mutex mu;
  std::vector<Evaluation> bounds(planned.size());
  parallel_for(planned.size(), jobs, [&](size_t i) {
    bounds[i] = price(i, true);
    std::lock_guard<std::mutex> lock(mu);
    ++where.done;
    if (progress) progress(where);
  });
  std::vector<size_t> order;
  for (size_t i = 0; i < planned.size(); ++i) {
    if (bounds[i].status == "ok")
      order.push_back(i);
    else if (bounds[i].status == "unplanned")
      ++out.invalid;
    else
      ++(bounds[i].reason.rfind("out of memory", 0) == 0 ? out.out_of_memory : out.infeasible);
  }
  auto bound_of = [&](size_t i) { return bounds[i].metrics.at("step_time_lower_bound_s"); };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bound_of(a) < bound_of(b); });
  constexpr size_t kRound = 8;
  std::vector<Evaluation> evaluated(planned.size());
  std::vector<double> steps;  // of the layouts simulated so far
  where = {"simulating", 0, order.size(), 0, 0, ""};
  size_t next = 0;
  while (next < order.size()) {
    if (top_k > 0 && steps.size() >= top_k) {
      std::nth_element(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(top_k - 1), steps.end());
      if (bound_of(order[next]) > steps[top_k - 1]) break;
    }
    const size_t round = std::min(kRound, order.size() - next);
    parallel_for(round, jobs, [&](size_t k) {
      const size_t i = order[next + k];
      evaluated[i] = price(i, false);
      std::lock_guard<std::mutex> lock(mu);
      ++where.done;
      if (const Evaluation& e = evaluated[i];
          e.status == "ok" && (where.best_step_s == 0 || e.metrics.at("step_time_s") < where.best_step_s)) {
        where.best_step_s = e.metrics.at("step_time_s");
        where.best = SearchCandidate{planned[i], {}}.label();
      }
      if (progress) progress(where);
    });
    for (size_t k = 0; k < round; ++k)
      if (const Evaluation& e = evaluated[order[next + k]]; e.status == "ok") steps.push_back(e.metrics.at("step_time_s"));
    next += round;
  }
  out.pruned = order.size() - next;
  if (progress && out.pruned > 0) {
    where.done = order.size();
    where.pruned = out.pruned;
    progress(where);
  }
  std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(next));  // enumeration order
  std::vector<SearchCandidate> ran;
  for (size_t j = 0; j < next; ++j) {
    const size_t i = order[j];
    const Evaluation& e = evaluated[i];
    if (e.status != "ok") {
      ++(e.reason.rfind("out of memory", 0) == 0 ? out.out_of_memory : out.infeasible);
      continue;
    }
    ++out.simulated;
    ran.push_back({planned[i], e.metrics});
    ran.back().metrics["step_time_lower_bound_s"] = bound_of(i);
  }
  // Ties keep the enumeration order (deterministic whatever the thread count).
  std::stable_sort(ran.begin(), ran.end(), [](const SearchCandidate& a, const SearchCandidate& b) {
    return a.metrics.at("step_time_s") < b.metrics.at("step_time_s");
  });
  if (ran.size() > top_k) ran.resize(top_k);
  out.top = std::move(ran);
  return out;
}

namespace {

// The searches this process has run, by their inputs with the rank aside: a spec's points that take
// ranks 1, 2, … of one search (kwai/search_175b) search once, at a depth of at least
// kSearchDepth. Exact: a hit has equal inputs (every field compared; the stack's constants by the
// identity of their shared object, so an equal copy searches again, never the reverse), and the
// top of a pruned search is exact to its depth. Points running at once wait for the one that
// searches. The last kCachedSearches are kept.
struct SearchKey {
  ClusterSpec cluster;
  ModelShape model;
  GlobalBatch batch;
  ParallelConfig base;
  SearchSpace space;  // rank 0
  bool operator==(const SearchKey&) const = default;
};
struct CachedSearch {
  SearchKey key;
  size_t depth;
  std::shared_future<SearchResult> result;
};
constexpr size_t kSearchDepth = 5, kCachedSearches = 4;
std::mutex searches_mu;
std::deque<CachedSearch> searches;

SearchResult search_once(const StrategyInput& in, const SearchSpace& space, size_t depth) {
  SearchKey key{in.cluster, in.model, in.batch, in.parallel, space};
  key.space.rank = 0;
  std::promise<SearchResult> mine;
  std::shared_future<SearchResult> known;
  {
    std::lock_guard<std::mutex> lock(searches_mu);
    for (const CachedSearch& c : searches)
      if (c.depth >= depth && c.key == key) known = c.result;
    if (!known.valid()) {
      searches.push_back({key, std::max(depth, kSearchDepth), mine.get_future().share()});
      if (searches.size() > kCachedSearches) searches.pop_front();
    }
  }
  if (known.valid()) return known.get();
  const int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // The FLOPs definition only names metrics; the ranking is by step time.
  SearchResult found = search_configurations(in.cluster, in.model, in.batch, in.parallel, "megatron", space,
                                             std::max(depth, kSearchDepth), {}, jobs);
  mine.set_value(found);
  return found;
}

}  // namespace

PlanOutcome plan_ptdp_search(const StrategyInput& in) {
  const SearchSpace space = in.search ? *in.search : SearchSpace{};
  const size_t rank = static_cast<size_t>(space.rank);
  const SearchResult found = search_once(in, space, rank);
  char counts[200];
  std::snprintf(counts, sizeof counts, "%zu combinations: %zu do not divide or pair, %zu out of memory, %zu simulated, %zu pruned",
                found.enumerated, found.invalid, found.out_of_memory, found.simulated, found.pruned);
  if (found.top.size() < rank)
    return PlanOutcome::infeasible("the search found " + std::to_string(found.top.size()) + " layouts that run, rank " +
                                   std::to_string(rank) + " asked (" + counts + ")");
  PlanOutcome out = plan_ptdp(StrategyInput{in.cluster, in.model, found.top[rank - 1].layout, in.batch});
  if (out.status == "ok") out.reason = "searched rank " + std::to_string(rank) + ": " + found.top[rank - 1].label() + " (" + counts + ")";
  return out;
}

}  // namespace cpbench
