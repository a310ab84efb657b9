// attention_testing.h — test-only helpers shared by the kernels' tests: mask rows (full, causal,
// sink + sliding window, two ranges, fully masked), packed batches, seeded random tensors, and
// the tolerance check |x − ref| ≤ atol + rtol·|ref| that reports the worst element.
// Requires: GoogleTest (header-only; included from *_test.cpp files only).
// Note: masks are rebuilt here as plain KeyRanges because kernels/ may not include core/workload.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernels/reference/attention_problem.h"

namespace cpbench::kernels::testing {

// Key ranges of query q in a sequence of len_q queries and len_k keys; queries are aligned to the
// END of the keys (q sees keys up to q + len_k − len_q), the convention of a causal suffix.
using MaskFn = std::function<KeyRanges(int64_t q, int64_t len_q, int64_t len_k)>;

inline KeyRanges full_row(int64_t, int64_t, int64_t len_k) { return {0, len_k, len_k, len_k}; }

inline KeyRanges causal_row(int64_t q, int64_t len_q, int64_t len_k) {
  const int64_t last = q + len_k - len_q;  // inclusive
  return {0, last + 1, last + 1, last + 1};
}

// DCP's lambda mask (references/dcp.md): [0, min(sink, i+1)) ∪ [max(0, i−window+1), i+1).
inline MaskFn lambda_mask(int64_t sink, int64_t window) {
  return [sink, window](int64_t q, int64_t len_q, int64_t len_k) {
    const int64_t i = q + len_k - len_q;
    const int64_t e0 = std::min(sink, i + 1), b1 = std::max(e0, i - window + 1);
    return KeyRanges{0, e0, b1, i + 1};
  };
}

// Two disjoint ranges with a gap, different per row; every 5th row fully masked.
inline KeyRanges two_range_row(int64_t q, int64_t, int64_t len_k) {
  if (q % 5 == 3) return {0, 0, 0, 0};
  const int64_t b0 = q % 3, e0 = std::min(len_k, b0 + 1 + q % 7);
  const int64_t b1 = std::min(len_k, e0 + 2 + q % 4), e1 = std::min(len_k, b1 + 3 + (q * 13) % 11);
  return {b0, e0, b1, e1};
}

// The kernels' tests' masks by name: full, causal, lambda (sink 4, window 24: both ranges cross
// blocks), anything else two_range (which has fully masked rows).
inline MaskFn mask_by_name(const std::string& name) {
  if (name == "full") return full_row;
  if (name == "causal") return causal_row;
  if (name == "lambda") return lambda_mask(4, 24);
  return two_range_row;
}

inline VarlenBatch make_batch(const AttentionDims& dims, const std::vector<int64_t>& lens_q,
                              const std::vector<int64_t>& lens_k, const MaskFn& mask) {
  VarlenBatch b;
  b.dims = dims;
  for (size_t s = 0; s < lens_q.size(); ++s) {
    b.cu_seqlens_q.push_back(b.cu_seqlens_q.back() + lens_q[s]);
    b.cu_seqlens_k.push_back(b.cu_seqlens_k.back() + lens_k[s]);
    for (int64_t q = 0; q < lens_q[s]; ++q) b.row_ranges.push_back(mask(q, lens_q[s], lens_k[s]));
  }
  return b;
}

template <typename Real = float>
std::vector<Real> random_tensor(int64_t n, uint64_t seed, double stddev = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<Real> x(static_cast<size_t>(n));
  for (Real& v : x) v = static_cast<Real>(dist(rng));
  return x;
}

// Passes when every element satisfies |x − ref| ≤ atol + rtol·|ref| (infinities must match
// exactly); otherwise reports the count and the worst element.
template <typename A, typename B>
::testing::AssertionResult all_close(std::span<const A> x, std::span<const B> ref, double atol, double rtol) {
  if (x.size() != ref.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << x.size() << " vs " << ref.size();
  }
  size_t bad = 0, worst = 0;
  double worst_excess = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double a = static_cast<double>(x[i]), r = static_cast<double>(ref[i]);
    if (std::isinf(r) || std::isinf(a)) {
      if (a != r) {
        ++bad;
        worst = i;
        worst_excess = INFINITY;
      }
      continue;
    }
    const double excess = std::abs(a - r) - (atol + rtol * std::abs(r));
    if (!(excess <= 0.0)) {
      ++bad;
      if (!(excess <= worst_excess)) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << x.size() << " elements outside atol " << atol
                                       << " + rtol " << rtol << "·|ref|; worst at " << worst << ": "
                                       << static_cast<double>(x[worst]) << " vs "
                                       << static_cast<double>(ref[worst]);
}

template <typename A, typename B>
::testing::AssertionResult all_close(const std::vector<A>& x, const std::vector<B>& ref, double atol,
                                     double rtol) {
  return all_close(std::span<const A>(x), std::span<const B>(ref), atol, rtol);
}

}  // namespace cpbench::kernels::testing
