// metrics.h — the metric vocabulary of results files: snake_case names carrying their unit.
// Requires: nothing. A spec may only report metrics listed here, and a strategy may only emit
// them (a test checks), so results from different strategies and papers stay comparable.
#pragma once

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

}  // namespace cpbench
