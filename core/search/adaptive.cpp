#include "core/search/adaptive.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "core/evaluate/evaluate.h"
#include "core/strategies/dynamic_cp.h"
#include "core/strategies/dynamic_cp_dev.h"
#include "core/strategies/dynamic_cp_solver.h"
#include "core/strategies/packing.h"

namespace cpbench {

const std::vector<AdaptiveCandidate>& adaptive_candidates() {
  static const std::vector<AdaptiveCandidate> table = {{"packing", plan_packing},
                                                       {"dynamic_cp", plan_dynamic_cp},
                                                       {"dynamic_cp_dev", plan_dynamic_cp_dev},
                                                       {"dynamic_cp_solver", plan_dynamic_cp_solver}};
  return table;
}

BatchFeatures batch_features(const GlobalBatch& batch, const ParallelConfig& layout) {
  BatchFeatures f;
  f.rank_capacity = layout.max_seqlen_per_dp_cp_rank;
  double sum = 0, sum_sq = 0, long_tokens = 0;
  for (int64_t L : batch.lengths) {
    f.longest = std::max(f.longest, L);
    sum += double(L);
    sum_sq += double(L) * double(L);
    if (f.rank_capacity > 0 && L > f.rank_capacity) long_tokens += double(L);
  }
  const double n = double(batch.lengths.size());
  if (n > 0 && sum > 0) {
    const double mean = sum / n;
    f.length_cv = std::sqrt(std::max(0.0, sum_sq / n - mean * mean)) / mean;
    f.long_token_share = long_tokens / sum;
  }
  return f;
}

std::string adaptive_rule_choice(const BatchFeatures& f) {
  if (f.rank_capacity <= 0 || f.longest <= f.rank_capacity) return "packing";
  return f.long_token_share >= 0.5 ? "dynamic_cp_solver" : "dynamic_cp_dev";
}

namespace {

std::string seconds(double s) {
  std::ostringstream o;
  o.precision(4);
  o << s << " s";
  return o.str();
}

}  // namespace

PlanOutcome plan_adaptive_oracle(const StrategyInput& in) {
  EvalInput eval{in.cluster, in.model, in.batch, "megatron", {}, {}, 0};
  PlanOutcome best;
  double best_step = std::numeric_limits<double>::infinity();
  std::string best_name, priced, refused;
  for (const auto& c : adaptive_candidates()) {
    PlanOutcome o = c.plan(in);
    if (o.status != "ok") {
      refused += std::string(refused.empty() ? "" : "; ") + c.name + ": " + o.reason;
      continue;
    }
    const Evaluation e = evaluate(eval, o.plan, "sim");
    auto step = e.metrics.find("step_time_s");
    if (e.status != "ok" || step == e.metrics.end()) {
      refused += std::string(refused.empty() ? "" : "; ") + c.name + ": " + e.reason;
      continue;
    }
    priced += std::string(priced.empty() ? "" : ", ") + c.name + " " + seconds(step->second);
    if (step->second < best_step) {  // ties keep the earlier candidate: the choice is deterministic
      best_step = step->second;
      best = std::move(o);
      best_name = c.name;
    }
  }
  if (best_name.empty()) return PlanOutcome::infeasible("no candidate runs this batch: " + refused);
  best.reason = "oracle chose " + best_name + " (" + priced + (refused.empty() ? "" : "; could not run: " + refused) + ")";
  return best;
}

PlanOutcome plan_adaptive_rule(const StrategyInput& in) {
  const BatchFeatures f = batch_features(in.batch, in.parallel);
  const std::string choice = adaptive_rule_choice(f);
  for (const auto& c : adaptive_candidates())
    if (choice == c.name) {
      PlanOutcome o = c.plan(in);
      std::ostringstream why;
      why << "rule chose " << choice << " (longest " << f.longest << " tokens, rank capacity " << f.rank_capacity
          << ", long-token share " << f.long_token_share << ")";
      o.reason = o.status == "ok" ? why.str() : why.str() + ": " + o.reason;
      return o;
    }
  return PlanOutcome::error("adaptive rule chose an unknown candidate " + choice);
}

}  // namespace cpbench
