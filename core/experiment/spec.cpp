#include "core/experiment/spec.h"

#include <algorithm>
#include <functional>
#include <set>

#include "core/cost/efficiency.h"
#include "core/experiment/metrics.h"
#include "core/experiment/strategy_registry.h"
#include "core/reshard/reconfigure.h"

namespace cpbench {
namespace {

namespace fs = std::filesystem;
using Origins = std::map<std::string, Error>;

// Keys of a spec that describe one point; cases, grid axes, strategy entries and --set may
// override them. Every other top-level key describes the experiment as a whole.
const std::vector<std::string> kPointKeys = {"hardware", "stack", "model", "workload", "parallel",
                                             "search", "reconfigure", "flops_definition"};

bool is_point_key(const std::string& k) {
  for (const auto& p : kPointKeys)
    if (p == k) return true;
  return false;
}

std::vector<std::string> split_dotted(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '.') {
      parts.push_back(path.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

std::string pointer_of_path(const std::vector<std::string>& parts) {
  std::string p;
  for (const auto& s : parts) p = json_pointer_append(p, s);
  return p;
}

void forget_origins_under(Origins& origins, const std::string& ptr) {
  for (auto it = origins.lower_bound(ptr + "/"); it != origins.end() && it->first.rfind(ptr + "/", 0) == 0;)
    it = origins.erase(it);
}

// Applies `patch` onto `target`: objects merge key by key, anything else replaces. Records, for
// every value it replaces, where the new value was written.
void merge_into(json& target, const json& patch, const std::string& target_ptr, const Error& patch_at,
                Origins& origins) {
  for (const auto& [k, v] : patch.items()) {
    std::string tp = json_pointer_append(target_ptr, k);
    Error at{patch_at.file, json_pointer_append(patch_at.pointer, k), ""};
    if (v.is_object() && target.contains(k) && target[k].is_object()) {
      merge_into(target[k], v, tp, at, origins);
    } else {
      target[k] = v;
      forget_origins_under(origins, tp);
      origins[tp] = at;
    }
  }
}

// Sets a dotted path ("parallel.tp") inside a point; "" on success, else why not.
std::string set_dotted(json& point, const std::string& path, const json& value, const Error& at,
                       Origins& origins) {
  auto parts = split_dotted(path);
  for (const auto& p : parts)
    if (p.empty()) return "\"" + path + "\" is not a dotted path like \"parallel.tp\"";
  if (!is_point_key(parts[0]))
    return "\"" + parts[0] + "\" is not a per-point key (expected hardware, stack, model, workload, parallel or flops_definition)";
  json* node = &point;
  std::vector<std::string> walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    walked.push_back(parts[i]);
    json& next = (*node)[parts[i]];
    if (next.is_null()) next = json::object();
    if (!next.is_object())
      return "cannot set \"" + path + "\": " + pointer_of_path(walked) + " is " + json_type_name(next) +
             ", not an object (name a preset's field only after writing the preset inline)";
    node = &next;
  }
  (*node)[parts.back()] = value;
  std::string ptr = pointer_of_path(parts);
  forget_origins_under(origins, ptr);
  origins[ptr] = at;
  return "";
}

std::string value_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::vector<std::string> preset_names(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Loads presets by name once per spec, and remembers the ones used for the resolved spec.
class Presets {
 public:
  explicit Presets(fs::path dir) : dir_(std::move(dir)) {}

  template <class T, class LoadFn, class ParseFn>
  T resolve(JsonObject& o, const std::string& key, const std::string& kind, std::map<std::string, Expected<T>>& cache,
            LoadFn load, ParseFn parse, const fs::path& inline_base, std::string* name_out) {
    const json* v = o.raw(key);
    if (!v) {
      o.error(key, "missing required key \"" + key + "\" (a " + kind + " preset name or an object)");
      return T{};
    }
    if (v->is_object()) {
      if (name_out) *name_out = "inline";
      JsonObject sub(*v, o.pointer_of(key), o.diag());
      return parse(sub, inline_base);
    }
    if (!v->is_string()) {
      o.error(key, "expected a " + kind + " preset name or an object, got " + json_type_name(*v));
      return T{};
    }
    std::string name = v->get<std::string>();
    if (name_out) *name_out = name;
    fs::path file = dir_ / kind_folder(kind) / (name + ".json");
    if (name.find('/') != std::string::npos || !fs::exists(file)) {
      o.error(key, "unknown " + kind + " preset \"" + name + "\" (known: " + known(kind_folder(kind)) + ")");
      return T{};
    }
    auto it = cache.find(name);
    if (it == cache.end()) {
      it = cache.emplace(name, load(file)).first;
      auto raw = kind == "stack" ? load_stack_json(file) : load_json_file(file);
      if (raw) used_[kind_folder(kind)][name] = *raw;
    }
    if (!it->second) {
      o.diag().add(it->second.errors());
      return T{};
    }
    return *it->second;
  }

  // The stack a point runs on: the spec's "stack" (a name or an object), else the hardware's
  // default stack (already merged when the hardware is a preset file or names its stack inline).
  // Then checks the efficiency constants once, so a bad stack is an error naming its file and
  // pointer before anything runs, and records the stack file for the resolved spec.
  void resolve_stack(JsonObject& po, ClusterSpec& cluster, const fs::path& spec_dir) {
    std::string base;  // where an inline stack's keys sit in the spec
    if (!po.diag().ok()) {  // the hardware did not resolve: only mark "stack" as read
      po.raw("stack");
      return;
    }
    if (po.has("stack")) {
      StackSpec s = resolve<StackSpec>(
          po, "stack", "stack", stacks, [](const fs::path& f) { return load_stack(f); },
          [](JsonObject& o, const fs::path&) { return parse_stack(o); }, spec_dir, nullptr);
      if (!po.diag().ok()) return;
      apply_stack(cluster, s);
      if (s.file.empty()) base = po.pointer_of("stack");
    } else if (cluster.stack.empty()) {
      // Inline hardware naming its default stack: a preset of experiments/stacks/.
      const std::string pointer = json_pointer_append(po.pointer_of("hardware"), "default_stack");
      const fs::path file = dir_ / "stacks" / (cluster.default_stack + ".json");
      if (cluster.default_stack.find('/') != std::string::npos || !fs::exists(file)) {
        po.diag().error(pointer, "unknown stack preset \"" + cluster.default_stack + "\" (known: " + known("stacks") + ")");
        return;
      }
      auto it = stacks.find(cluster.default_stack);
      if (it == stacks.end()) it = stacks.emplace(cluster.default_stack, load_stack(file)).first;
      if (!it->second) {
        po.diag().add(it->second.errors());
        return;
      }
      apply_stack(cluster, *it->second);
    } else if (cluster.stack_file.empty()) {
      base = json_pointer_append(po.pointer_of("hardware"), "default_stack");
    }
    // A reconfiguration-only stack (Tenplex's state store) has no iteration constants to check;
    // resolve_point refuses it to iteration points.
    const bool iteration_constants = !(cluster.efficiency->empty() && cluster.reconfiguration.present);
    if (!cluster.stack_file.empty()) {
      if (!checked_.insert(cluster.stack_file).second) return;
      Diagnostics d(cluster.stack_file);
      JsonObject e(*cluster.efficiency, "/efficiency", d);
      if (iteration_constants) parse_efficiency(e);
      po.diag().add(d.errors());
      if (auto raw = load_stack_json(cluster.stack_file); raw && d.ok()) used_["stacks"][cluster.stack] = *raw;
    } else if (iteration_constants) {
      JsonObject e(*cluster.efficiency, json_pointer_append(base, "efficiency"), po.diag());
      parse_efficiency(e);
    }
  }

  json used() const { return used_; }
  std::map<std::string, Expected<ClusterSpec>> hardware;
  std::map<std::string, Expected<StackSpec>> stacks;
  std::map<std::string, Expected<ModelShape>> models;
  std::map<std::string, Expected<LengthProfile>> datasets;

 private:
  static std::string kind_folder(const std::string& kind) {
    return kind == "hardware" ? "hardware" : kind == "stack" ? "stacks" : kind == "model" ? "models" : "datasets";
  }
  std::string known(const std::string& folder) const {
    std::string names;
    for (const auto& n : preset_names(dir_ / folder)) names += (names.empty() ? "" : ", ") + n;
    return names;
  }
  fs::path dir_;
  json used_ = json::object();
  std::set<std::string> checked_;  // stack files whose efficiency constants parsed
};

WorkloadConfig parse_workload(JsonObject& w, Presets& presets, const fs::path& spec_dir) {
  WorkloadConfig wl;
  wl.dataset = presets.resolve<LengthProfile>(
      w, "dataset", "dataset", presets.datasets, [](const fs::path& f) { return load_length_profile(f); },
      [](JsonObject& o, const fs::path& base) { return parse_length_profile(o, base); }, spec_dir,
      &wl.dataset_name);
  constexpr int64_t kMaxTokens = int64_t{1} << 50;
  wl.global_batch_sequences = w.integer_or("global_batch_sequences", 0, 1, 1 << 30);
  wl.global_batch_tokens = w.integer_or("global_batch_tokens", 0, 1, kMaxTokens);
  if ((wl.global_batch_sequences > 0) == (wl.global_batch_tokens > 0) && w.diag().ok())
    w.error("global_batch_sequences", "give exactly one of global_batch_sequences and global_batch_tokens");
  if (w.choice_or("overlong", "clip", {"clip", "drop"}) == "drop") wl.overlong = Overlong::drop;
  // Dropping filters the scaled lengths of the dataset as it is: no floor unless one is given.
  wl.min_length = w.integer_or("min_length", wl.overlong == Overlong::drop ? 1 : wl.dataset.min_length, 1, kMaxTokens);
  wl.max_length = w.integer_or("max_length", wl.dataset.max_length, 1, kMaxTokens);
  if (wl.min_length > wl.max_length && w.diag().ok())
    w.error("max_length", "expected max_length ≥ min_length (" + std::to_string(wl.min_length) + "), got " +
                              std::to_string(wl.max_length));
  wl.seed = static_cast<uint64_t>(w.integer_or("seed", 1, 0, INT64_MAX));
  wl.length_scale = w.number_or("length_scale", 1.0, 1e-3, 1e3);
  if (const json* m = w.raw("mask")) wl.mask = parse_mask_value(*m, w.pointer_of("mask"), w.diag());
  wl.min_fill = w.number_or("min_fill", 0, 0, 1);
  if (wl.min_fill > 0 && wl.global_batch_tokens == 0 && w.diag().ok())
    w.error("min_fill", "applies to a token budget (global_batch_tokens), not to a number of sequences");
  wl.batches = static_cast<int>(w.integer_or("batches", 1, 1, 1000));
  w.finish();
  return wl;
}

Selector parse_selector(JsonObject& o, const std::set<std::string>& cases, const std::set<std::string>& labels) {
  Selector s;
  s.case_name = o.string_or("case", "");
  if (!s.case_name.empty() && !cases.count(s.case_name)) o.error("case", "no case is named \"" + s.case_name + "\"");
  if (const json* st = o.raw("strategy"); st && st->is_array()) {
    for (size_t i = 0; i < st->size(); ++i) {
      const json& label = (*st)[i];
      if (!label.is_string() || !labels.count(label.get<std::string>()))
        o.diag().error(json_pointer_append(o.pointer_of("strategy"), i), "no strategy entry is labelled " + label.dump());
      else
        s.strategies.push_back(label.get<std::string>());
    }
    if (st->empty()) o.error("strategy", "expected a strategy label or a non-empty array of them");
  } else if (st) {
    if (!st->is_string()) o.error("strategy", "expected a strategy label or an array of them, got " + json_type_name(*st));
    else s.strategy = st->get<std::string>();
    if (!s.strategy.empty() && !labels.count(s.strategy))
      o.error("strategy", "no strategy entry is labelled \"" + s.strategy + "\"");
  }
  if (const json* p = o.raw("params")) {
    if (p->is_object()) s.params = *p;
    else o.error("params", "expected an object of grid axis -> value, got " + json_type_name(*p));
  }
  s.best = o.boolean_or("best", false);
  return s;
}

void parse_tolerance(JsonObject& o, PublishedValue& pv) {
  pv.tolerance_rel = o.number_or("rel", -1, 0, 1e9);
  pv.tolerance_abs = o.number_or("abs", -1, 0, 1e30);
  o.finish();
}

void check_metric(JsonObject& o, const std::string& key, const std::string& metric) {
  if (!metric.empty() && !find_metric(metric)) o.error(key, "unknown metric \"" + metric + "\" (see docs/experiments.md)");
}


// One entry of "strategies": a registered strategy, the label results show it under, and the
// dotted paths it sets on every point it runs.
struct StrategyEntry {
  std::string name, label;
  json set;
  size_t index;  // position in "strategies", for the pointers of errors in its "set"
};

// One entry of "cases": a named override of the base point, and the values published for it.
struct CaseEntry {
  std::string name;
  json patch;
  json published;
  size_t index;  // position in "cases", for the pointers of errors in its values
};

// Grid axes in key order: dotted path -> its non-empty array of values.
using GridAxes = std::vector<std::pair<std::string, json>>;

// Reads the spec's "plot" section; returns its "speedup_over" label ("" when none), which can be
// checked only once the strategy labels are known.
std::string parse_plot(JsonObject& root) {
  auto plot = root.object_opt("plot");
  if (!plot) return "";
  plot->string_or("x", "");
  if (const json* y = plot->raw("y"); y && !y->is_array()) plot->error("y", "expected an array of metric names");
  plot->choice_or("kind", "line", {"line", "bar", "frontier"});
  plot->boolean_or("logx", false);
  plot->boolean_or("logy", false);
  plot->string_or("series", "");
  plot->string_or("x_label", "");
  const std::string speedup_over = plot->string_or("speedup_over", "");
  plot->finish();
  return speedup_over;
}

// Reads the spec's own per-point keys; returns the base point that cases, grid axes, strategy
// entries and --set override.
json parse_base_point(JsonObject& root) {
  json base = json::object();
  for (const auto& k : kPointKeys)
    if (const json* v = root.raw(k)) base[k] = *v;
  return base;
}

// Reads --set key=value pairs; returns them as dotted path -> JSON value, applied to every point
// after cases, grid and strategy overrides.
json parse_overrides(const std::vector<std::pair<std::string, std::string>>& sets) {
  json overrides = json::object();
  for (const auto& [key, text] : sets) {
    json v = json::parse(text, nullptr, false);
    if (v.is_discarded()) v = text;  // a bare word is a string
    overrides[key] = v;
  }
  return overrides;
}

// Reads "strategies"; returns its entries in order and adds their labels to `labels`, which
// published values select by.
std::vector<StrategyEntry> parse_strategies(JsonObject& root, std::set<std::string>& labels) {
  Diagnostics& diag = root.diag();
  std::vector<StrategyEntry> entries;
  const json& strategies_json = root.array("strategies");
  if (root.has("strategies") && strategies_json.empty()) root.error("strategies", "expected at least one strategy");
  for (size_t i = 0; i < strategies_json.size(); ++i) {
    std::string ptr = json_pointer_append("/strategies", i);
    StrategyEntry e{"", "", json::object(), i};
    if (strategies_json[i].is_string()) {
      e.name = strategies_json[i].get<std::string>();
    } else {
      JsonObject so(strategies_json[i], ptr, diag);
      e.name = so.string("name");
      e.label = so.string_or("label", "");
      if (const json* s = so.raw("set")) {
        if (s->is_object()) e.set = *s;
        else so.error("set", "expected an object of dotted path -> value");
      }
      so.finish();
    }
    if (e.label.empty()) e.label = e.name;
    if (!e.name.empty() && !find_strategy(e.name) && !find_reconfiguration_strategy(e.name)) {
      std::string known;
      for (const auto& s : strategies()) known += (known.empty() ? "" : ", ") + s.name;
      for (const auto& s : reconfiguration_strategies()) known += ", " + s.name + " (with \"reconfigure\")";
      diag.error(strategies_json[i].is_string() ? ptr : json_pointer_append(ptr, "name"),
                 "unknown strategy \"" + e.name + "\" (known: " + known + ")");
    }
    if (!labels.insert(e.label).second)
      diag.error(ptr, "two strategy entries are labelled \"" + e.label + "\"; give each a distinct \"label\"");
    entries.push_back(std::move(e));
  }
  return entries;
}

// Reads "cases": overrides of the base point, each named; a case may carry published values.
// Returns them in order (one nameless case when the spec has none) and adds their names to
// `case_names`, which published values select by.
std::vector<CaseEntry> parse_cases(JsonObject& root, std::set<std::string>& case_names) {
  Diagnostics& diag = root.diag();
  std::vector<CaseEntry> cases;
  if (const json* cj = root.raw("cases")) {
    if (!cj->is_array() || cj->empty()) {
      root.error("cases", "expected a non-empty array of objects");
    } else {
      for (size_t i = 0; i < cj->size(); ++i) {
        std::string ptr = json_pointer_append("/cases", i);
        const json& c = (*cj)[i];
        if (!c.is_object()) {
          diag.error(ptr, "expected an object, got " + json_type_name(c));
          continue;
        }
        CaseEntry e{"", json::object(), json::object(), i};
        for (const auto& [k, v] : c.items()) {
          if (k == "name") {
            if (v.is_string() && !v.get<std::string>().empty()) e.name = v.get<std::string>();
            else diag.error(json_pointer_append(ptr, "name"), "expected a non-empty string");
          } else if (k == "published") {
            if (v.is_object()) e.published = v;
            else diag.error(json_pointer_append(ptr, "published"), "expected an object of metric -> value");
          } else if (is_point_key(k)) {
            e.patch[k] = v;
          } else {
            diag.error(json_pointer_append(ptr, k), "unknown key \"" + k +
                       "\" in a case (expected \"name\", \"published\", hardware, stack, model, workload, parallel or flops_definition)");
          }
        }
        if (!c.contains("name")) diag.error(ptr, "missing required key \"name\"");
        if (!e.name.empty() && !case_names.insert(e.name).second)
          diag.error(json_pointer_append(ptr, "name"), "two cases are named \"" + e.name + "\"");
        cases.push_back(std::move(e));
      }
    }
  }
  if (cases.empty()) cases.push_back({"", json::object(), json::object(), 0});
  return cases;
}

// Reads "grid": axes (dotted paths) whose cartesian product the points span, expanded row-major
// in key order. Returns the axes with a non-empty array of values.
GridAxes parse_grid(JsonObject& root) {
  GridAxes axes;
  // As object_opt("grid"), keeping the value itself to walk its axes in order.
  const json* grid_json = root.raw("grid");
  if (!grid_json) return axes;
  JsonObject grid(*grid_json, root.pointer_of("grid"), root.diag());
  for (const auto& [axis, values] : grid_json->items()) {
    grid.raw(axis);
    if (!values.is_array() || values.empty()) grid.error(axis, "expected a non-empty array of values");
    else axes.emplace_back(axis, values);
  }
  grid.finish();
  return axes;
}

// True when one dotted path is the other or lies inside it ("parallel" and "parallel.tp").
bool paths_overlap(const std::string& a, const std::string& b) {
  auto inside = [](const std::string& x, const std::string& outer) {
    return x.size() > outer.size() && x.compare(0, outer.size(), outer) == 0 && x[outer.size()] == '.';
  };
  return a == b || inside(a, b) || inside(b, a);
}

// The dotted paths a case's patch sets: its leaves (an object merges key by key, anything else
// replaces the value at its path).
void patch_paths(const json& patch, const std::string& prefix, std::vector<std::string>& out) {
  for (const auto& [k, v] : patch.items()) {
    const std::string path = prefix.empty() ? k : prefix + "." + k;
    if (v.is_object() && !v.empty()) patch_paths(v, path, out);
    else out.push_back(path);
  }
}

// A --set on a path that a case, a grid axis or a strategy entry also sets would run every point
// at the --set value under labels that name the spec's values: refused, naming both.
void check_overrides_vary_nothing(const json& overrides, const std::vector<CaseEntry>& cases, const GridAxes& axes,
                                  const std::vector<StrategyEntry>& entries, const std::string& file, Diagnostics& diag) {
  for (const auto& [path, value] : overrides.items()) {
    std::vector<std::string> clashes;
    for (const auto& [axis, values] : axes)
      if (paths_overlap(path, axis)) clashes.push_back("the grid axis \"" + axis + "\" (" + file + " /grid/" + axis + ")");
    for (const CaseEntry& c : cases) {
      std::vector<std::string> paths;
      patch_paths(c.patch, "", paths);
      for (const std::string& p : paths)
        if (paths_overlap(path, p))
          clashes.push_back("case \"" + c.name + "\" (" + file + " " + json_pointer_append("/cases", c.index) + ") sets \"" + p + "\"");
    }
    for (const StrategyEntry& st : entries)
      for (const auto& [p, v] : st.set.items())
        if (paths_overlap(path, p))
          clashes.push_back("strategy entry \"" + (st.label.empty() ? st.name : st.label) + "\" (" + file + " " +
                            json_pointer_append(json_pointer_append("/strategies", st.index), "set") + ") sets \"" + p + "\"");
    if (clashes.empty()) continue;
    std::string why = "this path varies between the spec's points: ";
    for (size_t i = 0; i < clashes.size() && i < 3; ++i) why += (i ? "; " : "") + clashes[i];
    if (clashes.size() > 3) why += "; and " + std::to_string(clashes.size() - 3) + " more";
    why += ". Every point would run the --set value under labels that name the spec's values: edit the spec (or a copy) instead";
    diag.add(Errors{{{"command line", "--set " + path, why}}});
  }
}

// Reads "metrics"; returns the known metric names to report, in order.
std::vector<std::string> parse_metrics(JsonObject& root) {
  std::vector<std::string> metrics;
  for (const auto& m : root.array("metrics")) {
    if (!m.is_string() || !find_metric(m.get<std::string>())) {
      root.diag().error("/metrics", "unknown metric " + m.dump() + " (see docs/experiments.md for the list)");
      continue;
    }
    metrics.push_back(m.get<std::string>());
  }
  return metrics;
}

// Reads a grid combination's number (0 up to the product of the axis sizes); returns the index
// into each axis's values, row-major (the last axis varies fastest).
std::vector<size_t> grid_indices(const GridAxes& axes, size_t combination) {
  std::vector<size_t> idx(axes.size());
  size_t rest = combination;
  for (size_t a = axes.size(); a-- > 0;) {
    idx[a] = rest % axes[a].second.size();
    rest /= axes[a].second.size();
  }
  return idx;
}

// Reads "reconfigure": the layout after the change, and which GPUs run it.
ReconfigureConfig parse_reconfigure(JsonObject& o) {
  ReconfigureConfig r;
  r.present = true;
  r.num_gpus = o.integer("num_gpus", 1, 4096);
  r.tp = o.integer_or("tp", 1, 1, 1024);
  r.pp = o.integer_or("pp", 1, 1, 4096);
  r.distributed_optimizer = o.boolean_or("distributed_optimizer", false);
  r.max_seq = o.integer_or("max_seq", 2048, 1, int64_t{1} << 24);
  auto ints = [&o](const std::string& key) {
    std::vector<int64_t> v;
    if (!o.has(key)) return v;
    const json& a = o.array(key);
    for (size_t i = 0; i < a.size(); ++i) {
      if (!a[i].is_number_integer() || a[i].get<int64_t>() < 0 || a[i].get<int64_t>() >= 65536)
        o.diag().error(json_pointer_append(o.pointer_of(key), i), "expected a GPU or rank index (0 … 65535), got " + a[i].dump());
      else
        v.push_back(a[i].get<int64_t>());
    }
    return v;
  };
  r.target_gpus = ints("target_gpus");
  r.lost = ints("lost");
  o.finish();
  return r;
}

// A change of layout that cannot be planned whatever the model: sizes that do not divide, a GPU
// map of the wrong length, unknown lost ranks, a stack without reconfiguration constants.
void check_reconfigure(const PointConfig& pc, const std::string& stack_at, Diagnostics& d) {
  const ParallelConfig& p = pc.parallel;
  const ReconfigureConfig& r = pc.reconfigure;
  auto n = [](int64_t x) { return std::to_string(x); };
  if (p.cp != 1) d.error("/parallel/cp", "a reconfiguration re-shards TP, PP and DP state: the layout before needs cp = 1, got " + n(p.cp));
  if (p.num_gpus % (p.tp * p.pp) != 0)
    d.error("/parallel/num_gpus", "the layout before: tp·pp = " + n(p.tp * p.pp) + " does not divide " + n(p.num_gpus) + " GPUs");
  if (r.num_gpus % (r.tp * r.pp) != 0)
    d.error("/reconfigure/num_gpus", "the layout after: tp·pp = " + n(r.tp * r.pp) + " does not divide " + n(r.num_gpus) + " GPUs");
  if (!r.target_gpus.empty()) {
    if (static_cast<int64_t>(r.target_gpus.size()) != r.num_gpus)
      d.error("/reconfigure/target_gpus", "expected one GPU per rank of the layout after (" + n(r.num_gpus) + "), got " + n(static_cast<int64_t>(r.target_gpus.size())));
    if (std::set<int64_t>(r.target_gpus.begin(), r.target_gpus.end()).size() != r.target_gpus.size())
      d.error("/reconfigure/target_gpus", "a GPU appears twice");
  }
  for (size_t i = 0; i < r.lost.size(); ++i)
    if (r.lost[i] >= p.num_gpus)
      d.error(json_pointer_append("/reconfigure/lost", i), "rank " + n(r.lost[i]) + " is not a rank of the layout before (" + n(p.num_gpus) + " ranks)");
  if (!pc.cluster.reconfiguration.present)
    d.error(stack_at, "stack " + pc.cluster.stack + " has no \"reconfiguration\" constants (state_store_GBps, restart_s), which a change of layout needs");
}

// Reads one point's merged document; resolves the presets it names and parses it into `pc`'s
// cluster, model, workload, parallel config and FLOPs definition. Returns the errors, each named
// where `origins` says its value was written.
Status resolve_point(const json& point, const Origins& origins, const fs::path& file, Presets& presets,
                     PointConfig& pc) {
  const fs::path spec_dir = file.parent_path();
  Diagnostics pd(file.string());
  pd.set_origins(&origins);
  JsonObject po(point, "", pd);
  pc.cluster = presets.resolve<ClusterSpec>(
      po, "hardware", "hardware", presets.hardware, [](const fs::path& f) { return load_hardware(f); },
      [](JsonObject& o, const fs::path&) { return parse_hardware(o); }, spec_dir, nullptr);
  presets.resolve_stack(po, pc.cluster, spec_dir);
  pc.model = presets.resolve<ModelShape>(
      po, "model", "model", presets.models, [](const fs::path& f) { return load_model(f); },
      [](JsonObject& o, const fs::path&) { return parse_model(o); }, spec_dir, nullptr);
  JsonObject wo = po.object("workload");
  pc.workload = parse_workload(wo, presets, spec_dir);
  JsonObject pa = po.object("parallel");
  pc.parallel = parse_parallel_config(pa);
  if (auto so = po.object_opt("search")) pc.search = parse_search_space(*so);
  if (auto ro = po.object_opt("reconfigure")) pc.reconfigure = parse_reconfigure(*ro);
  const std::string stack_at = point.contains("stack") ? "/stack" : "/hardware";
  if (!pc.reconfigure.present && pc.cluster.efficiency->empty() && pc.cluster.reconfiguration.present)
    pd.error(stack_at, "stack " + pc.cluster.stack + " prices reconfigurations only (no \"efficiency\" constants); an iteration needs a stack with them");
  if (pc.reconfigure.present && pd.ok()) check_reconfigure(pc, stack_at, pd);
  pc.flops_definition = po.choice_or("flops_definition", "megatron", {"sc21", "megatron", "kwai"});
  po.finish();
  if (pd.ok()) return ok_status();
  // The same mistake shows in every point; report it once.
  Errors unique;
  std::set<std::string> seen;
  for (const auto& e : pd.errors().list)
    if (seen.insert(e.str()).second) unique.list.push_back(e);
  return unique;
}

// Expands cases × grid × strategies, in that nesting order, into resolved points. A point is the
// base point with its case, then its grid values, then its strategy's "set", then --set applied;
// each applied value is traced back to where it was written. Returns the points, or the errors
// of the first point that has any (the points after it would repeat them). Each point goes to
// `sink` as soon as it is resolved.
Status expand_points(const fs::path& file, const json& base, const std::vector<CaseEntry>& cases, const GridAxes& axes,
                     const std::vector<StrategyEntry>& entries, const json& overrides, Presets& presets,
                     const std::function<void(PointConfig&&)>& sink) {
  const std::string fname = file.string();
  Diagnostics diag(fname);
  size_t combos = 1;
  for (const auto& a : axes) combos *= a.second.size();
  for (const auto& c : cases) {
    for (size_t g = 0; g < combos; ++g) {
      const std::vector<size_t> idx = grid_indices(axes, g);
      for (const auto& st : entries) {
        json point = base;
        Origins origins;
        merge_into(point, c.patch, "", Error{fname, json_pointer_append("/cases", c.index), ""}, origins);
        PointConfig pc;
        pc.case_name = c.name;
        pc.params = json::object();
        std::string id = c.name.empty() ? "" : "case=" + c.name;
        for (size_t a = 0; a < axes.size(); ++a) {
          const auto& [axis, values] = axes[a];
          const json& v = values[idx[a]];
          Error at{fname, json_pointer_append(json_pointer_append("/grid", axis), idx[a]), ""};
          if (auto why = set_dotted(point, axis, v, at, origins); !why.empty()) diag.error(at.pointer, why);
          pc.params[axis] = v;
          id += (id.empty() ? "" : "/") + axis + "=" + value_text(v);
        }
        for (const auto& [path, v] : st.set.items()) {
          Error at{fname, json_pointer_append(json_pointer_append(json_pointer_append("/strategies", st.index), "set"), path), ""};
          if (auto why = set_dotted(point, path, v, at, origins); !why.empty()) diag.error(at.pointer, why);
        }
        for (const auto& [path, v] : overrides.items()) {
          Error at{"command line", "--set " + path, ""};
          if (auto why = set_dotted(point, path, v, at, origins); !why.empty()) diag.add(Errors{{{"command line", "--set " + path, why}}});
        }
        pc.strategy = st.name;
        pc.label = st.label;
        // A reconfiguration strategy prices a change of layout, an iteration strategy an iteration.
        const bool changes = point.contains("reconfigure");
        if (!st.name.empty() && changes != (find_reconfiguration_strategy(st.name) != nullptr))
          diag.error(json_pointer_append("/strategies", st.index),
                     changes ? "strategy \"" + st.name + "\" plans an iteration, but the point has \"reconfigure\" (a change of layout): use a reconfiguration strategy (tenplex, central_store)"
                             : "strategy \"" + st.name + "\" prices a change of layout: the point needs a \"reconfigure\" object (the layout after the change)");
        pc.id = id + (id.empty() ? "" : "/") + "strategy=" + st.label;
        if (!diag.ok()) return diag.errors();
        if (auto resolved = resolve_point(point, origins, file, presets, pc); !resolved) return resolved.errors();
        sink(std::move(pc));
      }
    }
  }
  return ok_status();
}

// Reads one entry of "published"/"values"; returns a metric of the point(s) it selects.
PublishedValue parse_published_value(JsonObject& vo, const std::set<std::string>& case_names,
                                     const std::set<std::string>& labels) {
  PublishedValue pv;
  pv.kind = "value";
  pv.metric = vo.string("metric");
  check_metric(vo, "metric", pv.metric);
  pv.published = vo.number("value", -1e300, 1e300);
  pv.label = vo.string_or("label", pv.metric);
  pv.select = parse_selector(vo, case_names, labels);
  pv.nearest = vo.boolean_or("nearest", false);
  if (pv.select.best && pv.nearest)  // both pick one point of several, by different rules
    vo.error("best", "a value takes either the best point or the one nearest the published value, not both");
  if (auto t = vo.object_opt("tolerance")) parse_tolerance(*t, pv);
  vo.finish();
  return pv;
}

// Reads one entry of "published"/"ratios"; returns a metric of the numerator's point over the
// denominator's.
PublishedValue parse_published_ratio(JsonObject& ro, const std::set<std::string>& case_names,
                                     const std::set<std::string>& labels) {
  PublishedValue pv;
  pv.kind = "ratio";
  pv.metric = ro.string("metric");
  check_metric(ro, "metric", pv.metric);
  pv.expect = ro.choice_or("expect", "", {"above_one", "below_one"});
  if (pv.expect.empty() || ro.has("value")) pv.published = ro.number("value", 0, 1e300);
  pv.label = ro.string("label");
  JsonObject num = ro.object("numerator");
  pv.select = parse_selector(num, case_names, labels);
  num.finish();
  JsonObject den = ro.object("denominator");
  pv.denominator = parse_selector(den, case_names, labels);
  den.finish();
  if (auto t = ro.object_opt("tolerance")) parse_tolerance(*t, pv);
  pv.judge_direction = ro.choice_or("judge", "tolerance", {"tolerance", "direction"}) == "direction";
  ro.finish();
  return pv;
}

// Reads the published values: each case's "published", then the spec's "published" section
// (`published_json`, nullptr when absent). Returns them in that order, a value without its own
// tolerance taking the section's default tolerance for its metric.
std::vector<PublishedValue> parse_published(const json* published_json, const std::vector<CaseEntry>& cases,
                                            const std::set<std::string>& case_names,
                                            const std::set<std::string>& labels, Diagnostics& diag) {
  std::vector<PublishedValue> published;
  for (const auto& c : cases) {
    for (const auto& [metric, v] : c.published.items()) {
      std::string ptr = json_pointer_append(json_pointer_append(json_pointer_append("/cases", c.index), "published"), metric);
      if (!find_metric(metric)) diag.error(ptr, "unknown metric \"" + metric + "\"");
      else if (!v.is_number()) diag.error(ptr, "expected a number, got " + json_type_name(v));
      else {
        PublishedValue pv;
        pv.label = c.name + " " + metric;
        pv.metric = metric;
        pv.kind = "value";
        pv.published = v.get<double>();
        pv.select.case_name = c.name;
        published.push_back(pv);
      }
    }
  }
  std::map<std::string, PublishedValue> default_tolerance;
  if (published_json) {
    JsonObject pub(*published_json, "/published", diag);
    pub.string_or("source", "");
    if (auto tol = pub.object_opt("tolerance")) {
      for (const auto& [metric, t] : published_json->at("tolerance").items()) {
        tol->raw(metric);
        if (!find_metric(metric)) tol->error(metric, "unknown metric \"" + metric + "\"");
        JsonObject to(t, tol->pointer_of(metric), diag);
        parse_tolerance(to, default_tolerance[metric]);
      }
      tol->finish();
    }
    if (pub.has("values")) {
      const json& values = pub.array("values");
      for (size_t i = 0; i < values.size(); ++i) {
        JsonObject vo(values[i], json_pointer_append("/published/values", i), diag);
        published.push_back(parse_published_value(vo, case_names, labels));
      }
    }
    if (pub.has("ratios")) {
      const json& ratios = pub.array("ratios");
      for (size_t i = 0; i < ratios.size(); ++i) {
        JsonObject ro(ratios[i], json_pointer_append("/published/ratios", i), diag);
        published.push_back(parse_published_ratio(ro, case_names, labels));
      }
    }
    pub.finish();
  }
  for (auto& pv : published) {
    if (pv.tolerance_rel < 0 && pv.tolerance_abs < 0 && default_tolerance.count(pv.metric)) {
      pv.tolerance_rel = default_tolerance[pv.metric].tolerance_rel;
      pv.tolerance_abs = default_tolerance[pv.metric].tolerance_abs;
    }
  }
  return published;
}

// How many expanded points each published value's selectors pick, counted point by point.
struct SelectionCounts {
  const std::vector<PublishedValue>& published;
  std::vector<size_t> select = std::vector<size_t>(published.size(), 0);
  std::vector<size_t> denominator = std::vector<size_t>(published.size(), 0);
  void add(const PointConfig& p) {
    for (size_t i = 0; i < published.size(); ++i) {
      select[i] += published[i].select.matches(p);
      denominator[i] += published[i].denominator.matches(p);
    }
  }
};

// Records an error for each published value that selects no point, and each ratio whose
// numerator or denominator does not select exactly one (or, with "best", at least one).
void check_published_selections(const SelectionCounts& counts, Diagnostics& diag) {
  const std::vector<PublishedValue>& published = counts.published;
  auto one_side = [&](const Selector& s, size_t n) { return s.best ? n >= 1 : n == 1; };
  for (size_t i = 0; i < published.size(); ++i) {
    const PublishedValue& pv = published[i];
    if (counts.select[i] == 0 ||
        (pv.kind == "ratio" && (!one_side(pv.select, counts.select[i]) || !one_side(pv.denominator, counts.denominator[i]))))
      diag.error("/published", "\"" + pv.label + "\": " +
                 (pv.kind == "ratio" ? "numerator and denominator must each select exactly one point (or, with "
                                       "\"best\": true, at least one)"
                                     : "selects no point"));
  }
}

}  // namespace

std::vector<GlobalBatch> WorkloadConfig::first_batches(int n) const {
  BatchRequest r{global_batch_sequences, global_batch_tokens, min_length, max_length, seed, length_scale};
  r.min_fill = min_fill;
  r.overlong = overlong;
  std::vector<GlobalBatch> out = make_global_batches(dataset, r, n);
  for (GlobalBatch& b : out) b.mask = mask;
  return out;
}

std::vector<GlobalBatch> WorkloadConfig::all_batches() const { return first_batches(batches); }

GlobalBatch WorkloadConfig::batch() const { return first_batches(1).front(); }

bool Selector::matches(const PointConfig& p) const {
  if (!case_name.empty() && case_name != p.case_name) return false;
  if (!strategy.empty() && strategy != p.label) return false;
  if (!strategies.empty() && std::find(strategies.begin(), strategies.end(), p.label) == strategies.end()) return false;
  for (const auto& [k, v] : params.items())
    if (!p.params.contains(k) || p.params[k] != v) return false;
  return true;
}

Expected<Spec> load_spec(const fs::path& file, const std::string& name, const SpecOptions& options) {
  auto raw = load_json_file(file);
  if (!raw) return raw.errors();
  Diagnostics diag(file.string());
  JsonObject root(*raw, "", diag);
  Spec spec;
  spec.name = name;
  spec.file = file;

  // The spec as written is checked whole before any point is built, so one run reports every
  // mistake in it.
  root.string("description");
  root.string_or("source", "");
  const std::string speedup_over = parse_plot(root);
  const json base = parse_base_point(root);
  const json overrides = parse_overrides(options.sets);
  std::set<std::string> labels;
  const std::vector<StrategyEntry> entries = parse_strategies(root, labels);
  if (!speedup_over.empty() && !labels.count(speedup_over))
    diag.error("/plot/speedup_over", "no strategy entry is labelled \"" + speedup_over + "\"");
  std::set<std::string> case_names;
  const std::vector<CaseEntry> cases = parse_cases(root, case_names);
  const GridAxes axes = parse_grid(root);
  spec.metrics = parse_metrics(root);
  check_overrides_vary_nothing(overrides, cases, axes, entries, file.string(), diag);
  if (auto fo = root.object_opt("frontier")) {
    // TensorOpt's frontier (runner.h): objectives, each a metric (minimised) or "num_gpus".
    spec.frontier_objectives = {"step_time_s", "peak_memory_gib", "comm_bytes_per_gpu", "num_gpus"};
    if (const json* objs = fo->raw("objectives")) {
      spec.frontier_objectives.clear();
      if (!objs->is_array() || objs->empty()) fo->error("objectives", "expected a non-empty array of metric names or \"num_gpus\"");
      for (size_t i = 0; objs->is_array() && i < objs->size(); ++i) {
        const json& o = (*objs)[i];
        // Minimised: a higher-is-better metric (mfu, tflops_per_gpu) would give a meaningless frontier.
        static const std::set<std::string> kMinimised = {"step_time_s",          "peak_memory_gib",    "peak_allocated_bytes",
                                                         "comm_bytes_per_gpu",   "comm_bytes_nvlink",  "comm_bytes_network",
                                                         "exposed_comm_s",       "bubble_fraction",    "num_gpus"};
        if (!o.is_string() || !kMinimised.count(o.get<std::string>())) {
          std::string known;
          for (const auto& k : kMinimised) known += (known.empty() ? "" : ", ") + k;
          diag.error(json_pointer_append(fo->pointer_of("objectives"), i), "expected an objective to minimise (" + known + "), got " + o.dump());
        }
        else
          spec.frontier_objectives.push_back(o.get<std::string>());
      }
    }
    fo->finish();
  }
  const json* published_json = root.raw("published");  // parsed once the points exist
  root.finish();
  if (!diag.ok()) return diag.errors();

  spec.published = parse_published(published_json, cases, case_names, labels, diag);
  if (!diag.ok()) return diag.errors();
  Presets presets(options.experiments_dir);
  SelectionCounts counts{spec.published};
  bool first = true, frontier_change = false, frontier_batches = false;
  Status expanded = expand_points(file, base, cases, axes, entries, overrides, presets, [&](PointConfig&& p) {
    // The base workload seed is the first point's (unless it is 0).
    if (first && p.workload.seed != 0) spec.seed = p.workload.seed;
    first = false;
    frontier_change |= p.reconfigure.present && !spec.frontier_objectives.empty();
    frontier_batches |= p.workload.batches > 1 && !spec.frontier_objectives.empty();
    counts.add(p);
    if (options.stream_points) options.stream_points(p);
    else spec.points.push_back(std::move(p));
  });
  if (!expanded) return expanded.errors();
  if (frontier_change)
    diag.error("/frontier", "a frontier run searches iteration layouts; its points cannot be changes of layout (\"reconfigure\")");
  if (frontier_batches)
    diag.error("/frontier", "a frontier run plans each point once; its points cannot average several batches (workload \"batches\")");
  check_published_selections(counts, diag);
  if (!diag.ok()) return diag.errors();

  spec.resolved = *raw;
  if (!overrides.empty()) spec.resolved["overrides"] = overrides;
  spec.resolved["presets"] = presets.used();
  return spec;
}

}  // namespace cpbench
