// audit.h — every sourced constant of the hardware and stack presets with the kind of evidence it
// rests on (core/common/citation.h): `cpbench presets --audit` prints them, `cpbench show` names
// the assumptions a results file's presets hold.
// Requires: preset JSON as experiments/hardware and experiments/stacks hold it (or as a results
// file embeds it under spec/presets).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/common/expected.h"
#include "core/common/json_reader.h"

namespace cpbench {

struct AuditedConstant {
  std::string preset;  // "h100_dgx", "mcore_te_fa3_h100"
  std::string field;   // "gpu/hbm_gib", "efficiency/gemm_peak_fraction"
  double value = 0;
  std::string choice;  // a sourced choice of mechanism ("memory/allocator": "pytorch_caching"), else ""
  std::string kind;    // "" when the preset does not state one
  std::string source;
  std::string shared_from;  // the stack a shared constant's entry names ({"from": NAME}), else ""
};

// Every {"value": x or "name", "source": "..."} object under `preset` (depth first, in the file's key order),
// named by its path below the preset's top level.
std::vector<AuditedConstant> sourced_constants(const std::string& preset_name, const json& preset);

// The presets in experiments_dir/hardware and experiments_dir/stacks named in `names` (a hardware or
// a stack preset's name; all of them, hardware first, when empty). With `rows`, each constant as a
// row: preset, field, value, kind, source (cut to `source_width` characters, 0 = whole; a shared
// constant's begins "[from NAME]", the stack its entry names: load_stack_json); without,
// one line per preset counting its constants by kind. Then the count per kind over them all. An
// unknown name is an error naming the two folders.
Expected<std::string> audit_presets(const std::filesystem::path& experiments_dir, const std::vector<std::string>& names,
                                    bool rows, size_t source_width = 100);

// The constants of a results file's presets (spec/presets/hardware and spec/presets/stacks) that
// are assumptions or state no kind: "" when there are none.
std::string assumptions_note(const json& results_spec);

}  // namespace cpbench
