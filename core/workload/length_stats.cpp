#include "core/workload/length_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace cpbench {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double bins_total(const std::vector<LengthBin>& bins) {
  double total = 0;
  for (const auto& b : bins) total += b.count;
  return total;
}

// Count-weighted mass and Σ value·mass of the integers ≤ x of one bin (each integer of the bin
// carries count / width).
void bin_part_le(const LengthBin& b, double x, double& mass, double& moment) {
  if (x < static_cast<double>(b.lo_tokens)) return;
  double width = static_cast<double>(b.hi_tokens - b.lo_tokens + 1);
  double top = std::min(std::floor(x), static_cast<double>(b.hi_tokens));
  double k = top - static_cast<double>(b.lo_tokens) + 1;  // integers lo..top
  mass += b.count * k / width;
  moment += b.count / width * k * (static_cast<double>(b.lo_tokens) + top) / 2;
}

// E[L; L ≤ t]: the partial expectation that the clipped mean is built from.
double partial_expectation(const LengthDistribution& d, double t) {
  switch (d.kind) {
    case LengthKind::fixed: return static_cast<double>(d.length_tokens) <= t ? double(d.length_tokens) : 0.0;
    case LengthKind::lognormal:
      if (t <= 0) return 0;
      // ∫_0^t x f(x) dx = e^(mu + sigma²/2) Φ((ln t − mu − sigma²)/sigma).
      return std::exp(d.log_median + 0.5 * d.sigma * d.sigma) *
             normal_cdf((std::log(t) - d.log_median - d.sigma * d.sigma) / d.sigma);
    case LengthKind::pareto: {
      double xm = d.scale_tokens, a = d.alpha;
      if (t <= xm) return 0;
      // ∫_xm^t x · a xm^a x^(−a−1) dx.
      if (std::abs(a - 1) < 1e-12) return xm * std::log(t / xm);
      return a * std::pow(xm, a) * (std::pow(t, 1 - a) - std::pow(xm, 1 - a)) / (1 - a);
    }
    case LengthKind::mixture: {
      double s = 0;
      for (size_t i = 0; i < d.components.size(); ++i) s += d.weights[i] * partial_expectation(d.components[i], t);
      return s;
    }
    case LengthKind::empirical: {
      double mass = 0, moment = 0;
      for (const auto& b : d.bins) bin_part_le(b, t, mass, moment);
      double total = bins_total(d.bins);
      return total > 0 ? moment / total : 0;
    }
  }
  return 0;
}

}  // namespace

double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::numbers::sqrt2); }

double normal_quantile(double p) {
  if (p <= 0) return -kInf;
  if (p >= 1) return kInf;
  // Newton from 0: Φ − p is concave for z > 0 and convex for z < 0, so the iterates approach the
  // root monotonically from the side of 0 and never overshoot it.
  double z = 0;
  for (int i = 0; i < 200; ++i) {
    double density = std::exp(-0.5 * z * z) / std::sqrt(2 * std::numbers::pi);
    double step = (normal_cdf(z) - p) / density;
    z -= step;
    if (!std::isfinite(z) || std::abs(step) <= 1e-14 * std::max(1.0, std::abs(z))) break;
  }
  return z;
}

double profile_mean_tokens(const LengthDistribution& d) {
  switch (d.kind) {
    case LengthKind::fixed: return static_cast<double>(d.length_tokens);
    case LengthKind::lognormal: return std::exp(d.log_median + 0.5 * d.sigma * d.sigma);
    case LengthKind::pareto: return d.alpha > 1 ? d.alpha * d.scale_tokens / (d.alpha - 1) : kInf;
    case LengthKind::mixture: {
      double s = 0;
      for (size_t i = 0; i < d.components.size(); ++i) s += d.weights[i] * profile_mean_tokens(d.components[i]);
      return s;
    }
    case LengthKind::empirical: {
      double s = 0;
      for (const auto& b : d.bins) s += b.count * 0.5 * static_cast<double>(b.lo_tokens + b.hi_tokens);
      double total = bins_total(d.bins);
      return total > 0 ? s / total : 0;
    }
  }
  return 0;
}

