// metrics.h — the metric vocabulary of results files: snake_case names carrying their unit.
// Requires: nothing. A spec may only report metrics listed here, and a strategy may only emit
// them (a test checks), so results from different strategies and papers stay comparable.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace cpbench {

struct MetricInfo {
  std::string name;
  std::string unit;         // for tables and axis labels
  std::string description;  // one line
  bool timing = false;      // a wall-clock measurement: lives in a point's "timings"
};

const std::vector<MetricInfo>& known_metrics();
const MetricInfo* find_metric(const std::string& name);

// Whether less of the metric is better: a time, memory, bytes, a fraction of waste (names ending
// in _fraction: bubble, padding) or an imbalance — scripts/plot.py's lower_is_better by unit.
bool lower_is_better(const MetricInfo& m);
// A rate of work (TFLOP/s, PFLOP/s, tokens/s) or MFU: over several runs, the whole work over the
// whole time.
bool is_rate(const MetricInfo& m);

// One point's metrics over several batches run one after another (workload "batches"): a time,
// byte or count is the mean per batch; memory (GiB) the largest, since every batch must fit; a
// flag holds only if it holds for every batch; a rate (TFLOP/s, PFLOP/s, tokens/s) and MFU are the
// whole work over the whole time — each batch weighted by its attention_time_s, else its
// step_time_s, else equally. A metric some batch lacks is left out. Requires a non-empty list.
std::map<std::string, double> combine_batches(const std::vector<std::map<std::string, double>>& batches);

}  // namespace cpbench
