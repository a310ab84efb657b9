#include "core/experiment/registry.h"

#include <algorithm>

namespace cpbench {

namespace fs = std::filesystem;

namespace {
bool is_preset_folder(const fs::path& rel) {
  auto first = rel.begin()->string();
  return first == "hardware" || first == "stacks" || first == "models" || first == "datasets";
}
}  // namespace

fs::path default_experiments_dir() { return fs::path(CPBENCH_SOURCE_DIR) / "experiments"; }

Expected<fs::path> find_experiments_dir(const fs::path& cwd, const fs::path& executable) {
  std::vector<fs::path> searched;
  // hardware/ inside tells cpbench's folder from any other folder called experiments.
  auto holds_presets = [&](const fs::path& candidate) {
    searched.push_back(candidate);
    std::error_code ec;
    return fs::is_directory(candidate / "hardware", ec);
  };
  for (fs::path dir = cwd;; dir = dir.parent_path()) {
    if (holds_presets(dir / "experiments")) return dir / "experiments";
    if (dir == dir.parent_path() || dir.empty()) break;
  }
  if (!executable.empty()) {
    const fs::path bin = executable.parent_path();
    for (const fs::path& candidate : {bin / "experiments", bin.parent_path() / "experiments",
                                      bin.parent_path() / "share" / "cpbench" / "experiments"})
      if (holds_presets(candidate)) return candidate;
  }
  std::string where;
  for (const fs::path& p : searched) where += "\n  " + p.string();
  return Error{"--experiments", "",
               "no experiments/ folder (one holding hardware/) found; searched upward from the current directory, "
               "then beside the executable:" + where + "\ngive --experiments DIR, or run from inside a checkout"};
}

std::vector<std::string> list_experiments(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); ++it) {
    if (!it->is_regular_file() || it->path().extension() != ".json") continue;
    fs::path rel = fs::relative(it->path(), dir);
    if (is_preset_folder(rel)) continue;
    names.push_back(rel.replace_extension().generic_string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

Expected<SpecRef> resolve_experiment(const std::string& arg, const fs::path& dir) {
  fs::path as_file(arg);
  if (as_file.extension() == ".json" || fs::is_regular_file(as_file)) {
    if (!fs::is_regular_file(as_file)) return Error{arg, "", "no such spec file"};
    std::error_code ec;
    fs::path rel = fs::relative(fs::canonical(as_file), fs::canonical(dir, ec), ec);
    bool inside = !ec && !rel.empty() && *rel.begin() != "..";
    std::string name = inside ? fs::path(rel).replace_extension().generic_string() : as_file.stem().string();
    return SpecRef{as_file, name};
  }
  fs::path file = dir / (arg + ".json");
  if (!fs::is_regular_file(file) || is_preset_folder(fs::path(arg))) {
    std::string hint;
    for (const auto& n : list_experiments(dir))
      if (n.find(arg) != std::string::npos) hint += (hint.empty() ? " (did you mean: " : ", ") + n;
    if (!hint.empty()) hint += ")";
    return Error{arg, "", "no registered experiment of that name under " + dir.string() + hint +
                              "; `cpbench list` shows them"};
  }
  return SpecRef{file, arg};
}

fs::path hardware_preset_path(const std::string& name_or_file, const fs::path& experiments_dir) {
  fs::path p(name_or_file);
  return p.extension() == ".json" ? p : experiments_dir / "hardware" / (name_or_file + ".json");
}

}  // namespace cpbench
