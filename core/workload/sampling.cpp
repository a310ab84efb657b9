#include "core/workload/sampling.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace cpbench {

LengthSampler::LengthSampler(const LengthProfile& profile, uint64_t seed, int64_t min_length, int64_t max_length,
                             double length_scale, Overlong overlong)
    : dist_(&profile.distribution),
      profile_min_(profile.min_length),
      profile_max_(profile.max_length),
      rng_(seed),
      min_length_(min_length),
      max_length_(max_length),
      length_scale_(length_scale),
      overlong_(overlong) {
  build_tables(*dist_);
}

void LengthSampler::build_tables(const LengthDistribution& d) {
  std::vector<double> cum;
  double acc = 0;
  if (d.kind == LengthKind::mixture) {
    for (double w : d.weights) cum.push_back(acc += w);
    for (const auto& c : d.components) build_tables(c);
  } else if (d.kind == LengthKind::empirical) {
    for (const auto& b : d.bins) cum.push_back(acc += b.count);
  } else {
    return;
  }
  cumulative_[&d] = std::move(cum);
}

// The first entry whose cumulative weight exceeds u·total: entries of weight 0 are never picked.
size_t LengthSampler::pick(const LengthDistribution& d) {
  const std::vector<double>& cum = cumulative_.at(&d);
  double target = rng_.uniform01() * cum.back();
  size_t i = static_cast<size_t>(std::upper_bound(cum.begin(), cum.end(), target) - cum.begin());
  if (i < cum.size()) return i;
  // u·total rounded up to the total: the last entry with a positive weight.
  while (i > 1 && cum[i - 1] == cum[i - 2]) --i;
  return i - 1;
}

double LengthSampler::draw(const LengthDistribution& d) {
  switch (d.kind) {
    case LengthKind::fixed: return static_cast<double>(d.length_tokens);
    case LengthKind::lognormal: return std::exp(d.log_median + d.sigma * rng_.normal());
    case LengthKind::pareto: return d.scale_tokens * std::pow(rng_.uniform_open01(), -1.0 / d.alpha);
    case LengthKind::mixture: return d.components.empty() ? 0.0 : draw(d.components[pick(d)]);
    case LengthKind::empirical: {
      if (d.order != LengthOrder::resample && !d.sequence.empty()) return static_cast<double>(replay(d));
      if (d.bins.empty()) return 0;
      const LengthBin& b = d.bins[pick(d)];
      uint64_t width = static_cast<uint64_t>(b.hi_tokens - b.lo_tokens + 1);
      return static_cast<double>(b.lo_tokens + static_cast<int64_t>(rng_.uniform_below(width)));
    }
  }
  return 0;
}

// The file's next length: in file order, or in an order drawn at the start of each pass (Fisher–Yates
// with this sampler's stream).
int64_t LengthSampler::replay(const LengthDistribution& d) {
  if (cursor_ == 0) {
    if (order_.size() != d.sequence.size()) {
      order_.resize(d.sequence.size());
      for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
    }
    if (d.order == LengthOrder::shuffle)
      for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng_.uniform_below(i)]);
  }
  const int64_t v = d.sequence[order_[cursor_]];
  cursor_ = (cursor_ + 1) % order_.size();
  return v;
}

int64_t LengthSampler::next() {
  if (overlong_ == Overlong::drop) {
    // DCP's get_*_batches.py: the dataset's lengths scaled, those over the budget left out.
    for (int tries = 0; tries < 1000000; ++tries) {
      const double raw = std::clamp(draw(*dist_), static_cast<double>(profile_min_), static_cast<double>(profile_max_));
      const double x = std::max(1.0, std::round(raw * length_scale_));
      if (x >= static_cast<double>(min_length_) && x <= static_cast<double>(max_length_)) return static_cast<int64_t>(x);
    }
    throw std::runtime_error("a million draws in a row fell outside the lengths [" + std::to_string(min_length_) + ", " +
                             std::to_string(max_length_) + "] (length_scale " + std::to_string(length_scale_) + ")");
  }
  double x = draw(*dist_) * length_scale_;
  // Clip in floating point first: a Pareto draw with a small alpha can exceed int64.
  x = std::clamp(x, static_cast<double>(min_length_), static_cast<double>(max_length_));
  return std::clamp(static_cast<int64_t>(std::llround(x)), min_length_, max_length_);
}

std::vector<int64_t> sample_lengths(const LengthProfile& profile, uint64_t seed, size_t n, int64_t min_length,
                                    int64_t max_length) {
  LengthSampler sampler(profile, seed, min_length, max_length);
  std::vector<int64_t> out(n);
  for (auto& v : out) v = sampler.next();
  return out;
}

}  // namespace cpbench