double profile_mean_tokens(const LengthProfile& p) { return profile_mean_tokens(p.distribution); }

double profile_cdf(const LengthDistribution& d, double x) {
  switch (d.kind) {
    case LengthKind::fixed: return x >= static_cast<double>(d.length_tokens) ? 1.0 : 0.0;
    case LengthKind::lognormal: return x <= 0 ? 0.0 : normal_cdf((std::log(x) - d.log_median) / d.sigma);
    case LengthKind::pareto: return x <= d.scale_tokens ? 0.0 : 1.0 - std::pow(d.scale_tokens / x, d.alpha);
    case LengthKind::mixture: {
      double s = 0;
      for (size_t i = 0; i < d.components.size(); ++i) s += d.weights[i] * profile_cdf(d.components[i], x);
      return s;
    }
    case LengthKind::empirical: {
      double mass = 0, moment = 0;
      for (const auto& b : d.bins) bin_part_le(b, x, mass, moment);
      double total = bins_total(d.bins);
      return total > 0 ? mass / total : 0;
    }
  }
  return 0;
}

double profile_quantile_tokens(const LengthDistribution& d, double p) {
  p = std::clamp(p, 0.0, 1.0);
  switch (d.kind) {
    case LengthKind::fixed: return static_cast<double>(d.length_tokens);
    case LengthKind::lognormal: return std::exp(d.log_median + d.sigma * normal_quantile(p));
    case LengthKind::pareto: return d.scale_tokens * std::pow(1 - p, -1 / d.alpha);
    case LengthKind::empirical: {
      double target = p * bins_total(d.bins), before = 0;
      for (const auto& b : d.bins) {
        if (b.count > 0 && before + b.count >= target) {
          // Smallest v with before + count·(v − lo + 1)/width ≥ target.
          double width = static_cast<double>(b.hi_tokens - b.lo_tokens + 1);
          double k = std::ceil((target - before) * width / b.count - 1e-9);
          return std::clamp(static_cast<double>(b.lo_tokens) + std::max(k, 1.0) - 1,
                            static_cast<double>(b.lo_tokens), static_cast<double>(b.hi_tokens));
        }
        before += b.count;
      }
      return d.bins.empty() ? 0.0 : static_cast<double>(d.bins.back().hi_tokens);
    }
    case LengthKind::mixture: {
      // The mixture's quantile lies between its components' quantiles at the same p.
      double lo = kInf, hi = 0;
      for (const auto& c : d.components) {
        double q = profile_quantile_tokens(c, p);
        lo = std::min(lo, q);
        hi = std::max(hi, q);
      }
      if (!(hi > lo) || !std::isfinite(hi)) return hi;
      for (int i = 0; i < 200 && hi - lo > 1e-9 * hi; ++i) {
        double mid = 0.5 * (lo + hi);
        (profile_cdf(d, mid) >= p ? hi : lo) = mid;
      }
      return hi;
    }
  }
  return 0;
}

double profile_quantile_tokens(const LengthProfile& p, double prob) {
  return profile_quantile_tokens(p.distribution, prob);
}

double clipped_mean_tokens(const LengthDistribution& d, double lo, double hi) {
  // E[clip(L)] = lo·P(L ≤ lo) + E[L; lo < L ≤ hi] + hi·P(L > hi); holds for discrete L too.
  double f_lo = profile_cdf(d, lo), f_hi = profile_cdf(d, hi);
  return lo * f_lo + (partial_expectation(d, hi) - partial_expectation(d, lo)) + hi * (1 - f_hi);
}

double clipped_mean_tokens(const LengthProfile& p) {
  return clipped_mean_tokens(p.distribution, static_cast<double>(p.min_length), static_cast<double>(p.max_length));
}

}  // namespace cpbench
