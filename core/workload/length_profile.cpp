#include "core/workload/length_profile.h"

#include "core/workload/lengths_file.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace cpbench {

namespace {

constexpr int64_t kMaxTokens = kMaxLengthTokens;

const std::vector<std::string> kKinds = {"fixed", "lognormal", "pareto", "mixture", "empirical"};
const std::vector<std::string> kOrders = {"resample", "shuffle", "file"};

// A lengths file (lengths_file.h) becomes one bin per distinct value, ascending; its lengths in
// file order are kept for a profile that replays them.
void lengths_from_file(JsonObject& o, const std::filesystem::path& base_dir, LengthDistribution& d) {
  const std::string rel = o.string("lengths_file");
  const std::string column = o.string_or("column", "");
  if (rel.empty()) return;
  auto file = read_lengths_file(base_dir / rel, column);
  if (!file) {
    o.diag().add(file.errors());
    return;
  }
  std::map<int64_t, double> counts;
  for (int64_t v : file->lengths) counts[v] += 1;
  for (const auto& [v, c] : counts) d.bins.push_back({v, v, c});
  d.sequence = std::move(file->lengths);
}

std::vector<LengthBin> read_bins(JsonObject& o) {
  const json& arr = o.array("bins");
  std::vector<LengthBin> bins;
  std::string ptr = o.pointer_of("bins");
  for (size_t i = 0; i < arr.size(); ++i) {
    std::string p = json_pointer_append(ptr, i);
    const json& b = arr[i];
    if (!b.is_array() || b.size() != 3) {
      o.diag().error(p, "expected a bin [lo_tokens, hi_tokens, count], got " + json_type_name(b) +
                            (b.is_array() ? " of " + std::to_string(b.size()) + " elements" : ""));
      continue;
    }
    bool good = true;
    for (size_t k = 0; k < 2; ++k) {
      if (!b[k].is_number_integer() || b[k].get<int64_t>() < 1 || b[k].get<int64_t>() > kMaxTokens) {
        o.diag().error(json_pointer_append(p, k), "expected an integer length in [1, " +
                                                      std::to_string(kMaxTokens) + "], got " + b[k].dump());
        good = false;
      }
    }
    if (!b[2].is_number() || !std::isfinite(b[2].get<double>()) || b[2].get<double>() < 0) {
      o.diag().error(json_pointer_append(p, 2), "expected a count ≥ 0, got " + b[2].dump());
      good = false;
    }
    if (!good) continue;
    LengthBin bin{b[0].get<int64_t>(), b[1].get<int64_t>(), b[2].get<double>()};
    if (bin.lo_tokens > bin.hi_tokens) {
      o.diag().error(p, "expected lo_tokens ≤ hi_tokens, got [" + std::to_string(bin.lo_tokens) + ", " +
                            std::to_string(bin.hi_tokens) + "]");
      continue;
    }
    if (!bins.empty() && bin.lo_tokens <= bins.back().hi_tokens) {
      o.diag().error(p, "bins must be ascending and disjoint: lo_tokens " + std::to_string(bin.lo_tokens) +
                            " is not above the previous bin's hi_tokens " +
                            std::to_string(bins.back().hi_tokens));
      continue;
    }
    bins.push_back(bin);
  }
  double total = 0;
  for (const auto& b : bins) total += b.count;
  if (o.diag().ok() && total <= 0) o.error("bins", "expected at least one bin with a positive count");
  return bins;
}

void parse_components(JsonObject& o, const std::filesystem::path& base_dir, LengthDistribution& d) {
  const json& arr = o.array("components");
  if (o.has("components") && arr.empty()) o.error("components", "expected at least one component");
  double total = 0;
  for (size_t i = 0; i < arr.size(); ++i) {
    JsonObject c(arr[i], json_pointer_append(o.pointer_of("components"), i), o.diag());
    double w = c.number("weight", 0, 1e12);
    if (c.has("weight") && w <= 0) c.error("weight", "expected a positive weight, got 0");
    std::string label = c.string_or("label", "");
    d.components.push_back(parse_length_distribution(c, base_dir, false));
    c.finish();
    d.weights.push_back(w);
    d.labels.push_back(label);
    total += w;
  }
  if (total > 0)
    for (auto& w : d.weights) w /= total;
}

}  // namespace

const char* length_kind_name(LengthKind kind) {
  switch (kind) {
    case LengthKind::fixed: return "fixed";
    case LengthKind::lognormal: return "lognormal";
    case LengthKind::pareto: return "pareto";
    case LengthKind::mixture: return "mixture";
    case LengthKind::empirical: return "empirical";
  }
  return "?";
}

