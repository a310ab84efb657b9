#include "core/hardware/hardware.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

namespace cpbench {

// The sections of a stack whose entries are sourced constants another stack may share
// (load_stack_json).
constexpr const char* kSharedSections[] = {"memory", "efficiency", "reconfiguration"};

// Reads {"value": x, "source": "..."} at parent/key, records the source under `field`.
// A bare number gets its own message: the file is not wrong by a typo but by a missing citation.
double sourced_number(JsonObject& parent, const std::string& key, const std::string& field,
                      double lo, double hi, Sources& sources) {
  const json* v = parent.raw(key);
  if (!v) {
    parent.error(key, "missing required key \"" + key + "\"");
    return lo;
  }
  if (!v->is_object()) {
    parent.error(key, "expected {\"value\": <number>, \"source\": \"<citation>\"}, got " +
                          json_type_name(*v) + ": every preset constant cites its source");
    return lo;
  }
  JsonObject c(*v, parent.pointer_of(key), parent.diag());
  const double value = c.number("value", lo, hi);
  const std::string kind = c.choice_or("kind", "", source_kind_names());
  const json* source = c.raw("source");
  if (!source || !source->is_string() || source->get<std::string>().empty()) {
    c.error("source", std::string(source ? "expected a non-empty string for" : "missing") +
                          " \"source\": every preset constant cites a datasheet, a published "
                          "measurement or a calibration file");
  } else {
    sources[field] = {source->get<std::string>(), kind};
  }
  c.finish();
  return value;
}

const std::vector<std::string>& allocator_model_names() {
  static const std::vector<std::string> names = {"pytorch_caching", "pytorch_expandable_segments"};
  return names;
}

namespace {

// Reads {"value": "<one of options>", "source": "...", "kind": "..."} at parent/key, records the
// source under `field`: a preset's choice of mechanism cites where it comes from as a number does.
std::string sourced_choice(JsonObject& parent, const std::string& key, const std::string& field,
                           const std::vector<std::string>& options, Sources& sources) {
  const json* v = parent.raw(key);
  if (!v || !v->is_object()) {
    parent.error(key, std::string(v ? "expected {\"value\": <name>, \"source\": \"<citation>\"}, got " + json_type_name(*v)
                                    : "missing required key \"" + key + "\""));
    return options.front();
  }
  JsonObject c(*v, parent.pointer_of(key), parent.diag());
  const std::string value = c.choice("value", options);
  const std::string kind = c.choice_or("kind", "", source_kind_names());
  const std::string source = c.string("source");
  if (!source.empty())
    sources[field] = {source, kind};
  else if (c.has("source"))
    c.error("source", "expected a non-empty string: every preset choice cites its source");
  c.finish();
  return value.empty() ? options.front() : value;
}

int sourced_integer(JsonObject& parent, const std::string& key, const std::string& field, int lo,
                    int hi, Sources& sources) {
  const double x = sourced_number(parent, key, field, lo, hi, sources);
  if (x != std::floor(x)) {
    parent.diag().error(json_pointer_append(parent.pointer_of(key), "value"),
                        "expected an integer, got " + std::to_string(x));
    return lo;
  }
  return static_cast<int>(x);
}

GpuSpec parse_gpu(JsonObject& o, Sources& sources) {
  GpuSpec g;
  g.name = o.string("name");
  // Bounds are sanity limits, orders of magnitude beyond any current GPU.
  g.peak_dense_tflops =
      sourced_number(o, "peak_dense_tflops", "gpu/peak_dense_tflops", 1e-3, 1e5, sources);
  g.hbm_gib = sourced_number(o, "hbm_gib", "gpu/hbm_gib", 1e-3, 1e5, sources);
  g.hbm_bandwidth_GBps =
      sourced_number(o, "hbm_bandwidth_GBps", "gpu/hbm_bandwidth_GBps", 1e-3, 1e6, sources);
  g.sm_count = sourced_integer(o, "sm_count", "gpu/sm_count", 1, 100000, sources);
  g.nvlink_bandwidth_GBps =
      sourced_number(o, "nvlink_bandwidth_GBps", "gpu/nvlink_bandwidth_GBps", 1e-3, 1e6, sources);
  g.pcie_bandwidth_GBps =
      sourced_number(o, "pcie_bandwidth_GBps", "gpu/pcie_bandwidth_GBps", 1e-3, 1e6, sources);
  o.finish();
  return g;
}

std::vector<std::string> string_list(JsonObject& o, const std::string& key, bool required) {
  std::vector<std::string> out;
  if (!required && !o.has(key)) return out;
  const json& a = o.array(key);
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].is_string() && !a[i].get<std::string>().empty())
      out.push_back(a[i].get<std::string>());
    else
      o.diag().error(json_pointer_append(o.pointer_of(key), i),
                     "expected a non-empty string, got " + json_type_name(a[i]));
  }
  return out;
}

