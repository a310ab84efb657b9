// attention_ref_test.cpp — the oracle itself: a hand-computed case, GQA head mapping, packing
// independence, and backward against central finite differences in double.
#include "kernels/reference/attention_ref.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/reference/attention_testing.h"

namespace cpbench::kernels {
namespace {

using testing::all_close;
using testing::make_batch;
using testing::random_tensor;

constexpr double kInf = std::numeric_limits<double>::infinity();

// 3 queries, 2 keys, d = 2, scale 1: row 0 sees key 0, row 1 both keys, row 2 nothing.
TEST(AttentionRef, HandComputedCase) {
  VarlenBatch b;
  b.dims = {1, 1, 2, 1.0};
  b.cu_seqlens_q = {0, 3};
  b.cu_seqlens_k = {0, 2};
  b.row_ranges = {{0, 1, 1, 1}, {0, 2, 2, 2}, {0, 0, 0, 0}};
  const std::vector<double> q = {1, 0, 0, 1, 5, 5}, k = {1, 0, 0, 1}, v = {1, 2, 3, 4};
  const auto r = attention_forward_ref<double>(b, q, k, v);
  // Row 1: scores (0, 1) → p1 = e/(1+e); O = v0 + p1·(v1 − v0) = (1 + 2 p1, 2 + 2 p1).
  const double p1 = std::exp(1.0) / (1.0 + std::exp(1.0));
  const std::vector<double> out = {1, 2, 1 + 2 * p1, 2 + 2 * p1, 0, 0};
  const std::vector<double> lse = {1.0, std::log(1.0 + std::exp(1.0)), -kInf};
  EXPECT_TRUE(all_close(r.out, out, 1e-15, 1e-15));
  EXPECT_TRUE(all_close(r.lse, lse, 1e-15, 1e-15));
}

TEST(AttentionRef, DefaultScaleIsInverseSqrtHeadDim) {
  VarlenBatch b;
  b.dims = {1, 1, 4, 0.0};
  b.cu_seqlens_q = {0, 1};
  b.cu_seqlens_k = {0, 2};
  b.row_ranges = {{0, 2, 2, 2}};
  const std::vector<double> q = {2, 0, 0, 0}, k = {1, 0, 0, 0, 0, 0, 0, 0}, v = {1, 0, 0, 0, 0, 0, 0, 0};
  const auto r = attention_forward_ref<double>(b, q, k, v);
  // scores = (2·1/√4, 0) = (1, 0)
  EXPECT_NEAR(r.lse[0], std::log(std::exp(1.0) + 1.0), 1e-15);
  EXPECT_NEAR(r.out[0], std::exp(1.0) / (std::exp(1.0) + 1.0), 1e-15);
}

// GQA: Hq = 4 over Hkv = 2 must equal Hq = 4 over Hkv = 4 with each KV head duplicated.
TEST(AttentionRef, GqaHeadMapping) {
  const int64_t D = 5, L = 9;
  const auto b2 = make_batch({4, 2, D, 0.0}, {L}, {L}, testing::causal_row);
  const auto b4 = make_batch({4, 4, D, 0.0}, {L}, {L}, testing::causal_row);
  const auto q = random_tensor(L * 4 * D, 1), k2 = random_tensor(L * 2 * D, 2), v2 = random_tensor(L * 2 * D, 3);
  std::vector<float> k4, v4;
  for (int64_t j = 0; j < L; ++j) {
    for (int64_t h = 0; h < 4; ++h) {
      const int64_t g = h / 2;
      for (int64_t x = 0; x < D; ++x) {
        k4.push_back(k2[(j * 2 + g) * D + x]);
        v4.push_back(v2[(j * 2 + g) * D + x]);
      }
    }
  }
  const auto r2 = attention_forward_ref<float>(b2, q, k2, v2);
  const auto r4 = attention_forward_ref<float>(b4, q, k4, v4);
  EXPECT_EQ(r2.out, r4.out);
  EXPECT_EQ(r2.lse, r4.lse);
}

// Packing: two sequences in one pack give exactly what each gives alone (no cross-document attention).
TEST(AttentionRef, PackedSequencesAreIndependent) {
  const AttentionDims dims{2, 1, 3, 0.0};
  const auto packed = make_batch(dims, {4, 6}, {4, 6}, testing::full_row);
  const auto first = make_batch(dims, {4}, {4}, testing::full_row);
  const auto second = make_batch(dims, {6}, {6}, testing::full_row);
  const auto q = random_tensor(10 * 2 * 3, 4), k = random_tensor(10 * 3, 5), v = random_tensor(10 * 3, 6);
  const auto r = attention_forward_ref<float>(packed, q, k, v);
  const auto r1 = attention_forward_ref<float>(first, std::span(q).first(24), std::span(k).first(12),
                                               std::span(v).first(12));
  const auto r2 = attention_forward_ref<float>(second, std::span(q).subspan(24), std::span(k).subspan(12),
                                               std::span(v).subspan(12));
  EXPECT_EQ(std::vector<float>(r.out.begin(), r.out.begin() + 24), r1.out);
  EXPECT_EQ(std::vector<float>(r.out.begin() + 24, r.out.end()), r2.out);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(r.lse[h * 10 + i], r1.lse[h * 4 + i]);
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(r.lse[h * 10 + 4 + i], r2.lse[h * 6 + i]);
  }
}

// Backward vs central differences of L = Σ W∘O in double (h = 1e-6: truncation ~h², rounding
// ~1e-16/h, so |error| ≲ 1e-9; checked with atol 1e-8, rtol 1e-6). GQA, two sequences, sink +
// window mask, a two-range row and a fully masked row.
TEST(AttentionRef, BackwardMatchesFiniteDifferences) {
  const int64_t Hq = 4, Hkv = 2, D = 3;
  auto batch = make_batch({Hq, Hkv, D, 0.0}, {5, 3}, {6, 3}, testing::lambda_mask(1, 3));
  batch.row_ranges[2] = {0, 0, 0, 0};  // fully masked
  batch.row_ranges[6] = {0, 1, 2, 3};  // two ranges with a gap
  const int64_t nq = batch.total_q() * Hq * D, nk = batch.total_k() * Hkv * D;
  auto q = random_tensor<double>(nq, 7), k = random_tensor<double>(nk, 8), v = random_tensor<double>(nk, 9);
  const auto w = random_tensor<double>(nq, 10);
  const auto grads = attention_backward_ref<double>(batch, q, k, v, w);
  auto loss = [&]() {
    const auto r = attention_forward_ref<double>(batch, q, k, v);
    double sum = 0.0;
    for (size_t i = 0; i < r.out.size(); ++i) sum += w[i] * r.out[i];
    return sum;
  };
  auto numeric = [&](std::vector<double>& x) {
    const double h = 1e-6;
    std::vector<double> g(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double saved = x[i];
      x[i] = saved + h;
      const double up = loss();
      x[i] = saved - h;
      const double down = loss();
      x[i] = saved;
      g[i] = (up - down) / (2 * h);
    }
    return g;
  };
  EXPECT_TRUE(all_close(grads.dq, numeric(q), 1e-8, 1e-6));
  EXPECT_TRUE(all_close(grads.dk, numeric(k), 1e-8, 1e-6));
  EXPECT_TRUE(all_close(grads.dv, numeric(v), 1e-8, 1e-6));
  for (int64_t h = 0; h < Hq; ++h) {  // the masked row's query gets no gradient
    for (int64_t x = 0; x < D; ++x) EXPECT_EQ(grads.dq[(2 * Hq + h) * D + x], 0.0);
  }
}

TEST(AttentionProblem, ValidateNamesTheProblem) {
  auto b = make_batch({4, 2, 8, 0.0}, {3}, {3}, testing::causal_row);
  EXPECT_EQ(validate_batch(b), "");
  b.dims.heads_kv = 3;
  EXPECT_EQ(validate_batch(b), "heads_q (4) must be a multiple of heads_kv (3)");
  b.dims.heads_kv = 2;
  b.row_ranges.pop_back();
  EXPECT_EQ(validate_batch(b), "row_ranges has 2 rows, expected total_q = 3");
  b.row_ranges.push_back({});
  b.cu_seqlens_k = {0, 2, 1};
  b.cu_seqlens_q = {0, 3, 3};
  EXPECT_EQ(validate_batch(b), "cu_seqlens must be non-decreasing (at index 2)");
}

TEST(AttentionProblem, ClipRangesSortsMergesAndCounts) {
  int64_t b0, e0, b1, e1;
  EXPECT_EQ(clip_ranges({10, 20, 30, 40}, 15, 35, b0, e0, b1, e1), 10);
  EXPECT_EQ((std::vector<int64_t>{b0, e0, b1, e1}), (std::vector<int64_t>{15, 20, 30, 35}));
  EXPECT_EQ(clip_ranges({30, 40, 10, 20}, 0, 100, b0, e0, b1, e1), 20);  // unsorted input
  EXPECT_EQ((std::vector<int64_t>{b0, e0, b1, e1}), (std::vector<int64_t>{10, 20, 30, 40}));
  EXPECT_EQ(clip_ranges({0, 64, 10, 80}, 0, 100, b0, e0, b1, e1), 80);  // overlap merged, counted once
  EXPECT_EQ((std::vector<int64_t>{b0, e0, b1, e1}), (std::vector<int64_t>{0, 80, 80, 80}));
  EXPECT_EQ(clip_ranges({0, 5, 5, 5}, 5, 9, b0, e0, b1, e1), 0);  // nothing inside the window
  const auto causal = make_batch({1, 1, 1, 0.0}, {7, 3}, {7, 5}, testing::causal_row);
  EXPECT_EQ(allowed_pairs(causal), 7 * 8 / 2 + (3 + 4 + 5));
}

}  // namespace
}  // namespace cpbench::kernels
