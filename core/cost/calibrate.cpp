#include "core/cost/calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

namespace cpbench {

namespace {

struct OpKeys {
  const char* op;
  std::vector<std::string> required;
  std::vector<std::string> optional;
};

const std::vector<OpKeys>& op_table() {
  static const std::vector<OpKeys> table = {
      {"gemm", {"m", "n", "k"}, {"batch"}},
      {"flash_attention_fwd", {"pairs", "heads", "head_dim", "mean_len"}, {}},
      {"flash_attention_bwd", {"pairs", "heads", "head_dim", "mean_len"}, {}},
      {"memory_bound", {"bytes"}, {}},
      {"p2p_nvlink", {"bytes"}, {}},
      {"p2p_network", {"bytes"}, {}},
      {"p2p_pcie", {"bytes"}, {}},
      {"all_reduce", {"bytes", "size", "ranks_per_node"}, {}},
      {"all_gather", {"bytes", "size", "ranks_per_node"}, {}},
      {"reduce_scatter", {"bytes", "size", "ranks_per_node"}, {}},
      {"all_to_all", {"bytes", "size", "ranks_per_node"}, {}},
      {"broadcast", {"bytes", "size", "ranks_per_node"}, {}},
  };
  return table;
}

const std::map<std::string, Collective>& collective_ops() {
  static const std::map<std::string, Collective> ops = {
      {"all_reduce", Collective::all_reduce},         {"all_gather", Collective::all_gather},
      {"reduce_scatter", Collective::reduce_scatter}, {"all_to_all", Collective::all_to_all},
      {"broadcast", Collective::broadcast}};
  return ops;
}

int64_t as_int(const OpMeasurement& m, const std::string& key) {
  return static_cast<int64_t>(std::llround(m.shape.at(key)));
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

bool parse_double(const std::string& text, double& out) {
  std::istringstream in(text);
  in >> out;
  return in && in.eof() && std::isfinite(out);
}

// An op family and the constants it determines, fitted in this order; a constant is fitted by
// the first family that has measurements sensitive to it.
struct Family {
  const char* name;
  std::function<bool(const OpMeasurement&)> member;
  std::vector<std::string> params;
};

bool crosses_nodes(const OpMeasurement& m) {
  return m.shape.count("size") && m.shape.at("size") > m.shape.at("ranks_per_node");
}

// attention_exp_overlap is in no family: it says which kernel design the stack runs (FA2 or
// FA3-class), a fact of the software, and trades off exactly against the peak fractions, so
// timings cannot tell it apart from them; it keeps the preset's value and source. So do host_op_us,
// host_module_us and comm_sm_fraction: single-op timings do not see the host's issue rate or contention; and
// network_nic_efficiency: a p2p_network row is one flow, not a NIC shared by several.
std::vector<Family> families() {
  auto op_is = [](std::set<std::string> ops) {
    return [ops](const OpMeasurement& m) { return ops.count(m.op) > 0; };
  };
  auto collective_on = [](bool network) {
    return [network](const OpMeasurement& m) {
      if (collective_ops().count(m.op)) return crosses_nodes(m) == network;
      return !network && m.op == "p2p_nvlink";
    };
  };
  return {
      {"gemm", op_is({"gemm"}), {"gemm_peak_fraction", "gemm_tile_overhead_k", "kernel_overhead_us"}},
      {"memory_bound", op_is({"memory_bound"}), {"hbm_efficiency", "kernel_overhead_us"}},
      {"attention_fwd", op_is({"flash_attention_fwd"}),
       {"attention_fwd_peak_fraction", "sfu_exp_rate_Tps", "attention_row_overhead_keys"}},
      {"attention_bwd", op_is({"flash_attention_bwd"}),
       {"attention_bwd_peak_fraction", "sfu_exp_rate_Tps", "attention_bwd_row_overhead_keys"}},
      {"nvlink", collective_on(false),
       {"nvlink_busbw_efficiency", "nvlink_step_latency_us", "nvlink_ll_step_latency_us"}},
      {"network", collective_on(true),
       {"network_busbw_efficiency", "network_step_latency_us", "network_ll_step_latency_us"}},
      // After "network": send/recv has its own bandwidth and shares the per-step latencies, which
      // it fits only when no collective measurement did.
      {"network_p2p", op_is({"p2p_network"}),
       {"network_p2p_efficiency", "network_step_latency_us", "network_ll_step_latency_us"}},
      {"pcie", op_is({"p2p_pcie"}), {"pcie_efficiency", "pcie_latency_us"}},
  };
}

const EfficiencyParamInfo& info_of(const std::string& key) {
  for (const auto& info : efficiency_param_table())
    if (key == info.key) return info;
  return efficiency_param_table().front();  // unreachable: family keys are table keys
}

// Mean squared log error of the model with `params` over `data`.
double log_loss(const ClusterSpec& cluster, const EfficiencyParams& params,
                const std::vector<const OpMeasurement*>& data) {
  const CostModel model(cluster, params);
  double sum = 0;
  for (const OpMeasurement* m : data) {
    const double d = std::log(std::max(predict_time_s(model, *m), 1e-30)) - std::log(m->time_s);
    sum += d * d;
  }
  return sum / double(data.size());
}


// Fitting runs in log space (every constant is positive or a latency ≥ 0), clamped to bounds.
double from_log(double u, const EfficiencyParamInfo& info) {
  return std::clamp(std::exp(u), info.lo, info.hi);
}
double to_log(double v) { return std::log(std::max(v, 1e-3)); }

// The cost model of the machine `hardware` running the stack `stack` (experiments/stacks/ form);
// errors name the stack's fields.
Expected<CostModel> stack_model(const ClusterSpec& hardware, const json& stack) {
  Diagnostics diag("stack");
  JsonObject o(stack, "", diag);
  ClusterSpec cluster = hardware;
  apply_stack(cluster, parse_stack(o));
  if (!diag.ok()) return diag.errors();
  return CostModel::create(cluster, "stack");
}

std::string format_g(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

}  // namespace

// Nelder–Mead minimization of f from x0 (standard coefficients 1, 2, 0.5, 0.5).
std::vector<double> nelder_mead(const std::function<double(const std::vector<double>&)>& f,
                                std::vector<double> x0, double step, int max_evals) {
  const size_t n = x0.size();
  std::vector<std::vector<double>> simplex(n + 1, x0);
  std::vector<double> fx(n + 1);
  fx[0] = f(x0);
  for (size_t i = 0; i < n; ++i) {
    // A step that changes nothing (x0 at a bound the caller clamps to) would make the simplex
    // flat and stop the search at once: step the other way.
    simplex[i + 1][i] += step;
    fx[i + 1] = f(simplex[i + 1]);
    if (fx[i + 1] == fx[0]) {
      simplex[i + 1][i] = x0[i] - step;
      fx[i + 1] = f(simplex[i + 1]);
    }
  }
  int evals = int(n) + 1;
  auto along = [&](const std::vector<double>& c, const std::vector<double>& w, double t) {
    std::vector<double> x(n);
    for (size_t j = 0; j < n; ++j) x[j] = c[j] + t * (w[j] - c[j]);
    return x;
  };
  while (evals < max_evals) {
    std::vector<size_t> order(n + 1);
    for (size_t i = 0; i <= n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return fx[a] < fx[b]; });
    const size_t best = order.front(), worst = order.back(), second = order[n - 1];
    if (fx[worst] - fx[best] < 1e-16) break;
    std::vector<double> centroid(n, 0);
    for (size_t i = 0; i <= n; ++i)
      if (i != worst)
        for (size_t j = 0; j < n; ++j) centroid[j] += simplex[i][j] / double(n);
    const auto reflected = along(centroid, simplex[worst], -1);
    const double fr = f(reflected);
    ++evals;
    if (fr < fx[best]) {
      const auto expanded = along(centroid, simplex[worst], -2);
      const double fe = f(expanded);
      ++evals;
      if (fe < fr) simplex[worst] = expanded, fx[worst] = fe;
      else simplex[worst] = reflected, fx[worst] = fr;
    } else if (fr < fx[second]) {
      simplex[worst] = reflected, fx[worst] = fr;
    } else {
      const auto contracted = along(centroid, simplex[worst], 0.5);
      const double fc = f(contracted);
      ++evals;
      if (fc < fx[worst]) {
        simplex[worst] = contracted, fx[worst] = fc;
      } else {
        for (size_t i = 0; i <= n; ++i) {
          if (i == best) continue;
          simplex[i] = along(simplex[best], simplex[i], 0.5);
          fx[i] = f(simplex[i]);
          ++evals;
        }
      }
    }
  }
  return simplex[std::min_element(fx.begin(), fx.end()) - fx.begin()];
}

std::string validate_measurement(const OpMeasurement& m) {
  for (const auto& spec : op_table()) {
    if (m.op != spec.op) continue;
    for (const auto& key : spec.required)
      if (!m.shape.count(key)) return "op \"" + m.op + "\" needs key \"" + key + "\"";
    for (const auto& [key, value] : m.shape) {
      const bool known = std::count(spec.required.begin(), spec.required.end(), key) ||
                         std::count(spec.optional.begin(), spec.optional.end(), key);
      if (!known) return "unknown key \"" + key + "\" for op \"" + m.op + "\"";
      if (!(value > 0)) return "key \"" + key + "\" must be positive";
      // Past 2^53 a double no longer holds every integer, and no op cpbench prices is that large.
      if (value > 9007199254740992.0) return "key \"" + key + "\" is " + format_g(value) + ", over 2^53: not a shape cpbench prices";
    }
    if (!(m.time_s > 0)) return "time_s must be positive";
    return "";
  }
  std::string ops;
  for (const auto& spec : op_table()) ops += (ops.empty() ? "" : ", ") + std::string(spec.op);
  return "unknown op \"" + m.op + "\" (expected one of " + ops + ")";
}

double predict_time_s(const CostModel& model, const OpMeasurement& m) {
  const auto& s = m.shape;
  if (m.op == "gemm")
    return model.gemm_s(as_int(m, "m"), as_int(m, "n"), as_int(m, "k"),
                        s.count("batch") ? as_int(m, "batch") : 1);
  if (m.op == "flash_attention_fwd")
    return model.flash_attention_fwd_s(s.at("pairs"), as_int(m, "heads"), as_int(m, "head_dim"),
                                       s.at("mean_len"));
  if (m.op == "flash_attention_bwd")
    return model.flash_attention_bwd_s(s.at("pairs"), as_int(m, "heads"), as_int(m, "head_dim"),
                                       s.at("mean_len"));
  if (m.op == "memory_bound") return model.memory_bound_s(s.at("bytes"));
  if (m.op == "p2p_nvlink") return model.p2p_s(s.at("bytes"), Link::nvlink);
  if (m.op == "p2p_network") return model.p2p_s(s.at("bytes"), Link::network);
  if (m.op == "p2p_pcie") return model.p2p_s(s.at("bytes"), Link::pcie);
  const auto it = collective_ops().find(m.op);
  if (it == collective_ops().end()) return 0;
  return model.collective_s(it->second, s.at("bytes"),
                            {as_int(m, "size"), as_int(m, "ranks_per_node")});
}

Expected<std::vector<OpMeasurement>> load_measurements(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return Error{file.string(), "", "cannot open the measurements file"};
  Errors errors;
  std::vector<OpMeasurement> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string text = trim(line);
    // The header may repeat: files of several runs concatenated (device_check.sh's replay.csv).
    if (text.empty() || text[0] == '#' || text == "op,shape,time_s") continue;
    auto fail = [&](const std::string& why) {
      errors.list.push_back({file.string(), "", "line " + std::to_string(number) + ": " + why});
    };
    const auto c1 = text.find(','), c2 = text.rfind(',');
    if (c1 == std::string::npos || c1 == c2) {
      fail("expected op,key=value;key=value,time_s");
      continue;
    }
    OpMeasurement m;
    m.op = trim(text.substr(0, c1));
    if (!parse_double(trim(text.substr(c2 + 1)), m.time_s)) {
      fail("time_s is not a number: \"" + trim(text.substr(c2 + 1)) + "\"");
      continue;
    }
    std::istringstream shape(text.substr(c1 + 1, c2 - c1 - 1));
    std::string pair;
    bool ok = true;
    while (ok && std::getline(shape, pair, ';')) {
      const auto eq = pair.find('=');
      double value = 0;
      if (eq == std::string::npos || !parse_double(trim(pair.substr(eq + 1)), value)) {
        fail("expected key=value, got \"" + trim(pair) + "\"");
        ok = false;
      } else {
        m.shape[trim(pair.substr(0, eq))] = value;
      }
    }
    if (!ok) continue;
    if (const std::string why = validate_measurement(m); !why.empty()) {
      fail(why);
      continue;
    }
    out.push_back(std::move(m));
  }
  if (!errors.list.empty()) return errors;
  if (out.empty()) return Error{file.string(), "", "no measurements in the file"};
  return out;
}

Expected<json> calibrate_stack(const ClusterSpec& hardware, const json& stack,
                               const std::vector<OpMeasurement>& measurements,
                               const std::string& measurements_file) {
  auto start = stack_model(hardware, stack);
  if (!start) return start.errors();
  const ClusterSpec& cluster = start->cluster();
  Errors bad;
  for (size_t i = 0; i < measurements.size(); ++i)
    if (const std::string why = validate_measurement(measurements[i]); !why.empty())
      bad.list.push_back({measurements_file, "", "measurement " + std::to_string(i) + ": " + why});
  if (!bad.list.empty()) return bad;

  EfficiencyParams params = start->params();
  std::set<std::string> fitted;
  // Pass 1 picks each family's free constants (not fitted by an earlier family, and some
  // measurement responds to them) and fits them in order. Families share constants through the
  // model (a GEMM's roofline reads the HBM efficiency the memory family fits later), so pass 2
  // refits every family's constants from pass 1's values: the result no longer depends on how
  // far the preset's starting values were from the data.
  struct Fit {
    std::vector<const OpMeasurement*> data;
    std::vector<const EfficiencyParamInfo*> free;
  };
  std::vector<Fit> fits;
  for (const Family& family : families()) {
    Fit fit;
    for (const auto& m : measurements)
      if (family.member(m)) fit.data.push_back(&m);
    if (fit.data.empty()) continue;
    const double base = log_loss(cluster, params, fit.data);
    for (const auto& key : family.params) {
      if (fitted.count(key)) continue;
      const EfficiencyParamInfo& info = info_of(key);
      bool sensitive = false;
      for (double factor : {0.1, 0.5, 2.0, 10.0}) {
        EfficiencyParams probe = params;
        probe.*info.member = from_log(to_log(params.*info.member) + std::log(factor), info);
        if (std::abs(log_loss(cluster, probe, fit.data) - base) > 1e-12) sensitive = true;
      }
      if (sensitive) fit.free.push_back(&info);
    }
    if (fit.free.empty()) continue;
    // Fewer measurements than constants leave the fit free to pick any of many exact solutions.
    if (fit.data.size() < fit.free.size()) {
      std::string keys;
      for (const auto* info : fit.free) keys += (keys.empty() ? "" : ", ") + std::string(info->key);
      return Error{measurements_file, "", "the " + std::string(family.name) + " family has " + std::to_string(fit.data.size()) +
                                              " measurement" + (fit.data.size() == 1 ? "" : "s") + " for " +
                                              std::to_string(fit.free.size()) + " constants (" + keys +
                                              "): measure at least as many shapes as it fits"};
    }
    for (const auto* info : fit.free) fitted.insert(info->key);
    fits.push_back(std::move(fit));
  }
  // Each family's error with the stack's own values, reported beside the fit's: how well the
  // constants' sources predicted this machine before anything was fitted to it.
  std::vector<double> before;
  for (const Fit& fit : fits) before.push_back(std::sqrt(log_loss(cluster, start->params(), fit.data)));
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t f = 0; f < fits.size(); ++f) {
      const Fit& fit = fits[f];
      auto with = [&](const std::vector<double>& u) {
        EfficiencyParams p = params;
        for (size_t i = 0; i < fit.free.size(); ++i) p.*fit.free[i]->member = from_log(u[i], *fit.free[i]);
        return p;
      };
      auto loss = [&](const std::vector<double>& u) { return log_loss(cluster, with(u), fit.data); };
      std::vector<double> u;
      for (const auto* info : fit.free) u.push_back(to_log(params.*info->member));
      // Restarts from the best point with a shrinking simplex escape NM's early collapse.
      for (double step : {1.0, 0.3, 0.1, 0.03}) u = nelder_mead(loss, u, step, 600 * int(fit.free.size()));
      params = with(u);
      const double rms = std::sqrt(loss(u));
      for (const auto* info : fit.free)
        params.sources[info->key] = {fitted_source_prefix(measurements_file) + std::to_string(fit.data.size()) +
                                         " measurements, rms log error " + format_g(rms) + "; " + format_g(before[f]) +
                                         " with the stack's values before the fit)",
                                     "device_measurement"};
    }
  }
  json out = stack;
  out["efficiency"] = efficiency_to_json(params);
  return out;
}