FitRecord parse_fit(JsonObject& f, const json& efficiency, const ReconfigurationCosts& reconfiguration) {
  FitRecord r;
  r.experiment = f.string("experiment");
  r.metric = f.string("metric");
  r.constants = string_list(f, "constants", true);
  if (f.has("constants") && r.constants.empty() && f.diag().ok())
    f.error("constants", "expected at least one efficiency constant");
  for (size_t i = 0; i < r.constants.size(); ++i)
    if (!efficiency.contains(r.constants[i]) && r.constants[i] != "memory/allocator_fragmentation" &&
        r.constants[i] != "memory/reserved_gib" &&
        !(reconfiguration.present &&
          (r.constants[i] == "reconfiguration/state_store_GBps" || r.constants[i] == "reconfiguration/restart_s")))
      f.diag().error(json_pointer_append(f.pointer_of("constants"), i),
                     "\"" + r.constants[i] + "\" is not a constant of this stack's \"efficiency\" nor "
                     "memory/allocator_fragmentation, memory/reserved_gib or (with a \"reconfiguration\" object) "
                     "reconfiguration/state_store_GBps, reconfiguration/restart_s");
  r.train = string_list(f, "train", false);
  f.integer_or("values", 0, 1, 1 << 30);  // for readers: how many published values the fit used
  f.number_or("rms_log_error", 0, 0, 1e9);
  f.finish();
  return r;
}

}  // namespace

namespace {

// Metrics that are one measurement — the step time — in other units: a value fitted through one
// of them is fitted through all of them (MFU and aggregate PFLOP/s of a row whose TFLOP/s was
// fitted are in sample too).
bool same_measurement(const std::string& a, const std::string& b) {
  static const std::vector<std::string> step_time = {"step_time_s", "tflops_per_gpu", "aggregate_pflops", "mfu",
                                                     "tokens_per_s_per_gpu", "tokens_per_s"};
  auto in = [](const std::string& m) { return std::find(step_time.begin(), step_time.end(), m) != step_time.end(); };
  return a == b || (in(a) && in(b));
}

}  // namespace

bool FitRecord::covers(const std::string& experiment_name, const std::string& metric_name,
                       const std::string& label) const {
  if (experiment != experiment_name || !same_measurement(metric, metric_name)) return false;
  if (train.empty()) return true;
  // A case's value is labelled "<case> <metric>": the same case's fitted label names the fit's metric.
  std::string as_fitted = label;
  const std::string suffix = " " + metric_name;
  if (metric_name != metric && label.size() > suffix.size() &&
      label.compare(label.size() - suffix.size(), suffix.size(), suffix) == 0)
    as_fitted = label.substr(0, label.size() - suffix.size()) + " " + metric;
  return std::find(train.begin(), train.end(), as_fitted) != train.end();
}

