// length_profile.h — sequence-length profiles of a dataset: fixed, lognormal, Pareto, mixture and
// empirical (histogram or a file of lengths), each with provenance and stated assumptions.
// Requires: core/common/json_reader.h. Presets live in experiments/datasets/<name>.json; a spec may
// also give a profile inline. Sampling is in sampling.h, analytic moments in length_stats.h.
// Note: every length is in tokens. Samples outside [min_length, max_length] are clipped to the
// nearest bound (a document longer than the context is cut to it, as data loaders do).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/common/expected.h"
#include "core/common/json_reader.h"

namespace cpbench {

enum class LengthKind { fixed, lognormal, pareto, mixture, empirical };

// How an empirical profile read from a file gives its lengths (see "order" below).
enum class LengthOrder { resample, shuffle, file };

// "fixed", "lognormal", ... as written in the JSON "kind" key.
const char* length_kind_name(LengthKind kind);

// One histogram bin: every integer length in [lo_tokens, hi_tokens] (both inclusive) is equally
// likely inside the bin; the bin is picked with probability count / total count.
struct LengthBin {
  int64_t lo_tokens = 1;
  int64_t hi_tokens = 1;
  double count = 0;
};

// The distribution itself, without clamp or metadata. Only the fields of `kind` are meaningful.
//
// JSON keys by kind (beside "kind"):
//   fixed:      "length_tokens"
//   lognormal:  "sigma" (of ln L) and exactly one of "median_tokens" (= e^mu) or "mean_tokens"
//               (the arithmetic mean of the unclamped distribution, so mu = ln(mean) − sigma²/2).
//               Both are stored as mu = ln(median), the one canonical parameter.
//   pareto:     "scale_tokens" (x_m, the smallest value) and "alpha": P(L > x) = (x_m / x)^alpha.
//   mixture:    "components": [{"weight": w, "label": "…" (optional), "kind": …, …}, …]; a
//               component is any kind but mixture; weights need not sum to 1 (they are normalised).
//   empirical:  exactly one of "bins": [[lo_tokens, hi_tokens, count], …] (ascending, disjoint) or
//               "lengths_file": a user's lengths (lengths_file.h: one per line, CSV with a header,
//               JSON lines, or a folder of them; "column" names the column or field), relative to
//               the folder of the JSON file; it becomes one bin per value. "order" (file only):
//               "resample" (default: each length drawn by count, with replacement), "shuffle" (the
//               file's lengths without replacement, in an order drawn by the seed, each pass a new
//               one: an epoch of a shuffling data loader) or "file" (as written, from the top,
//               again from the top at the end). min/max_length_tokens default to the bins' range.
struct LengthDistribution {
  LengthKind kind = LengthKind::fixed;
  int64_t length_tokens = 0;           // fixed
  double log_median = 0;               // lognormal: mu = ln(median_tokens)
  double sigma = 0;                    // lognormal: standard deviation of ln L
  double scale_tokens = 0;             // pareto: x_m
  double alpha = 0;                    // pareto: tail index
  std::vector<double> weights;         // mixture: normalised to sum 1
  std::vector<std::string> labels;     // mixture: one per component, "" when not given
  std::vector<LengthDistribution> components;  // mixture
  std::vector<LengthBin> bins;         // empirical
  LengthOrder order = LengthOrder::resample;  // empirical from a file
  std::vector<int64_t> sequence;       // empirical from a file: its lengths in file order
};

struct LengthProfile {
  std::string name;                      // the preset's file name without .json ("" inline)
  std::string description;
  std::string provenance;                // where the shape comes from: measured, published, assumed
  std::vector<std::string> assumptions;  // every modelling choice not read from a source
  int64_t min_length = 1;                // clamp, tokens ("min_length_tokens" in JSON)
  int64_t max_length = 1;                // clamp, tokens ("max_length_tokens" in JSON)
  LengthDistribution distribution;
};

// Reads a profile object: "name", "description", "provenance", "assumptions" (all optional here),
// "min_length_tokens", "max_length_tokens" (required unless empirical), "kind" and the kind's keys. Calls
// o.finish(). `base_dir` resolves "lengths_file"; errors in that file name the file and line.
LengthProfile parse_length_profile(JsonObject& o, const std::filesystem::path& base_dir);

// Reads a component or an inline distribution (the keys of parse_length_profile from "kind" on).
// Does not call o.finish(): the caller owns the object's other keys.
LengthDistribution parse_length_distribution(JsonObject& o, const std::filesystem::path& base_dir,
                                             bool allow_mixture);

// Loads a dataset preset file. Beyond parse_length_profile, a preset must carry a non-empty
// "name", "provenance" and "assumptions": every error names the file and the JSON pointer.
Expected<LengthProfile> load_length_profile(const std::filesystem::path& file);

}  // namespace cpbench
