// length_stats.h — analytic properties of a length distribution: mean, CDF, quantiles and the
// mean after clipping to [lo, hi]; the references that sampling is tested against.
// Requires: length_profile.h. Values are continuous (before the sampler rounds to whole tokens),
// except for empirical profiles, which are discrete (every integer of a bin equally likely).
// Note: a Pareto tail with alpha ≤ 1 has an infinite mean (returned as +inf); its clipped mean is
// finite. Mixture quantiles are found by bisection on the CDF.
#pragma once

#include "core/workload/length_profile.h"

namespace cpbench {

// Standard normal CDF Φ(z) = erfc(−z/√2)/2 and its inverse (Newton on Φ, |error| < 1e-12).
double normal_cdf(double z);
double normal_quantile(double p);

// Mean of the unclamped distribution, in tokens.
double profile_mean_tokens(const LengthDistribution& d);
double profile_mean_tokens(const LengthProfile& p);

// P(L ≤ x) of the unclamped distribution.
double profile_cdf(const LengthDistribution& d, double x_tokens);

// Smallest x with P(L ≤ x) ≥ p, p in (0, 1), of the unclamped distribution.
double profile_quantile_tokens(const LengthDistribution& d, double p);
double profile_quantile_tokens(const LengthProfile& p, double prob);

// E[min(max(L, lo), hi)]: the mean after clipping, as sample_lengths clips.
double clipped_mean_tokens(const LengthDistribution& d, double lo_tokens, double hi_tokens);
double clipped_mean_tokens(const LengthProfile& p);  // with the profile's own clamp

}  // namespace cpbench
