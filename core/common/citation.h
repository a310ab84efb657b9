// citation.h — where a preset constant's value comes from: the citation a reader can find, and
// what kind of evidence it is (`cpbench presets --audit` lists every constant by kind; `cpbench
// show` names the assumptions a result rests on).
// Requires: nothing. A preset writes {"value": x, "source": "...", "kind": "..."}; "kind" is
// optional in the file format (a user's own preset may leave it out: kind ""), and every preset
// shipped in experiments/ states it (hardware_test checks).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace cpbench {

struct Citation {
  std::string text;  // the source as written: a datasheet, a table, a file of measurements
  std::string kind;  // one of source_kinds(), or "" when the preset does not say
  bool operator==(const Citation&) const = default;
};

// Field path ("gpu/peak_dense_tflops", "memory/reserved_gib", "hbm_efficiency") -> its citation.
using Sources = std::map<std::string, Citation>;

struct SourceKind {
  const char* name;
  const char* meaning;
};

// The kinds of evidence, strongest first.
inline const std::vector<SourceKind>& source_kinds() {
  static const std::vector<SourceKind> kinds = {
      {"datasheet", "a vendor's specification (datasheet, whitepaper, product page)"},
      {"vendor_model", "a constant of a vendor library's own performance model (NCCL's tuning tables)"},
      {"published_measurement", "an op-level measurement published with its table or figure"},
      {"device_measurement", "measured by cpbench on the machine (calibrate from its op times, calibrate --local)"},
      {"calibration_fit", "fitted to a published training table (calibrate --experiment): in-sample there"},
      {"estimate", "derived from a named mechanism or a neighbouring measurement, not measured itself"},
      {"assumption", "no measurement or specification of this value was found"},
  };
  return kinds;
}

inline std::vector<std::string> source_kind_names() {
  std::vector<std::string> out;
  for (const SourceKind& k : source_kinds()) out.push_back(k.name);
  return out;
}

}  // namespace cpbench