Expected<std::vector<FamilyError>> op_family_errors(const ClusterSpec& hardware, const json& stack,
                                                    const std::vector<OpMeasurement>& measurements) {
  auto model = stack_model(hardware, stack);
  if (!model) return model.errors();
  std::vector<FamilyError> out;
  for (const Family& family : families()) {
    FamilyError e;
    e.family = family.name;
    double sum = 0, worst = -1;
    for (const auto& m : measurements) {
      if (!family.member(m) || !validate_measurement(m).empty()) continue;
      const double predicted = predict_time_s(*model, m), ratio = predicted / m.time_s;
      e.measured_s += m.time_s;
      e.predicted_s += predicted;
      const double d = std::log(std::max(ratio, 1e-30));
      sum += d * d;
      ++e.n;
      if (std::abs(d) > worst) {
        worst = std::abs(d);
        e.worst_ratio = ratio;
        e.worst = m.op + " ";
        for (const auto& [k, v] : m.shape) e.worst += (e.worst.back() == ' ' ? "" : ";") + k + "=" + format_g(v);
      }
    }
    if (e.n == 0) continue;
    e.rms_log = std::sqrt(sum / static_cast<double>(e.n));
    out.push_back(std::move(e));
  }
  return out;
}

std::string format_family_errors(const std::vector<FamilyError>& before, const std::vector<FamilyError>& after) {
  std::string text = "op family        n   rms log error: stack  fitted   worst (predicted/measured): stack, fitted\n";
  for (size_t i = 0; i < before.size() && i < after.size(); ++i) {
    char line[512];
    std::snprintf(line, sizeof line, "%-14s %3zu   %20.3f %7.3f   %.2f (%s), %.2f (%s)\n", before[i].family.c_str(),
                  before[i].n, before[i].rms_log, after[i].rms_log, before[i].worst_ratio, before[i].worst.c_str(),
                  after[i].worst_ratio, after[i].worst.c_str());
    text += line;
  }
  return text;
}