StackSpec parse_stack(JsonObject& o) {
  StackSpec s;
  // A shared constant is filled in by load_stack_json, which knows the folder of stacks; an inline
  // stack (in a spec or a hardware file) has none. Said once per entry, nothing else read.
  bool unfilled = false;
  for (const char* section : kSharedSections)
    if (const json* sec = o.raw(section); sec && sec->is_object())
      for (const auto& [key, entry] : sec->items())
        if (entry.is_object() && entry.contains("from")) {
          o.diag().error(json_pointer_append(o.pointer_of(section), key),
                         "{\"from\": ...} names another stack's constant only in a stack preset file "
                         "(experiments/stacks/NAME.json); write this entry {\"value\", \"source\"}");
          unfilled = true;
        }
  if (unfilled) return s;
  s.name = o.string_or("name", "inline");
  s.description = o.string_or("description", "");
  if (auto memory = o.object_opt("memory")) {
    s.memory.reserved_gib =
        sourced_number(*memory, "reserved_gib", "memory/reserved_gib", 0, 1e5, s.sources);
    // Fragmentation: a replayed allocator ("allocator") or a flat share ("allocator_fragmentation").
    if (memory->has("allocator") == memory->has("allocator_fragmentation")) {
      memory->error(memory->has("allocator") ? "allocator_fragmentation" : "allocator",
                    "expected exactly one of \"allocator\" ({\"value\": one of pytorch_caching, "
                    "pytorch_expandable_segments, \"source\"}: the allocator replayed on the step's allocations) "
                    "and \"allocator_fragmentation\" (a flat share of the activation pool)");
    } else if (memory->has("allocator")) {
      const std::string name = sourced_choice(*memory, "allocator", "memory/allocator", allocator_model_names(), s.sources);
      const auto& names = allocator_model_names();
      s.memory.allocator = static_cast<AllocatorModel>(1 + (std::find(names.begin(), names.end(), name) - names.begin()));
    } else {
      s.memory.allocator_fragmentation = sourced_number(
          *memory, "allocator_fragmentation", "memory/allocator_fragmentation", 0, 0.9, s.sources);
    }
    memory->finish();
  } else if (!o.has("memory")) {
    o.error("memory", "missing required key \"memory\" ({\"reserved_gib\", and \"allocator\" or "
                      "\"allocator_fragmentation\"}, each {\"value\", \"source\"}): the device memory training "
                      "cannot give to tensors");
  }
  if (auto rc = o.object_opt("reconfiguration")) {
    s.reconfiguration.present = true;
    s.reconfiguration.state_store_GBps =
        sourced_number(*rc, "state_store_GBps", "reconfiguration/state_store_GBps", 1e-6, 1e6, s.sources);
    s.reconfiguration.restart_s = sourced_number(*rc, "restart_s", "reconfiguration/restart_s", 0, 1e6, s.sources);
    rc->finish();
  }
  if (const json* e = o.raw("efficiency")) {
    if (e->is_object())
      s.efficiency = shared_json(*e);
    else
      o.error("efficiency", "expected an object of cost-model constants, got " + json_type_name(*e));
  } else {
    o.error("efficiency", "missing required key \"efficiency\" (the cost model's constants, each "
                          "{\"value\", \"source\"}; docs/experiments.md lists them)");
  }
  if (o.has("fits")) {
    const json& fits = o.array("fits");
    for (size_t i = 0; i < fits.size(); ++i) {
      JsonObject f(fits[i], json_pointer_append(o.pointer_of("fits"), i), o.diag());
      s.fits.push_back(parse_fit(f, *s.efficiency, s.reconfiguration));
    }
  }
  o.finish();
  return s;
}

namespace {

// load_stack_json's work. Each shared entry is resolved on its own: the named stack's entry of the
// same key, itself followed while it is shared too (a cycle is one of stacks for that key). Files
// are read once and every entry's resolution kept, so a broken file or entry is reported once, and
// a stack may share one key with another that shares a different key with it.
class SharedConstants {
 public:
  explicit SharedConstants(std::filesystem::path folder) : folder_(std::move(folder)) {}

  // The stack `name` (NAME.json in the folder), parsed; nullptr when it cannot be read (reported
  // once, at `file`/`pointer`, the entry naming it).
  const json* stack(const std::string& name, const std::string& file, const std::string& pointer) {
    auto it = files_.find(name);
    if (it == files_.end()) {
      const std::filesystem::path path = folder_ / (name + ".json");
      std::optional<json> parsed;
      if (!std::filesystem::is_regular_file(path)) {
        error(file, pointer, "no stack preset \"" + name + "\" (expected the file " + path.string() + ")");
      } else if (auto j = load_json_file(path); !j) {
        for (const Error& e : j.errors().list) error(e.file, e.pointer, e.message);
      } else {
        parsed = std::move(*j);
      }
      it = files_.emplace(name, std::move(parsed)).first;
    }
    return it->second ? &*it->second : nullptr;
  }

  // The entry {"from": NAME, "note"} at file/pointer: NAME and the note, or nullopt (errors recorded).
  std::optional<std::pair<std::string, std::string>> reference(const json& entry, const std::string& file,
                                                               const std::string& pointer) {
    bool ok = true;
    for (const auto& [k, v] : entry.items())
      if (k != "from" && k != "note") {
        error(file, json_pointer_append(pointer, k),
              "unexpected key \"" + k + "\": an entry {\"from\": \"NAME\", \"note\"} takes its value, source and kind "
              "from the stack NAME");
        ok = false;
      }
    std::string note;
    if (entry.contains("note")) {
      if (entry["note"].is_string()) {
        note = entry["note"].get<std::string>();
      } else {
        error(file, json_pointer_append(pointer, "note"),
              "expected a string (why the constant carries over), got " + json_type_name(entry["note"]));
        ok = false;
      }
    }
    const json& from = entry["from"];
    const std::string name = from.is_string() ? from.get<std::string>() : "";
    if (name.empty() || name.find('/') != std::string::npos) {
      error(file, json_pointer_append(pointer, "from"),
            "expected the name of a stack preset in " + folder_.string() + " (NAME for NAME.json), got " + from.dump());
      ok = false;
    }
    if (!ok) return std::nullopt;
    return std::pair{name, note};
  }

