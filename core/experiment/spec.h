// spec.h — experiment specs: strict parsing, preset resolution, and expansion of
// cases × grid × strategies into fully resolved points.
// Requires: the hardware, model, workload, plan and strategies modules. Every error names the file
// and the JSON pointer the user has to edit (a value set by a case, a grid axis or --set is traced
// back to where it was written). The format is documented in docs/experiments.md.
// Note: a spec that parses may still hold points that cannot run (sizes that do not divide, out of
// memory); those become results with status "infeasible", not errors.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/common/json_reader.h"
#include "core/hardware/hardware.h"
#include "core/model/model.h"
#include "core/plan/parallel_config.h"
#include "core/plan/search_space.h"
#include "core/workload/batch.h"
#include "core/workload/length_profile.h"

namespace cpbench {

struct WorkloadConfig {
  std::string dataset_name;        // preset name, or "inline"
  LengthProfile dataset;
  int64_t global_batch_sequences = 0;  // exactly one of these two is > 0
  int64_t global_batch_tokens = 0;
  int64_t min_length = 0;          // clamp applied to the sampled lengths
  int64_t max_length = 0;
  uint64_t seed = 1;
  double length_scale = 1.0;       // multiplies every sampled length before the clamp (DCP's 0.5–4×)
  MaskSpec mask;                   // the attention mask of every sequence (default causal)
  double min_fill = 0;             // token budget: batches below this fraction are redrawn (DCP: 0.75)
  Overlong overlong = Overlong::clip;  // lengths over max_length: clipped, or left out (DCP's batches)
  int batches = 1;                 // a point's metrics are the mean over this many batches of one stream

  // The iteration's batch: drawn from the dataset by seed, with the mask.
  GlobalBatch batch() const;
  // The point's `batches` batches, the first equal to batch().
  std::vector<GlobalBatch> all_batches() const;
  // The first n (≥ 1) batches of the workload's stream, each with the mask.
  std::vector<GlobalBatch> first_batches(int n) const;
};

// A change of a running job's layout (spec "reconfigure", Tenplex): the point's "parallel"
// (num_gpus, tp, pp, distributed_optimizer) is the layout before, this one the layout after; the
// point's strategy is a reconfiguration strategy (core/reshard/reconfigure.h).
struct ReconfigureConfig {
  bool present = false;
  int64_t num_gpus = 1, tp = 1, pp = 1;
  bool distributed_optimizer = false;
  std::vector<int64_t> target_gpus;  // GPU of each target rank; empty = rank r on GPU r
  std::vector<int64_t> lost;         // ranks of the old layout whose state is gone
  int64_t max_seq = 2048;            // rows of a learned position table
};

// One run of one strategy on one configuration.
struct PointConfig {
  std::string id;         // "case=1.7B/parallel.micro_batch_size=2/strategy=ptdp"
  std::string case_name;  // "" when the spec has no cases
  json params;            // grid axis -> value (an object; empty without a grid)
  std::string strategy;   // registered strategy name
  std::string label;      // the strategy entry's label (defaults to its name)
  ClusterSpec cluster;
  ModelShape model;
  WorkloadConfig workload;
  ParallelConfig parallel;
  SearchSpace search;            // the "search" object (strategy ptdp_search); defaults when absent
  ReconfigureConfig reconfigure;  // the "reconfigure" object; present only on reconfiguration points
  std::string flops_definition;  // "sc21" | "megatron" | "kwai"
};

// Picks points: every given field must match.
struct Selector {
  std::string case_name;  // "" = any
  std::string strategy;   // label; "" = any
  json params = json::object();  // subset of a point's params
  // A ratio's side may pick, of the points it selects that ran, the one with the highest metric
  // ("the best throughput without recomputation, at whatever batch fits").
  bool best = false;
  std::vector<std::string> strategies;  // or any of these labels (a "strategy" array)
  bool matches(const PointConfig& p) const;
};

// A published number and how to compare the reproduction with it.
struct PublishedValue {
  std::string label;
  std::string metric;
  std::string kind;      // "value": a metric of the selected point(s); "ratio": numerator / denominator
  double published = 0;
  Selector select;       // the point(s) for "value"; the numerator for "ratio"
  Selector denominator;  // "ratio" only
  double tolerance_rel = -1;  // |rel_error| allowed; < 0 = not judged by tolerance
  double tolerance_abs = -1;  // |reproduced − published| allowed
  bool judge_direction = false;  // ratio: pass when on the same side of 1 as the published one
  // A figure's claim without a number to read off: "above_one" / "below_one" (a ratio only);
  // then there is no published value and the verdict is the direction alone.
  std::string expect;
  // value: one comparison, the selected point (of those that ran) whose metric lies nearest the
  // published one — "the search's top 5 holds a layout within 2 points of the published best".
  bool nearest = false;
};

struct Spec {
  std::string name;                 // registry name (path under experiments/ without .json)
  std::filesystem::path file;
  json resolved;                    // the spec as run: --set applied, presets it used inlined
  std::vector<PointConfig> points;  // in expansion order: cases, then grid (row-major), strategies
  std::vector<std::string> metrics; // what to report, in order
  std::vector<PublishedValue> published;
  uint64_t seed = 1;                // the base workload seed, for provenance
  // "frontier": the run keeps the Pareto-optimal points over these objectives (each a metric,
  // minimised, or "num_gpus") and prunes what they dominate (run_experiment); empty = a plain run.
  std::vector<std::string> frontier_objectives;
};

struct SpecOptions {
  std::filesystem::path experiments_dir;                  // where presets live
  std::vector<std::pair<std::string, std::string>> sets;  // --set key=value, applied last
  // When set, each point goes here as soon as it is resolved and Spec::points stays empty: a dry
  // run of a huge sweep holds one point at a time. The spec is still checked whole (published
  // selections are counted on the way); an error in a later point ends the load with its errors
  // after the earlier points were passed on.
  std::function<void(const PointConfig&)> stream_points;
};

// Loads, validates and expands a spec. On any error nothing is returned but the errors.
Expected<Spec> load_spec(const std::filesystem::path& file, const std::string& name,
                         const SpecOptions& options);

}  // namespace cpbench
