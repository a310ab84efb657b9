#include "core/experiment/show.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "core/experiment/audit.h"
#include "core/experiment/metrics.h"
#include "core/experiment/results.h"

namespace cpbench {
namespace {

std::string fmt(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

std::string cell(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_number()) return fmt(v.get<double>());
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "NO";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

// A fixed-width table: text columns left-aligned, numbers right-aligned.
std::string table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  auto numeric = [](const std::string& s) {
    return !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-' || s[0] == '+');
  };
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& r) {
    for (size_t c = 0; c < r.size(); ++c) {
      std::string pad(width[c] - r[c].size(), ' ');
      out << (c ? "  " : "") << (numeric(r[c]) && c > 0 ? pad + r[c] : r[c] + pad);
    }
    out << '\n';
  };
  line(header);
  std::vector<std::string> rule;
  for (size_t w : width) rule.push_back(std::string(w, '-'));
  line(rule);
  for (const auto& r : rows) line(r);
  return out.str();
}

}  // namespace

Expected<std::string> format_results(const json& j, const std::string& file) {
  if (!j.is_object() || !j.contains("schema_version"))
    return Error{file, "/schema_version", "expected a cpbench results file with schema_version 1"};
  if (auto valid = validate_results_json(j, file); !valid) return valid.errors();
  std::ostringstream out;
  const json& spec = j.value("spec", json::object());
  out << "# " << j.value("experiment", "?") << " — " << spec.value("description", "") << "\n";
  const json& prov = j.value("provenance", json::object());
  out << "# commit " << prov.value("git_commit", "?").substr(0, 12) << (prov.value("dirty", false) ? " (dirty)" : "")
      << ", " << prov.value("build_type", "?") << ", seed " << prov.value("seed", 0) << ", "
      << prov.value("started_utc", "?") << "\n\n";

  // Points: case, grid axes, strategy, status, then the spec's metrics.
  std::vector<std::string> metrics;
  for (const auto& m : spec.value("metrics", json::array())) metrics.push_back(m.get<std::string>());
  std::vector<std::string> axes;
  bool has_case = false;
  for (const auto& p : j.value("points", json::array())) {
    has_case |= p.contains("case");
    const json params = p.value("params", json::object());
    for (const auto& [k, v] : params.items())
      if (std::find(axes.begin(), axes.end(), k) == axes.end()) axes.push_back(k);
  }
  std::vector<std::string> header;
  if (has_case) header.push_back("case");
  header.insert(header.end(), axes.begin(), axes.end());
  header.push_back("strategy");
  header.push_back("status");
  // A wall-clock metric (the cpu backend's measured time) lives in a point's "timings": shown from
  // there and marked, since no comparison reads it and two runs differ in it.
  std::vector<const char*> section;  // per metric: where a point keeps it
  for (const auto& m : metrics) {
    const MetricInfo* info = find_metric(m);
    const bool wall = info && info->timing;
    section.push_back(wall ? "timings" : "metrics");
    header.push_back(wall ? m + " (wall)" : m);
  }
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> reasons;
  size_t pruned = 0, hidden = 0;
  // A frontier run lists its frontier: the points it simulated off the frontier, pruned or that
  // cannot run are counted (results.csv and results.json hold them all).
  const bool frontier = spec.contains("frontier");
  for (const auto& p : j.value("points", json::array())) {
    if (frontier && p.value("metrics", json::object()).value("pareto_optimal", 0.0) != 1.0) {
      if (p.value("status", "") == "pruned") ++pruned;
      else ++hidden;
      continue;
    }
    std::vector<std::string> r;
    if (has_case) r.push_back(p.value("case", ""));
    for (const auto& a : axes) r.push_back(cell(p.value("params", json::object()).value(a, json(nullptr))));
    r.push_back(p.value("strategy", ""));
    r.push_back(p.value("status", ""));
    for (size_t k = 0; k < metrics.size(); ++k)
      r.push_back(cell(p.value(section[k], json::object()).value(metrics[k], json(nullptr))));
    rows.push_back(r);
    // Why a point did not run, or a strategy's note on one that did (what a search chose);
    // a frontier run's pruned points are counted, not listed.
    if (p.value("status", "") == "pruned") ++pruned;
    else if (!p.value("reason", "").empty()) reasons.push_back(p.value("id", "") + ": " + p.value("reason", ""));
  }
  out << table(header, rows);
  for (const auto& r : reasons) out << "  " << r << "\n";
  if (frontier)
    out << "  frontier run: the " << rows.size() << " Pareto-optimal points above; " << hidden
        << " more simulated off the frontier or unable to run, " << pruned
        << " pruned (dominated, not simulated; their reasons in results.json name by which point)\n";

  // Published vs reproduced, in-sample (values a constant of the stack was fitted on) apart from
  // out-of-sample (predictions); results written before the field existed read as out-of-sample.
  const json& comps = j.value("comparisons", json::array());
  if (!comps.empty()) {
    out << "\npublished vs reproduced\n";
    int passed = 0, judged = 0;
    for (const bool in_sample : {true, false}) {
      std::vector<std::vector<std::string>> crow;
      std::map<std::string, std::pair<double, int>> mean_abs;  // metric -> (Σ|err|, n)
      for (const auto& c : comps) {
        if (c.value("calibration", false) != in_sample) continue;
        const json& err = c.value("rel_error", json(nullptr));
        std::string err_s = err.is_number() ? fmt(100 * err.get<double>()) + "%" : "-";
        if (err.is_number()) {
          auto& [sum, n] = mean_abs[c.value("metric", "")];
          sum += std::fabs(err.get<double>());
          ++n;
        }
        const json& pass = c.value("pass", json(nullptr));
        if (pass.is_boolean()) {
          ++judged;
          passed += pass.get<bool>();
        }
        crow.push_back({c.value("label", ""), c.value("metric", ""), cell(c.value("published", json(nullptr))),
                        cell(c.value("reproduced", json(nullptr))), err_s, cell(pass), c.value("note", "")});
      }
      if (crow.empty()) continue;
      out << "\n" << (in_sample ? "in sample (calibration: a constant of the stack was fitted on these values)"
                                 : "out of sample")
          << "\n";
      out << table({"label", "metric", "published", "reproduced", "rel.err", "pass", "note"}, crow);
      for (const auto& [metric, se] : mean_abs)
        out << (in_sample ? "in-sample" : "out-of-sample") << " mean |rel.err| of " << metric << ": "
            << fmt(100 * se.first / se.second) << "% over " << se.second << " values\n";
    }
    if (judged) out << passed << "/" << judged << " within the spec's tolerance\n";
  }
  out << assumptions_note(spec);
  return out.str();
}

}  // namespace cpbench