  // Stack `name`'s entry section/key, shared entries followed; `chain` the stacks on the way
  // (the first the one being filled in), `file`/`pointer` the entry that names `name`.
  std::optional<json> entry(const std::string& name, const std::string& section, const std::string& key,
                            std::vector<std::string>& chain, const std::string& file, const std::string& pointer) {
    if (const auto at = std::find(chain.begin(), chain.end(), name); at != chain.end()) {
      std::string cycle;
      for (auto c = at; c != chain.end(); ++c) cycle += *c + " → ";
      error(file, json_pointer_append(pointer, "from"), "stacks share " + json_pointer_append(json_pointer_append("", section), key) +
                                                            " in a cycle: " + cycle + name);
      return std::nullopt;
    }
    const std::string memo_key = name + "\n" + section + "\n" + key;
    if (const auto m = resolved_.find(memo_key); m != resolved_.end()) return m->second;
    std::optional<json> out;
    const std::string own_file = (folder_ / (name + ".json")).string();
    const std::string own_pointer = json_pointer_append(json_pointer_append("", section), key);
    if (const json* s = stack(name, file, json_pointer_append(pointer, "from"))) {
      const json* e = s->is_object() && s->contains(section) && (*s)[section].is_object() && (*s)[section].contains(key)
                          ? &(*s)[section][key]
                          : nullptr;
      if (!e) {
        error(file, json_pointer_append(pointer, "from"), "the stack \"" + name + "\" has no " + own_pointer);
      } else if (e->is_object() && e->contains("from")) {
        if (auto ref = reference(*e, own_file, own_pointer)) {
          chain.push_back(name);
          out = entry(ref->first, section, key, chain, own_file, own_pointer);
          chain.pop_back();
          if (out) carry(*out, ref->first, ref->second);
        }
      } else if (!e->is_object() || !e->contains("value") || !e->contains("source") || !(*e)["source"].is_string() ||
                 (*e)["source"].get<std::string>().empty()) {
        error(own_file, own_pointer, "a constant another stack shares must be {\"value\", \"source\": \"<citation>\"}, got " +
                                         e->dump());
      } else {
        out = *e;
      }
    }
    resolved_.emplace(memo_key, out);
    return out;
  }

  // A shared entry as the stack taking it from `from` holds it: the note after its source.
  static void carry(json& entry, const std::string& from, const std::string& note) {
    if (!note.empty()) entry["source"] = entry["source"].get<std::string>() + " (carried from stack " + from + ": " + note + ")";
  }

  // Once each: a file is read once and every entry resolved once (resolved_).
  void error(const std::string& file, const std::string& pointer, std::string message) {
    errors_.list.push_back(Error{file, pointer, std::move(message)});
  }
  const Errors& errors() const { return errors_; }

 private:
  std::filesystem::path folder_;
  std::map<std::string, std::optional<json>> files_;
  std::map<std::string, std::optional<json>> resolved_;
  Errors errors_;
};

}  // namespace

Expected<json> load_stack_json(const std::filesystem::path& file) {
  auto j = load_json_file(file);
  if (!j) return j.errors();
  if (!j->is_object()) return j;  // parse_stack says what it should be
  SharedConstants shared(file.parent_path());
  const std::string self = file.stem().string();
  for (const char* section : kSharedSections) {
    const auto s = j->find(section);
    if (s == j->end() || !s->is_object()) continue;
    for (auto& [key, e] : s->items()) {
      if (!e.is_object() || !e.contains("from")) continue;
      const std::string pointer = json_pointer_append(json_pointer_append("", section), key);
      const auto ref = shared.reference(e, file.string(), pointer);
      if (!ref) continue;
      std::vector<std::string> chain = {self};
      if (auto value = shared.entry(ref->first, section, key, chain, file.string(), pointer)) {
        SharedConstants::carry(*value, ref->first, ref->second);
        e = std::move(*value);
      }
    }
  }
  if (!shared.errors().list.empty()) return shared.errors();
  return j;
}

Expected<StackSpec> load_stack(const std::filesystem::path& file) {
  auto j = load_stack_json(file);
  if (!j) return j.errors();
  Diagnostics diag(file.string());
  JsonObject o(*j, "", diag);
  StackSpec s = parse_stack(o);
  if (!diag.ok()) return diag.errors();
  s.file = file.string();
  return s;
}