LengthDistribution parse_length_distribution(JsonObject& o, const std::filesystem::path& base_dir,
                                             bool allow_mixture) {
  LengthDistribution d;
  std::string kind = o.choice("kind", kKinds);
  if (kind == "fixed") {
    d.kind = LengthKind::fixed;
    d.length_tokens = o.integer("length_tokens", 1, kMaxTokens);
  } else if (kind == "lognormal") {
    d.kind = LengthKind::lognormal;
    d.sigma = o.number("sigma", 1e-6, 10);
    bool has_median = o.has("median_tokens"), has_mean = o.has("mean_tokens");
    if (has_median == has_mean) {
      o.error(has_median ? "mean_tokens" : "median_tokens",
              "give exactly one of \"median_tokens\" and \"mean_tokens\"");
      o.raw("median_tokens");
      o.raw("mean_tokens");
    } else if (has_median) {
      d.log_median = std::log(o.number("median_tokens", 1, double(kMaxTokens)));
    } else {
      // mean = exp(mu + sigma²/2) for a lognormal, hence mu = ln(mean) − sigma²/2.
      d.log_median = std::log(o.number("mean_tokens", 1, double(kMaxTokens))) - 0.5 * d.sigma * d.sigma;
    }
  } else if (kind == "pareto") {
    d.kind = LengthKind::pareto;
    d.scale_tokens = o.number("scale_tokens", 1, double(kMaxTokens));
    d.alpha = o.number("alpha", 0.05, 100);
  } else if (kind == "mixture") {
    d.kind = LengthKind::mixture;
    if (!allow_mixture) {
      o.error("kind", "a mixture component cannot itself be a mixture");
      o.raw("components");
      return d;
    }
    parse_components(o, base_dir, d);
  } else if (kind == "empirical") {
    d.kind = LengthKind::empirical;
    bool has_bins = o.has("bins"), has_file = o.has("lengths_file");
    if (has_bins == has_file) {
      o.error(has_bins ? "lengths_file" : "bins", "give exactly one of \"bins\" and \"lengths_file\"");
      o.raw("bins");
      o.raw("lengths_file");
    } else if (has_bins) {
      d.bins = read_bins(o);
    } else {
      lengths_from_file(o, base_dir, d);
    }
    const std::string order = o.choice_or("order", "resample", kOrders);
    d.order = order == "shuffle" ? LengthOrder::shuffle : order == "file" ? LengthOrder::file : LengthOrder::resample;
    if (d.order != LengthOrder::resample && !has_file)
      o.error("order", "\"" + order + "\" replays the lengths of a \"lengths_file\"; bins can only be resampled");
    if (d.order != LengthOrder::resample && !allow_mixture)
      o.error("order", "a mixture component is drawn by weight: its lengths can only be resampled");
  }
  return d;
}

LengthProfile parse_length_profile(JsonObject& o, const std::filesystem::path& base_dir) {
  LengthProfile p;
  p.name = o.string_or("name", "");
  p.description = o.string_or("description", "");
  p.provenance = o.string_or("provenance", "");
  if (const json* a = o.raw("assumptions")) {
    if (!a->is_array()) {
      o.error("assumptions", "expected an array of strings, got " + json_type_name(*a));
    } else {
      for (size_t i = 0; i < a->size(); ++i) {
        if ((*a)[i].is_string()) {
          p.assumptions.push_back((*a)[i].get<std::string>());
        } else {
          o.diag().error(json_pointer_append(o.pointer_of("assumptions"), i),
                         "expected a string, got " + json_type_name((*a)[i]));
        }
      }
    }
  }
  p.distribution = parse_length_distribution(o, base_dir, true);
  const std::vector<LengthBin>& bins = p.distribution.bins;
  if (p.distribution.kind == LengthKind::empirical) {
    // Measured lengths bound themselves: the clamp defaults to their range.
    p.min_length = o.integer_or("min_length_tokens", bins.empty() ? 1 : bins.front().lo_tokens, 1, kMaxTokens);
    p.max_length = o.integer_or("max_length_tokens", bins.empty() ? 1 : bins.back().hi_tokens, 1, kMaxTokens);
  } else {
    p.min_length = o.integer("min_length_tokens", 1, kMaxTokens);
    p.max_length = o.integer("max_length_tokens", 1, kMaxTokens);
  }
  if (o.diag().ok() && p.min_length > p.max_length)
    o.error("max_length_tokens", "expected max_length_tokens ≥ min_length_tokens (" +
                                     std::to_string(p.min_length) + "), got " + std::to_string(p.max_length));
  o.finish();
  return p;
}

Expected<LengthProfile> load_length_profile(const std::filesystem::path& file) {
  auto j = load_json_file(file);
  if (!j) return j.errors();
  Diagnostics diag(file.string());
  JsonObject o(*j, "", diag);
  LengthProfile p = parse_length_profile(o, file.parent_path());
  if (j->is_object()) {
    // A preset is shared by every experiment that names it: say where it comes from.
    for (const char* key : {"name", "provenance"})
      if (!j->contains(key)) diag.error(std::string("/") + key, std::string("a dataset preset needs a \"") + key + "\" string");
    if (p.name.empty() && j->contains("name")) diag.error("/name", "expected a non-empty name");
    if (p.provenance.empty() && j->contains("provenance")) diag.error("/provenance", "expected a non-empty provenance");
    if (p.assumptions.empty())
      diag.error("/assumptions", "a dataset preset needs a non-empty \"assumptions\" array of strings");
  }
  if (!diag.ok()) return diag.errors();
  return p;
}

}  // namespace cpbench
