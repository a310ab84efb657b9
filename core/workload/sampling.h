// sampling.h — deterministic draws of sequence lengths from a LengthProfile.
// Requires: length_profile.h, rng.h. Same profile, seed and clamp → the same lengths on every
// platform (SplitMix64 and our own transforms; no std:: distribution).
// Note: the stream is sequential, so the first k lengths of a draw of n > k equal a draw of k.
// Each length is the continuous draw times `length_scale`, clipped to [min_length, max_length] and
// rounded to the nearest whole token (Overlong::clip); or, as DCP's batch scripts build their
// batches (Overlong::drop), the draw clipped to the profile's own range (the dataset as it is),
// times `length_scale`, rounded, and drawn again while outside [min_length, max_length].
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/workload/length_profile.h"
#include "core/workload/rng.h"

namespace cpbench {

// Draws one length at a time. Each draw consumes: fixed 0 uniforms; lognormal 2 (Box–Muller);
// pareto 1 (inverse CDF, x_m·U^(−1/alpha)); empirical 2 (a bin by count, then an integer inside
// it); mixture 1 (the component) + the component's. An empirical profile replaying its file
// ("order" shuffle or file) draws nothing per length: shuffle draws n − 1 integers at the start of
// each pass over the file's n lengths.
enum class Overlong { clip, drop };

class LengthSampler {
 public:
  // Requires 1 ≤ min_length ≤ max_length and length_scale > 0. The caller's clamp replaces the
  // profile's (a workload may tighten it, or widen it when it scales lengths). The profile must
  // outlive the sampler, unchanged. With Overlong::drop the caller's range filters the scaled
  // lengths instead (the profile's range bounds the raw draw).
  LengthSampler(const LengthProfile& profile, uint64_t seed, int64_t min_length, int64_t max_length,
                double length_scale = 1.0, Overlong overlong = Overlong::clip);

  // Throws std::runtime_error (drop) when a million draws in a row fall outside the range.
  int64_t next();

 private:
  void build_tables(const LengthDistribution& d);
  double draw(const LengthDistribution& d);
  int64_t replay(const LengthDistribution& d);
  size_t pick(const LengthDistribution& d);

  const LengthDistribution* dist_;
  int64_t profile_min_, profile_max_;
  SplitMix64 rng_;
  int64_t min_length_, max_length_;
  double length_scale_;
  Overlong overlong_;
  // Cumulative weights (mixture) or counts (empirical) of each node, for a binary search.
  std::unordered_map<const LengthDistribution*, std::vector<double>> cumulative_;
  std::vector<size_t> order_;  // replay: this pass's order of the file's lengths
  size_t cursor_ = 0;          // replay: the next position in order_
};

// n lengths clipped to [min_length, max_length]; the caller may tighten the profile's own clamp
// (pass profile.min_length / profile.max_length to use it as is).
std::vector<int64_t> sample_lengths(const LengthProfile& profile, uint64_t seed, size_t n, int64_t min_length,
                                    int64_t max_length);

}  // namespace cpbench
