#include "core/experiment/fit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "core/common/parallel_for.h"
#include "core/cost/calibrate.h"
#include "core/cost/efficiency.h"
#include "core/experiment/results.h"
#include "core/experiment/runner.h"

namespace cpbench {
namespace {

const EfficiencyParamInfo* find_param(const std::string& key) {
  for (const auto& info : efficiency_param_table())
    if (key == info.key) return &info;
  return nullptr;
}

}  // namespace

Expected<FitReport> fit_stack_to_experiment(const Spec& spec, const json& stack, const std::vector<std::string>& keys,
                                            const std::vector<std::string>& metrics,
                                            const std::set<std::string>& train) {
  Diagnostics diag("stack");
  JsonObject o(stack, "", diag);
  const StackSpec parsed = parse_stack(o);
  if (!diag.ok()) return diag.errors();
  std::vector<const EfficiencyParamInfo*> free;
  for (const std::string& k : keys) {
    const EfficiencyParamInfo* info = find_param(k);
    if (!info) return Error{"", "", "unknown efficiency constant '" + k + "'"};
    free.push_back(info);
  }
  if (metrics.empty()) return Error{"", "", "no metric to fit"};
  const std::set<std::string> fitted_metrics(metrics.begin(), metrics.end());
  for (const PointConfig& p : spec.points)
    if (p.cluster.stack != parsed.name)
      return Error{spec.file.string(), "", "point " + p.id + " runs on stack '" + p.cluster.stack + "', not the fitted '" +
                                               parsed.name + "'"};
  for (const std::string& label : train) {
    const bool known = std::any_of(spec.published.begin(), spec.published.end(), [&](const PublishedValue& pv) {
      return pv.kind == "value" && fitted_metrics.count(pv.metric) && pv.label == label;
    });
    if (!known) return Error{spec.file.string(), "/published/values", "no published value of the fitted metrics is labelled '" + label + "'"};
  }
  auto is_trained = [&](const std::string& label) { return train.empty() || train.count(label) > 0; };
  // The points the trained values select: the only ones the search runs.
  std::string metric_names;
  for (const std::string& m : metrics) metric_names += (metric_names.empty() ? "" : ", ") + m;
  std::vector<bool> needed(spec.points.size(), false);
  size_t trained_values = 0;
  for (const PublishedValue& pv : spec.published) {
    if (pv.kind != "value" || !fitted_metrics.count(pv.metric) || !is_trained(pv.label)) continue;
    ++trained_values;
    for (size_t i = 0; i < spec.points.size(); ++i) needed[i] = needed[i] || pv.select.matches(spec.points[i]);
  }
  if (trained_values == 0) return Error{spec.file.string(), "", "no published " + metric_names + " value to fit"};

  const int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // The preset's efficiency object with the free constants set from log-space coordinates u.
  auto efficiency_at = [&](const std::vector<double>& u) {
    json eff = *parsed.efficiency;
    for (size_t i = 0; i < free.size(); ++i)
      eff[free[i]->key]["value"] = std::clamp(std::exp(u[i]), free[i]->lo, free[i]->hi);
    return eff;
  };
  // Every `value` row of the fitted metrics, running all points or only the needed ones.
  auto evaluate = [&](const json& eff, bool all_points) {
    PointResults results(spec.points.size());
    const SharedJson shared = shared_json(eff);
    std::vector<size_t> run;
    for (size_t i = 0; i < spec.points.size(); ++i)
      if (all_points || needed[i]) run.push_back(i);
    parallel_for(run.size(), jobs, [&](size_t k) {
      PointConfig p = spec.points[run[k]];
      p.cluster.efficiency = shared;
      results[run[k]] = run_point(p, {});
    });
    std::vector<FitRow> rows;
    for (const Comparison& c : compute_comparisons(spec, results)) {
      if (c.kind != "value" || !fitted_metrics.count(c.metric)) continue;
      if (!all_points && !is_trained(c.label)) continue;
      FitRow row;
      row.label = c.label;
      row.metric = c.metric;
      row.published = c.published;
      row.reproduced = c.reproduced.value_or(0);
      row.trained = is_trained(c.label);
      rows.push_back(row);
    }
    return rows;
  };
  auto rms = [](const std::vector<FitRow>& rows, bool trained) {
    double sum = 0;
    int n = 0;
    for (const FitRow& r : rows) {
      if (r.trained != trained) continue;
      // A point that failed counts as a factor-of-e miss, so the search moves away from it.
      const double d = r.reproduced > 0 && r.published > 0 ? std::log(r.reproduced / r.published) : 1.0;
      sum += d * d;
      ++n;
    }
    return n ? std::sqrt(sum / n) : 0.0;
  };
  std::vector<double> u;
  for (const auto* info : free) u.push_back(std::log(parsed.efficiency->at(info->key).at("value").get<double>()));
  const std::vector<FitRow> start = evaluate(efficiency_at(u), true);
  size_t trained = 0;
  for (const FitRow& r : start) {
    trained += r.trained;
    if (r.reproduced <= 0) return Error{spec.file.string(), "", "published value '" + r.label + "' has no reproduction"};
  }
  auto loss = [&](const std::vector<double>& x) { return rms(evaluate(efficiency_at(x), false), true); };
  for (double step : {0.3, 0.1, 0.03}) u = nelder_mead(loss, u, step, 60 * static_cast<int>(free.size()));

  FitReport out;
  const json eff = efficiency_at(u);
  out.rows = evaluate(eff, true);
  for (size_t i = 0; i < out.rows.size() && i < start.size(); ++i) out.rows[i].before = start[i].reproduced;
  out.train_rms_log = rms(out.rows, true);
  out.holdout_rms_log = rms(out.rows, false);
  out.stack = stack;
  out.stack["efficiency"] = eff;
  char residual[64], start_value[32];
  std::snprintf(residual, sizeof residual, "rms log error %.3g", out.train_rms_log);
  for (const auto* info : free) {
    std::snprintf(start_value, sizeof start_value, "%.4g", parsed.efficiency->at(info->key).at("value").get<double>());
    out.stack["efficiency"][info->key]["source"] =
        "fitted by cpbench calibrate --experiment " + spec.name + " to its published " + metric_names + " (" +
        std::to_string(trained) + " values, " + residual + "; references/README.md allows calibrating presets against "
        "the reference figures; see \"fits\"); before the fit: " + start_value + ", " +
        parsed.efficiency->at(info->key).at("source").get<std::string>();
    out.stack["efficiency"][info->key]["kind"] = "calibration_fit";
  }
  // The fit records, one per metric: results mark comparisons of (experiment, metric) — of the
  // trained labels when some were held out — as calibration. Each replaces an earlier record of
  // the same pair.
  json fits = json::array();
  for (const json& f : stack.value("fits", json::array()))
    if (f.value("experiment", "") != spec.name || !fitted_metrics.count(f.value("metric", ""))) fits.push_back(f);
  for (const std::string& metric : metrics) {
    size_t values = 0;
    json labels = json::array();
    for (const FitRow& r : out.rows)
      if (r.trained && r.metric == metric) {
        ++values;
        labels.push_back(r.label);
      }
    if (values == 0) continue;
    json record = {{"experiment", spec.name}, {"metric", metric}, {"constants", keys},
                   {"values", values}, {"rms_log_error", std::round(out.train_rms_log * 1e4) / 1e4}};
    if (!train.empty()) record["train"] = labels;
    fits.push_back(record);
  }
  out.stack["fits"] = fits;
  return out;
}

}  // namespace cpbench
