// registry.h — the experiment registry is the experiments/ folder: a spec's name is its path
// under experiments/ without ".json"; presets (hardware/, models/, datasets/) are not experiments.
// Requires: nothing but the file system. Note: `run` accepts a registered name or any spec file.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/common/expected.h"

namespace cpbench {

// The experiments/ folder of the source tree this binary was built from (tests and benchmarks,
// which run from the build tree; the CLI searches at run time with find_experiments_dir).
std::filesystem::path default_experiments_dir();

// The experiments/ folder `cpbench` reads when --experiments is not given, found at run time so
// that a copied or installed binary never reads the stale source folder it was built from: a
// folder named experiments/ holding hardware/, first upward from `cwd` (a checkout, from any of its
// folders), then beside `executable`, in its parent (build/cpbench in a checkout) and in
// ../share/cpbench/ (an installed binary). Not found: an error naming every place searched.
Expected<std::filesystem::path> find_experiments_dir(const std::filesystem::path& cwd,
                                                     const std::filesystem::path& executable);

// Registered experiment names, sorted.
std::vector<std::string> list_experiments(const std::filesystem::path& experiments_dir);

struct SpecRef {
  std::filesystem::path file;
  std::string name;  // registry name, or the file's stem for a spec outside experiments/
};

// A registered name ("megatron_ptdp/table1") or a path to a spec file.
Expected<SpecRef> resolve_experiment(const std::string& name_or_file, const std::filesystem::path& experiments_dir);

// A hardware preset given by name ("a100_80gb_dgx" → experiments/hardware/a100_80gb_dgx.json) or
// as a path to a .json file (a fitted preset written elsewhere).
std::filesystem::path hardware_preset_path(const std::string& name_or_file, const std::filesystem::path& experiments_dir);

}  // namespace cpbench