std::string fitted_source_prefix(const std::string& measurements_file) {
  return "fitted by cpbench calibrate from " + measurements_file + " (";
}

std::vector<std::string> fitted_constants_at_bounds(const json& efficiency, const std::string& source_prefix) {
  std::vector<std::string> out;
  if (!efficiency.is_object()) return out;
  for (const EfficiencyParamInfo& info : efficiency_param_table()) {
    const auto it = efficiency.find(info.key);
    if (it == efficiency.end() || !it->is_object()) continue;
    const json value = it->value("value", json()), source = it->value("source", json());
    if (!value.is_number() || !source.is_string() || source.get<std::string>().rfind(source_prefix, 0) != 0)
      continue;
    // Fitting runs in log space clamped to the range: a constant pushed past a positive bound is
    // clamped onto it, one pushed towards a bound of 0 only approaches it (1e-13 µs of overhead),
    // so that bound is taken as a billionth of the range.
    const double v = value.get<double>();
    const bool at_lo = info.lo > 0 ? v <= info.lo * (1 + 1e-6) : v <= 1e-9 * info.hi;
    const bool at_hi = v >= info.hi * (1 - 1e-6);
    if (!at_lo && !at_hi) continue;
    out.push_back(std::string(info.key) + " = " + format_g(v) + " is at the " + (at_lo ? "lower" : "upper") +
                  " bound of its range [" + format_g(info.lo) + ", " + format_g(info.hi) + "] (" + info.meaning +
                  "): the fit pushed it there, the measurements asking for a value beyond, so it is not a measured "
                  "value; check the measurements' units and shapes, or measure ops whose time depends on it");
  }
  return out;
}

Expected<json> calibrate_preset(const json& preset, const std::vector<OpMeasurement>& measurements,
                                const std::string& measurements_file) {
  // Split the one object into the machine and its stack, fit the stack, put it back.
  json machine = preset.is_object() ? preset : json::object();
  json stack = {{"name", machine.value("name", std::string("inline"))}};
  for (const char* key : {"memory", "efficiency"})
    if (machine.contains(key)) {
      stack[key] = machine[key];
      machine.erase(key);
    }
  machine["default_stack"] = stack["name"];
  Diagnostics diag("preset");
  JsonObject o(machine, "", diag);
  const ClusterSpec hardware = parse_hardware(o);
  if (!diag.ok()) return diag.errors();
  auto fitted = calibrate_stack(hardware, stack, measurements, measurements_file);
  if (!fitted) return fitted.errors();
  json out = preset;
  out["efficiency"] = (*fitted)["efficiency"];
  return out;
}

}  // namespace cpbench
