// results.h — the results contract (DESIGN.md, schema_version 1): one record per point, written
// as results.json and results.csv from the same structs, atomically (the runner writes them at a
// run's start and end, finished points going to the journal between: journal.h).
// Requires: spec.h. Points are always written in the spec's expansion order, whatever order
// they finished in, so the same spec and seed give the same file (provenance timestamps aside).
// Note: --resume reads back the finished points of an earlier run of the same resolved spec.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/experiment/spec.h"

namespace cpbench {

inline constexpr int kResultsSchemaVersion = 1;

struct PointResult {
  std::string id;
  std::string status;  // "ok" | "infeasible" | "error" | "pruned" (a frontier run)
  std::string reason;
  std::map<std::string, double> metrics;
  // Wall-clock measurements (plan_time_ms): written under the point's "timings", read by no
  // comparison, left out of results.csv, so two runs of a spec differ only there and in provenance.
  std::map<std::string, double> timings;
};

struct Provenance {
  std::string git_commit;
  bool dirty = false;
  std::string build_type;
  std::string host;
  std::string started_utc;
  std::string cpbench_version;
  uint64_t seed = 1;
};

// What the running binary and its source tree are (git read at run time from the source dir).
// `dirty` ignores the generated outputs (results/, paper/): a run that rewrites them is not dirty.
Provenance current_provenance(uint64_t seed);

struct Comparison {
  std::string label, metric, kind;
  double published = 0;
  std::string expect;                // "above_one" / "below_one" when the claim is a direction
  std::optional<double> reproduced;  // empty when a point it needs is not ok
  std::optional<double> rel_error;   // (reproduced − published) / published
  std::optional<bool> pass;          // empty when the spec states no tolerance
  std::string note;                  // why there is no reproduction, or what was judged
  json select;                       // the selector(s) used, for readers
  // In-sample: the published value was used to fit a constant of the stack its point(s) ran on
  // (a fit record of that stack covers this experiment, metric and label). Reported apart from
  // the out-of-sample predictions (DESIGN.md contract 1).
  bool calibration = false;
};

// results[i] belongs to spec.points[i]; an empty slot is a point not run yet.
using PointResults = std::vector<std::optional<PointResult>>;

// Every published value against its reproduction, marked in-sample (calibration) when a fit
// record of a selected point's stack covers (spec.name, metric, label).
std::vector<Comparison> compute_comparisons(const Spec& spec, const PointResults& results);

json results_to_json(const Spec& spec, const Provenance& prov, const PointResults& results);
std::string results_to_csv(const Spec& spec, const PointResults& results);

// Writes DIR/results.json and DIR/results.csv atomically.
Status write_results(const std::filesystem::path& dir, const Spec& spec, const Provenance& prov,
                     const PointResults& results);

// Checks that `j` has the shape results_to_json writes (schema_version 1): every field --resume
// and `show` read back has the writer's type, so a damaged or hand-edited file is reported like a
// bad spec (the file, the JSON pointer, what was expected), never read with the wrong type.
Status validate_results_json(const json& j, const std::string& file);

// Finished points (ok or infeasible) of an earlier results.json for the same resolved spec;
// an error when the file belongs to a different spec (nothing is overwritten then).
Expected<PointResults> load_finished_points(const std::filesystem::path& results_json, const Spec& spec);

}  // namespace cpbench
