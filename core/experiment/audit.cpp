#include "core/experiment/audit.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/common/citation.h"
#include "core/hardware/hardware.h"

namespace cpbench {
namespace {

void collect(const std::string& preset, const json& node, const std::string& path, std::vector<AuditedConstant>& out) {
  if (!node.is_object()) return;
  if (node.contains("value") && node.contains("source") && (node.at("value").is_number() || node.at("value").is_string())) {
    const json& v = node.at("value");
    out.push_back({preset, path, v.is_number() ? v.get<double>() : 0, v.is_string() ? v.get<std::string>() : std::string(),
                   node.value("kind", std::string()),
                   node.at("source").is_string() ? node.at("source").get<std::string>() : std::string(), ""});
    return;
  }
  for (const auto& [key, child] : node.items()) collect(preset, child, path.empty() ? key : path + "/" + key, out);
}

std::string fmt(const AuditedConstant& c) {
  if (!c.choice.empty()) return c.choice;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", c.value);
  return buf;
}

// Cut at a character boundary (UTF-8: never inside a multi-byte sequence).
std::string cut(const std::string& s, size_t width) {
  if (width == 0 || s.size() <= width) return s;
  size_t end = width;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end) + "…";
}

std::string kind_or_unstated(const std::string& kind) { return kind.empty() ? "(not stated)" : kind; }

}  // namespace

std::vector<AuditedConstant> sourced_constants(const std::string& preset_name, const json& preset) {
  std::vector<AuditedConstant> out;
  collect(preset_name, preset, "", out);
  return out;
}

Expected<std::string> audit_presets(const std::filesystem::path& experiments_dir, const std::vector<std::string>& names,
                                    bool rows, size_t source_width) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (const char* folder : {"hardware", "stacks"}) {
    std::vector<fs::path> here;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(experiments_dir / folder, ec))
      if (e.path().extension() == ".json") here.push_back(e.path());
    std::sort(here.begin(), here.end());
    files.insert(files.end(), here.begin(), here.end());
  }
  if (!names.empty()) {
    std::vector<fs::path> chosen;
    // Every preset of the name: a hardware and a stack preset may share one (cpu_local).
    for (const std::string& n : names) {
      const size_t before = chosen.size();
      for (const fs::path& p : files)
        if (p.stem() == n) chosen.push_back(p);
      if (chosen.size() == before)
        return Error{"", n, "no preset named \"" + n + "\" in " + (experiments_dir / "hardware").string() + " or " +
                                (experiments_dir / "stacks").string()};
    }
    files = chosen;
  }
  std::vector<AuditedConstant> all;
  std::vector<std::vector<AuditedConstant>> per_file;  // a hardware and a stack preset may share a name
  for (const fs::path& f : files) {
    const bool stack = f.parent_path().filename() == "stacks";
    auto j = stack ? load_stack_json(f) : load_json_file(f);
    if (!j) return j.errors();
    per_file.push_back(sourced_constants(f.stem().string(), *j));
    if (auto raw = stack ? load_json_file(f) : Expected<json>(json::object()); raw && raw->is_object()) {
      std::map<std::string, std::string> shared;  // "section/key" -> the stack its entry names
      for (const auto& [section, entries] : raw->items())
        if (entries.is_object())
          for (const auto& [key, e] : entries.items())
            if (e.is_object() && e.contains("from") && e["from"].is_string()) shared[section + "/" + key] = e["from"];
      for (AuditedConstant& c : per_file.back())
        if (const auto it = shared.find(c.field); it != shared.end()) c.shared_from = it->second;
    }
    all.insert(all.end(), per_file.back().begin(), per_file.back().end());
  }
  std::ostringstream out;
  // Per preset: its constants counted by kind, strongest first.
  auto counts = [](const std::vector<AuditedConstant>& cs) {
    std::map<std::string, int> count;
    for (const auto& c : cs) ++count[c.kind];
    std::string s = std::to_string(cs.size()) + " constants:";
    for (const SourceKind& k : source_kinds())
      if (count.count(k.name)) s += std::string(" ") + k.name + " " + std::to_string(count[k.name]) + ",";
    if (count.count("")) s += " not stated " + std::to_string(count[""]) + ",";
    s.pop_back();
    return s;
  };
  if (!rows) {
    size_t w = 6;
    for (const fs::path& f : files) w = std::max(w, f.stem().string().size() + f.parent_path().filename().string().size() + 1);
    for (size_t i = 0; i < files.size(); ++i) {
      const std::string name = files[i].parent_path().filename().string() + "/" + files[i].stem().string();
      out << name << std::string(w - name.size() + 2, ' ') << counts(per_file[i]) << "\n";
    }
    out << "\nall: " << counts(all) << "\n";
    for (const SourceKind& k : source_kinds()) out << "  " << k.name << ": " << k.meaning << "\n";
    return out.str();
  }
  size_t w_preset = 6, w_field = 5, w_value = 5, w_kind = 4;
  for (const auto& c : all) {
    w_preset = std::max(w_preset, c.preset.size());
    w_field = std::max(w_field, c.field.size());
    w_value = std::max(w_value, fmt(c).size());
    w_kind = std::max(w_kind, kind_or_unstated(c.kind).size());
  }
  char line[1024];
  std::snprintf(line, sizeof line, "%-*s  %-*s  %*s  %-*s  %s\n", int(w_preset), "preset", int(w_field), "field",
                int(w_value), "value", int(w_kind), "kind", "source");
  out << line;
  for (const auto& c : all) {
    std::snprintf(line, sizeof line, "%-*s  %-*s  %*s  %-*s  ", int(w_preset), c.preset.c_str(), int(w_field),
                  c.field.c_str(), int(w_value), fmt(c).c_str(), int(w_kind), kind_or_unstated(c.kind).c_str());
    out << line << cut((c.shared_from.empty() ? "" : "[from " + c.shared_from + "] ") + c.source, source_width) << "\n";
  }
  out << "\nall: " << counts(all) << "\n";
  for (const SourceKind& k : source_kinds()) out << "  " << k.name << ": " << k.meaning << "\n";
  return out.str();
}

std::string assumptions_note(const json& spec) {
  if (!spec.is_object() || !spec.contains("presets")) return "";
  const json& presets = spec.at("presets");
  std::vector<std::string> items;
  for (const char* group : {"hardware", "stacks"}) {
    if (!presets.contains(group) || !presets.at(group).is_object()) continue;
    for (const auto& [name, preset] : presets.at(group).items())
      for (const AuditedConstant& c : sourced_constants(name, preset))
        if (c.kind == "assumption" || c.kind.empty())
          items.push_back(name + " " + c.field + " = " + fmt(c) + (c.kind.empty() ? " (kind not stated)" : ""));
  }
  if (items.empty()) return "";
  std::ostringstream out;
  out << "\nthese results rest on " << items.size()
      << " preset constant(s) that are assumptions (no measurement or specification found; `cpbench presets "
         "--audit` lists every constant's source):\n";
  for (const auto& i : items) out << "  " << i << "\n";
  return out.str();
}

}  // namespace cpbench
