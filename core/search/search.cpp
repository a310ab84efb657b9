#include "core/search/search.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>
#include <utility>

#include "core/evaluate/evaluate.h"
#include "core/strategies/ptdp.h"

namespace cpbench {

std::string SearchCandidate::label() const {
  const ParallelConfig& L = layout;
  char text[160];
  std::snprintf(text, sizeof text, "t%lld c%lld p%lld vp%lld %s α=%g b%lld", static_cast<long long>(L.tp),
                static_cast<long long>(L.cp), static_cast<long long>(L.pp), static_cast<long long>(L.vp),
                L.recompute.c_str(), L.activation_offload_ratio, static_cast<long long>(L.micro_batch_size));
  return text;
}

SearchResult search_configurations(const ClusterSpec& cluster, const ModelShape& model, const GlobalBatch& batch,
                                   const ParallelConfig& base, const std::string& flops_definition,
                                   const SearchSpace& space, size_t top_k,
                                   const std::function<void(size_t, size_t)>& progress, int jobs) {
  SearchResult out;
  // The layouts that can run, planned (cheap); their evaluation is the cost, spread over threads.
  std::vector<std::pair<ParallelConfig, Plan>> planned;
  for (int64_t t : space.tp)
    for (int64_t c : space.cp)
      for (int64_t p : space.pp)
        for (int64_t l : space.layers_per_virtual_stage)
          for (const std::string& mode : space.recompute)
            for (double alpha : space.offload_ratio)
              for (int64_t b : space.micro_batch_size) {
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
                L.tp_comm_overlap = base.tp_comm_overlap && t > 1;
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
                PlanOutcome outcome = plan_ptdp(StrategyInput{cluster, model, L, batch});
                if (outcome.status != "ok") {
                  ++out.invalid;
                  continue;
                }
                planned.emplace_back(L, std::move(outcome.plan));
              }
  std::vector<Evaluation> evaluated(planned.size());
  std::atomic<size_t> next{0}, done{0};
  std::mutex mu;
  auto worker = [&] {
    for (size_t i; (i = next++) < planned.size();) {
      evaluated[i] = evaluate(EvalInput{cluster, model, batch, flops_definition, {}, {}, 0}, planned[i].second);
      const size_t finished = ++done;
      if (progress) {
        std::lock_guard<std::mutex> lock(mu);
        progress(finished, planned.size());
      }
    }
  };
  std::vector<std::thread> threads;
  for (int k = 1; k < std::max(1, jobs); ++k) threads.emplace_back(worker);
  worker();
  for (auto& th : threads) th.join();
  std::vector<SearchCandidate> ran;
  for (size_t i = 0; i < planned.size(); ++i) {
    const Evaluation& e = evaluated[i];
    if (e.status != "ok") {
      ++(e.reason.rfind("out of memory", 0) == 0 ? out.out_of_memory : out.infeasible);
      continue;
    }
    ++out.simulated;
    ran.push_back({planned[i].first, e.metrics});
  }
  // Ties keep the enumeration order (deterministic whatever the thread count).
  std::stable_sort(ran.begin(), ran.end(), [](const SearchCandidate& a, const SearchCandidate& b) {
    return a.metrics.at("step_time_s") < b.metrics.at("step_time_s");
  });
  if (ran.size() > top_k) ran.resize(top_k);
  out.top = std::move(ran);
  return out;
}

}  // namespace cpbench