void apply_stack(ClusterSpec& cluster, const StackSpec& stack) {
  cluster.stack = stack.name;
  cluster.stack_file = stack.file;
  cluster.memory = stack.memory;
  cluster.reconfiguration = stack.reconfiguration;
  cluster.efficiency = stack.efficiency;
  cluster.fits = stack.fits;
  for (const auto& [field, source] : stack.sources) cluster.sources[field] = source;
}

std::filesystem::path stack_preset_path(const std::string& name_or_file,
                                        const std::filesystem::path& hardware_file) {
  const std::filesystem::path p(name_or_file);
  const std::filesystem::path folder = hardware_file.parent_path();
  if (p.extension() == ".json") return p.is_absolute() ? p : folder / p;
  return folder / ".." / "stacks" / (name_or_file + ".json");
}

std::string stack_reference(const std::filesystem::path& stack_file,
                            const std::filesystem::path& hardware_file) {
  namespace fs = std::filesystem;
  const std::string name = stack_file.stem().string();
  std::error_code ec;
  if (stack_file.extension() == ".json" &&
      fs::weakly_canonical(stack_preset_path(name, hardware_file), ec) == fs::weakly_canonical(stack_file, ec))
    return name;
  fs::path rel = fs::proximate(fs::absolute(stack_file), fs::absolute(hardware_file).parent_path(), ec);
  return (ec ? fs::absolute(stack_file) : rel).generic_string();
}

ClusterSpec parse_hardware(JsonObject& o) {
  ClusterSpec c;
  c.name = o.string("name");
  c.description = o.string_or("description", "");
  JsonObject gpu = o.object("gpu");
  c.gpu = parse_gpu(gpu, c.sources);
  c.gpus_per_node = sourced_integer(o, "gpus_per_node", "gpus_per_node", 1, 1024, c.sources);
  c.nics_per_node = sourced_integer(o, "nics_per_node", "nics_per_node", 1, 1024, c.sources);
  c.nic_bandwidth_Gbps =
      sourced_number(o, "nic_bandwidth_Gbps", "nic_bandwidth_Gbps", 1e-3, 1e6, c.sources);
  // Efficiencies are the software's, not the machine's: a hardware preset written before the
  // split gets told where they moved.
  for (const char* moved : {"memory", "efficiency"})
    if (o.raw(moved))
      o.error(moved, std::string("\"") + moved + "\" belongs to a software-stack preset "
                     "(experiments/stacks/NAME.json, named here by \"default_stack\"), not to the hardware");
  if (const json* d = o.raw("default_stack")) {
    if (d->is_string() && !d->get<std::string>().empty()) {
      c.default_stack = d->get<std::string>();
    } else if (d->is_object()) {
      JsonObject so(*d, o.pointer_of("default_stack"), o.diag());
      apply_stack(c, parse_stack(so));
    } else {
      o.error("default_stack", "expected a stack preset name (experiments/stacks/NAME.json) or a stack object, got " +
                                   json_type_name(*d));
    }
  } else {
    o.error("default_stack", "missing required key \"default_stack\": the software-stack preset "
                             "(experiments/stacks/NAME.json) this machine runs unless a spec chooses another");
  }
  o.finish();

  c.set_gpus_per_node(c.gpus_per_node);
  c.sources["nic_bandwidth_Gbps_per_gpu"] = {"derived: nics_per_node × nic_bandwidth_Gbps / gpus_per_node",
                                             c.sources["nic_bandwidth_Gbps"].kind};
  return c;
}

Expected<ClusterSpec> load_hardware(const std::filesystem::path& file, const std::string& stack) {
  auto j = load_json_file(file);
  if (!j) return j.errors();
  Diagnostics diag(file.string());
  JsonObject o(*j, "", diag);
  ClusterSpec c = parse_hardware(o);
  if (!diag.ok()) return diag.errors();
  const std::string name = stack.empty() ? c.default_stack : stack;
  if (name.empty()) return c;  // the stack was written inline
  const std::filesystem::path stack_file = stack_preset_path(name, file).lexically_normal();
  if (!std::filesystem::is_regular_file(stack_file))
    return Error{file.string(), stack.empty() ? "/default_stack" : "",
                 "no stack preset \"" + name + "\" (expected the file " + stack_file.string() + ")"};
  auto s = load_stack(stack_file);
  if (!s) return s.errors();
  s->file = stack_file.string();
  apply_stack(c, *s);
  return c;
}

}  // namespace cpbench
