#include "core/experiment/results.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>
#include <sstream>

#include <unistd.h>

#include "core/experiment/metrics.h"

namespace cpbench {
namespace {

std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[256];
  while (fgets(buf, sizeof buf, f)) out += buf;
  pclose(f);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

json number_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

json point_json(const PointConfig& p, const PointResult& r) {
  json j;
  j["id"] = p.id;
  if (!p.case_name.empty()) j["case"] = p.case_name;
  j["params"] = p.params;
  j["strategy"] = p.label;
  j["status"] = r.status;
  if (!r.reason.empty()) j["reason"] = r.reason;
  json m = json::object();
  for (const auto& [k, v] : r.metrics) m[k] = number_or_null(v);
  j["metrics"] = m;
  if (!r.timings.empty()) {
    json t = json::object();
    for (const auto& [k, v] : r.timings) t[k] = number_or_null(v);
    j["timings"] = t;
  }
  return j;
}

std::optional<double> metric_of(const Spec& spec, const PointResults& results, const Selector& s,
                                const std::string& metric, std::string* note) {
  std::optional<double> best;
  std::string best_id;
  const MetricInfo* info = find_metric(metric);
  const bool lower = info && lower_is_better(*info);
  for (size_t i = 0; i < spec.points.size(); ++i) {
    if (!s.matches(spec.points[i])) continue;
    const std::string& id = spec.points[i].id;
    std::string why;
    if (!results[i]) why = id + " has not run";
    else if (results[i]->status != "ok") why = id + " is " + results[i]->status + ": " + results[i]->reason;
    else if (!results[i]->metrics.count(metric)) why = id + " did not report " + metric;
    if (!s.best) {  // exactly one point: its value or why there is none
      if (!why.empty()) *note = why;
      return why.empty() ? std::optional<double>(results[i]->metrics.at(metric)) : std::nullopt;
    }
    if (!why.empty()) continue;  // best of those that ran
    // The best: the lowest of a metric where less is better (a time), else the highest (a rate).
    const double v = results[i]->metrics.at(metric);
    if (!best || (lower ? v < *best : v > *best)) best = v, best_id = id;
  }
  if (!best) *note = s.best ? "no selected point ran" : "no point selected";
  else if (!note->empty()) *note += "; ";
  if (best) *note += "best: " + best_id;
  return best;
}

json selector_json(const Selector& s) {
  json j = json::object();
  if (!s.case_name.empty()) j["case"] = s.case_name;
  if (!s.strategy.empty()) j["strategy"] = s.strategy;
  if (!s.strategies.empty()) j["strategy"] = s.strategies;
  if (!s.params.empty()) j["params"] = s.params;
  if (s.best) j["best"] = true;
  return j;
}

void judge(const PublishedValue& pv, Comparison& c) {
  if (!c.reproduced) return;
  double rep = *c.reproduced;
  if (!pv.expect.empty()) {
    c.pass = (rep > 1) == (pv.expect == "above_one");
    c.note = "expected " + std::string(pv.expect == "above_one" ? "> 1" : "< 1");
    if (pv.published == 0) return;
  }
  if (pv.published != 0) c.rel_error = (rep - pv.published) / pv.published;
  if (!pv.expect.empty()) return;
  if (pv.judge_direction) {
    c.pass = (rep > 1) == (pv.published > 1);
    c.note = "judged on direction (which side of 1)";
  } else if (pv.tolerance_abs >= 0) {
    c.pass = std::fabs(rep - pv.published) <= pv.tolerance_abs;
  } else if (pv.tolerance_rel >= 0 && c.rel_error) {
    c.pass = std::fabs(*c.rel_error) <= pv.tolerance_rel;
  }
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

std::string format_double(double x) {
  if (!std::isfinite(x)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", x);
  return buf;
}

// True when the stack of a point `select` picks was fitted on this published value.
bool fitted_on(const Spec& spec, const Selector& select, const std::string& metric, const std::string& label) {
  for (const PointConfig& p : spec.points) {
    if (!select.matches(p)) continue;
    for (const FitRecord& f : p.cluster.fits)
      if (f.covers(spec.name, metric, label)) return true;
  }
  return false;
}

// A map of metric or timing name -> number, or null (a non-finite value written as null).
void check_number_map(JsonObject& parent, const std::string& key, bool required) {
  const json* v = parent.raw(key);
  if (!v) {
    if (required) parent.error(key, "missing required key \"" + key + "\"");
    return;
  }
  if (!v->is_object()) {
    parent.error(key, "expected an object of name -> number, got " + json_type_name(*v));
    return;
  }
  for (const auto& [name, x] : v->items())
    if (!x.is_number() && !x.is_null())
      parent.diag().error(json_pointer_append(parent.pointer_of(key), name),
                          "expected a number or null, got " + json_type_name(x));
}

// An optional value that is either of `type_name`'s type (checked by `is`) or null.
template <class Is>
void check_or_null(JsonObject& o, const std::string& key, bool required, Is is, const std::string& type_name) {
  const json* v = o.raw(key);
  if (!v) {
    if (required) o.error(key, "missing required key \"" + key + "\"");
    return;
  }
  if (!v->is_null() && !is(*v)) o.error(key, "expected " + type_name + " or null, got " + json_type_name(*v));
}

}  // namespace

Status validate_results_json(const json& j, const std::string& file) {
  Diagnostics diag(file);
  JsonObject top(j, "", diag);
  if (!diag.ok()) return diag.errors();
  top.integer("schema_version", kResultsSchemaVersion, kResultsSchemaVersion);
  top.string("experiment");
  // The resolved spec was validated when it ran; show reads its description and metrics.
  JsonObject spec = top.object("spec");
  spec.string_or("description", "");
  if (const json* metrics = spec.raw("metrics")) {
    if (!metrics->is_array()) spec.error("metrics", "expected an array of metric names, got " + json_type_name(*metrics));
    else
      for (size_t i = 0; i < metrics->size(); ++i)
        if (!(*metrics)[i].is_string())
          diag.error(json_pointer_append(spec.pointer_of("metrics"), i),
                     "expected a metric name (a string), got " + json_type_name((*metrics)[i]));
  }
  JsonObject prov = top.object("provenance");
  for (const char* key : {"git_commit", "build_type", "host", "started_utc", "cpbench_version"}) prov.string(key);
  prov.boolean("dirty");
  if (const json* seed = prov.raw("seed"); !seed || !seed->is_number_unsigned())
    prov.error("seed", seed ? "expected a non-negative integer, got " + json_type_name(*seed) + " " + seed->dump()
                            : "missing required key \"seed\"");
  prov.finish();

  const json& points = top.array("points");
  for (size_t i = 0; i < points.size(); ++i) {
    JsonObject p(points[i], json_pointer_append("/points", i), diag);
    p.string("id");
    p.string_or("case", "");
    p.object("params");
    p.string("strategy");
    p.choice("status", {"ok", "infeasible", "error", "pruned"});
    p.string_or("reason", "");
    check_number_map(p, "metrics", true);
    check_number_map(p, "timings", false);
    p.finish();
  }
  if (top.has("comparisons")) {
    const json& comps = top.array("comparisons");
    for (size_t i = 0; i < comps.size(); ++i) {
      JsonObject c(comps[i], json_pointer_append("/comparisons", i), diag);
      for (const char* key : {"label", "metric", "kind"}) c.string(key);
      auto is_number = [](const json& v) { return v.is_number(); };
      for (const char* key : {"published", "reproduced", "rel_error"}) check_or_null(c, key, true, is_number, "a number");
      check_or_null(c, "pass", true, [](const json& v) { return v.is_boolean(); }, "true or false");
      c.boolean_or("calibration", false);
      c.object("select");
      c.string_or("note", "");
      c.choice_or("expect", "", {"above_one", "below_one"});
      // A value's point, copied from its selector to the top level for readers.
      c.string_or("case", "");
      c.string_or("strategy", "");
      c.object_opt("params");
      c.finish();
    }
  }
  top.finish();
  if (!diag.ok()) return diag.errors();
  return ok_status();
}

Provenance current_provenance(uint64_t seed) {
  Provenance p;
  std::string src = CPBENCH_SOURCE_DIR;
  p.git_commit = run_command("git -C '" + src + "' rev-parse HEAD 2>/dev/null");
  if (p.git_commit.empty()) p.git_commit = "unknown";
  p.dirty = !run_command("git -C '" + src + "' status --porcelain --untracked-files=no -- . ':!results' ':!paper' 2>/dev/null").empty();
  p.build_type = CPBENCH_BUILD_TYPE;
  p.cpbench_version = CPBENCH_VERSION;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  p.host = host;
  std::time_t now = std::time(nullptr);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  p.started_utc = ts;
  p.seed = seed;
  return p;
}

std::vector<Comparison> compute_comparisons(const Spec& spec, const PointResults& results) {
  std::vector<Comparison> out;
  for (const auto& pv : spec.published) {
    if (pv.kind == "ratio") {
      Comparison c{pv.label, pv.metric, pv.kind, pv.published, pv.expect, {}, {}, {}, "", json::object()};
      c.select = {{"numerator", selector_json(pv.select)}, {"denominator", selector_json(pv.denominator)}};
      std::string note;
      auto num = metric_of(spec, results, pv.select, pv.metric, &note);
      auto den = num ? metric_of(spec, results, pv.denominator, pv.metric, &note) : std::nullopt;
      if (num && den && *den != 0) c.reproduced = *num / *den;
      if (num && den && *den == 0) note += note.empty() ? "denominator is zero" : "; denominator is zero";
      c.calibration = fitted_on(spec, pv.select, pv.metric, pv.label) || fitted_on(spec, pv.denominator, pv.metric, pv.label);
      judge(pv, c);
      if (!note.empty()) c.note = c.note.empty() ? note : c.note + "; " + note;  // why, or which point was best
      out.push_back(std::move(c));
      continue;
    }
    // A value: one comparison per selected point (several when a grid or strategies fan out), or
    // with `nearest` one, for the selected point that ran nearest the published value, or with
    // `best` one, for the best of them (metric_of).
    if (pv.select.best) {
      Comparison c{pv.label, pv.metric, pv.kind, pv.published, pv.expect, {}, {}, {}, "", selector_json(pv.select)};
      std::string note;
      c.reproduced = metric_of(spec, results, pv.select, pv.metric, &note);
      c.note = note;
      c.calibration = fitted_on(spec, pv.select, pv.metric, pv.label);
      judge(pv, c);
      out.push_back(std::move(c));
      continue;
    }
    std::optional<size_t> nearest;
    size_t selected = 0;
    for (size_t i = 0; pv.nearest && i < spec.points.size(); ++i) {
      if (!pv.select.matches(spec.points[i])) continue;
      ++selected;
      if (!results[i] || results[i]->status != "ok" || !results[i]->metrics.count(pv.metric)) continue;
      auto distance = [&](size_t k) { return std::abs(results[k]->metrics.at(pv.metric) - pv.published); };
      if (!nearest || distance(i) < distance(*nearest)) nearest = i;
    }
    for (size_t i = 0; i < spec.points.size(); ++i) {
      const auto& p = spec.points[i];
      if (!pv.select.matches(p)) continue;
      if (pv.nearest && nearest && i != *nearest) continue;
      if (pv.nearest && !nearest) {  // none ran: one comparison without a value
        Comparison c{pv.label, pv.metric, pv.kind, pv.published, pv.expect, {}, {}, {}, "", selector_json(pv.select)};
        c.note = "none of the " + std::to_string(selected) + " selected points ran";
        judge(pv, c);
        out.push_back(std::move(c));
        break;
      }
      Selector exact;
      exact.case_name = p.case_name;
      exact.strategy = p.label;
      exact.params = p.params;
      Comparison c{pv.label, pv.metric, pv.kind, pv.published, pv.expect, {}, {}, {}, "", selector_json(exact)};
      std::string note;
      c.reproduced = metric_of(spec, results, exact, pv.metric, &note);
      if (!c.reproduced) c.note = note;
      c.calibration = fitted_on(spec, exact, pv.metric, pv.label);
      if (pv.nearest) c.note = "nearest of the " + std::to_string(selected) + " selected points: " + p.id;
      judge(pv, c);
      out.push_back(std::move(c));
    }
  }
  return out;
}

json results_to_json(const Spec& spec, const Provenance& prov, const PointResults& results) {
  json j;
  j["schema_version"] = kResultsSchemaVersion;
  j["experiment"] = spec.name;
  j["spec"] = spec.resolved;
  j["provenance"] = {{"git_commit", prov.git_commit}, {"dirty", prov.dirty}, {"build_type", prov.build_type},
                     {"host", prov.host}, {"started_utc", prov.started_utc},
                     {"cpbench_version", prov.cpbench_version}, {"seed", prov.seed}};
  json points = json::array();
  for (size_t i = 0; i < spec.points.size(); ++i)
    if (results[i]) points.push_back(point_json(spec.points[i], *results[i]));
  j["points"] = points;
  json comps = json::array();
  for (const auto& c : compute_comparisons(spec, results)) {
    json cj = {{"label", c.label}, {"metric", c.metric}, {"kind", c.kind},
               {"published", !c.expect.empty() && c.published == 0 ? json(nullptr) : json(c.published)},
               {"reproduced", c.reproduced ? number_or_null(*c.reproduced) : json(nullptr)},
               {"rel_error", c.rel_error ? number_or_null(*c.rel_error) : json(nullptr)},
               {"pass", c.pass ? json(*c.pass) : json(nullptr)}, {"calibration", c.calibration},
               {"select", c.select}};
    if (!c.note.empty()) cj["note"] = c.note;
    if (!c.expect.empty()) cj["expect"] = c.expect;
    // A value names its point at top level too, so readers (plot.py) place it without parsing
    // selectors: its case, strategy and params (a list of strategies, and the selector's flags such
    // as "best", stay in the selector).
    if (c.kind == "value")
      for (const char* k : {"case", "strategy", "params"})
        if (c.select.contains(k) && !c.select[k].is_array()) cj[k] = c.select[k];
    comps.push_back(cj);
  }
  j["comparisons"] = comps;
  return j;
}

std::string results_to_csv(const Spec& spec, const PointResults& results) {
  // Columns: identity, grid axes, status, the spec's metrics first, then any others sorted.
  std::vector<std::string> axes;
  if (!spec.points.empty())
    for (const auto& [k, v] : spec.points.front().params.items()) axes.push_back(k);
  std::vector<std::string> metrics;
  for (const std::string& m : spec.metrics)  // wall-clock timings stay out of the CSV
    if (const MetricInfo* info = find_metric(m); !info || !info->timing) metrics.push_back(m);
  std::set<std::string> extra;
  for (const auto& r : results)
    if (r)
      for (const auto& [k, v] : r->metrics)
        if (std::find(metrics.begin(), metrics.end(), k) == metrics.end()) extra.insert(k);
  metrics.insert(metrics.end(), extra.begin(), extra.end());

  std::ostringstream out;
  out << "id,case";
  for (const auto& a : axes) out << ',' << csv_escape(a);
  out << ",strategy,status,reason";
  for (const auto& m : metrics) out << ',' << m;
  out << '\n';
  for (size_t i = 0; i < spec.points.size(); ++i) {
    if (!results[i]) continue;
    const auto& p = spec.points[i];
    const auto& r = *results[i];
    out << csv_escape(p.id) << ',' << csv_escape(p.case_name);
    for (const auto& a : axes) {
      const json& v = p.params[a];
      out << ',' << csv_escape(v.is_string() ? v.get<std::string>() : v.dump());
    }
    out << ',' << csv_escape(p.label) << ',' << r.status << ',' << csv_escape(r.reason);
    for (const auto& m : metrics) {
      auto it = r.metrics.find(m);
      out << ',' << (it == r.metrics.end() ? "" : format_double(it->second));
    }
    out << '\n';
  }
  return out.str();
}

Status write_results(const std::filesystem::path& dir, const Spec& spec, const Provenance& prov,
                     const PointResults& results) {
  auto s = write_file_atomic(dir / "results.json", results_to_json(spec, prov, results).dump(2) + "\n");
  if (!s) return s;
  return write_file_atomic(dir / "results.csv", results_to_csv(spec, results));
}

Expected<PointResults> load_finished_points(const std::filesystem::path& results_json, const Spec& spec) {
  PointResults out(spec.points.size());
  if (!std::filesystem::exists(results_json)) return out;
  auto j = load_json_file(results_json);
  if (!j) return j.errors();
  if (auto valid = validate_results_json(*j, results_json.string()); !valid) return valid.errors();
  if (!j->contains("spec") || (*j)["spec"] != spec.resolved)
    return Error{results_json.string(), "/spec",
                 "--resume: this results file was written for a different spec (or other --set values); "
                 "run without --resume to replace it, or choose another --out"};
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < spec.points.size(); ++i) index[spec.points[i].id] = i;
  for (const auto& pj : (*j)["points"]) {
    auto it = index.find(pj["id"].get<std::string>());
    std::string status = pj.value("status", "");
    if (it == index.end() || (status != "ok" && status != "infeasible")) continue;  // errors re-run
    PointResult r{it->first, status, pj.value("reason", ""), {}, {}};
    const json metrics = pj.value("metrics", json::object());
    for (const auto& [k, v] : metrics.items())
      if (v.is_number()) r.metrics[k] = v.get<double>();
    const json timings = pj.value("timings", json::object());
    for (const auto& [k, v] : timings.items())
      if (v.is_number()) r.timings[k] = v.get<double>();
    out[it->second] = r;
  }
  return out;
}

}  // namespace cpbench
