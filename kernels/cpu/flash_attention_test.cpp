// flash_attention_test.cpp — the tiled CPU kernel against the double-accumulating reference at odd
// shapes, the LSE merge of KV splits, and backward. Tolerances, |x − ref| ≤ atol + rtol·|ref| with
// inputs ~ N(0, 1): O and LSE atol 2e-5, rtol 2e-4 (fp32 sums over ≤ 257 keys and d ≤ 128);
// dQ, dK, dV atol 1e-4, rtol 1e-3 (four chained fp32 products per gradient). Split-vs-whole tiles
// of the same kernel: atol 1e-6, rtol 1e-5.
#include "kernels/cpu/flash_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "kernels/cpu/softmax_row.h"
#include "kernels/reference/attention_ref.h"
#include "kernels/reference/attention_testing.h"

namespace cpbench::kernels {
namespace {

using testing::all_close;
using testing::make_batch;
using testing::MaskFn;
using testing::random_tensor;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr double kOutAtol = 2e-5, kOutRtol = 2e-4, kGradAtol = 1e-4, kGradRtol = 1e-3;

struct Tensors {
  std::vector<float> q, k, v, dout;
};

Tensors make_tensors(const VarlenBatch& b, uint64_t seed) {
  const int64_t nq = b.total_q() * b.dims.heads_q * b.dims.head_dim;
  const int64_t nk = b.total_k() * b.dims.heads_kv * b.dims.head_dim;
  return {random_tensor(nq, seed), random_tensor(nk, seed + 1), random_tensor(nk, seed + 2),
          random_tensor(nq, seed + 3)};
}

// Odd blocks (24 × 40) so that lengths 7, 100, 257 end mid-block and block edges cut the masks.
const FlashConfig kOddBlocks{24, 40, 0};

class FlashVsReference : public ::testing::TestWithParam<std::tuple<int64_t, std::string>> {};

// Sequences of 1, 7, 100 and 257 tokens packed together, GQA 4 query heads over 2 KV heads.
TEST_P(FlashVsReference, ForwardAndBackward) {
  const auto [head_dim, mask] = GetParam();
  const auto batch =
      make_batch({4, 2, head_dim, 0.0}, {1, 7, 100, 257}, {1, 7, 100, 257}, testing::mask_by_name(mask));
  ASSERT_EQ(validate_batch(batch), "");
  const Tensors t = make_tensors(batch, 100 + head_dim);
  const auto ref = attention_forward_ref<float>(batch, t.q, t.k, t.v);
  const auto got = flash_attention_forward(batch, t.q, t.k, t.v, kOddBlocks);
  EXPECT_TRUE(all_close(got.out, ref.out, kOutAtol, kOutRtol));
  EXPECT_TRUE(all_close(got.lse, ref.lse, kOutAtol, kOutRtol));

  const auto ref_grads = attention_backward_ref<float>(batch, t.q, t.k, t.v, t.dout);
  const auto grads = flash_attention_backward(batch, t.q, t.k, t.v, got.out, got.lse, t.dout, kOddBlocks);
  EXPECT_TRUE(all_close(grads.dq, ref_grads.dq, kGradAtol, kGradRtol));
  EXPECT_TRUE(all_close(grads.dk, ref_grads.dk, kGradAtol, kGradRtol));
  EXPECT_TRUE(all_close(grads.dv, ref_grads.dv, kGradAtol, kGradRtol));
}

INSTANTIATE_TEST_SUITE_P(HeadDimsAndMasks, FlashVsReference,
                         ::testing::Combine(::testing::Values(32, 59, 64, 128),
                                            ::testing::Values("full", "causal", "lambda", "two_range")),
                         [](const auto& info) {
                           return "d" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });

// Default blocks (128 × 256), fewer queries than keys (a causal suffix), one sequence fully masked.
TEST(FlashAttention, DefaultBlocksSuffixQueriesAndMaskedSequence) {
  auto batch = make_batch({2, 1, 64, 0.0}, {300, 5, 130}, {520, 5, 130}, testing::causal_row);
  for (int64_t r = 300; r < 305; ++r) batch.row_ranges[r] = {0, 0, 0, 0};
  const Tensors t = make_tensors(batch, 7);
  const auto ref = attention_forward_ref<float>(batch, t.q, t.k, t.v);
  const auto got = flash_attention_forward(batch, t.q, t.k, t.v);
  EXPECT_TRUE(all_close(got.out, ref.out, kOutAtol, kOutRtol));
  EXPECT_TRUE(all_close(got.lse, ref.lse, kOutAtol, kOutRtol));
  EXPECT_EQ(got.lse[302], kNegInf);
  const auto ref_grads = attention_backward_ref<float>(batch, t.q, t.k, t.v, t.dout);
  const auto grads = flash_attention_backward(batch, t.q, t.k, t.v, got.out, got.lse, t.dout);
  EXPECT_TRUE(all_close(grads.dq, ref_grads.dq, kGradAtol, kGradRtol));
  EXPECT_TRUE(all_close(grads.dk, ref_grads.dk, kGradAtol, kGradRtol));
  EXPECT_TRUE(all_close(grads.dv, ref_grads.dv, kGradAtol, kGradRtol));
}

// A distributed plan computes one sequence's keys as 2–4 tiles (possibly on different ranks) and
// merges (O, LSE); the merge must equal the single tile. Causal splits leave early rows with no
// key in later tiles (partial LSE = −inf), which must contribute nothing.
TEST(FlashAttention, KvSplitsMergeToTheWholeTile) {
  const int64_t L = 257, D = 59;
  for (const std::string mask : {"causal", "lambda", "two_range", "full"}) {
    const auto batch = make_batch({3, 1, D, 0.0}, {L}, {L}, testing::mask_by_name(mask));
    const Tensors t = make_tensors(batch, 11);
    TileInput whole{batch.dims, t.q.data(), L, batch.row_ranges.data(), t.k.data(), t.v.data(), L, 0};
    const PartialOutput one = flash_tile_forward(whole, kOddBlocks);
    const auto ref = attention_forward_ref<float>(batch, t.q, t.k, t.v);
    EXPECT_TRUE(all_close(one.out, ref.out, kOutAtol, kOutRtol)) << mask;
    for (const std::vector<int64_t>& cuts : {std::vector<int64_t>{0, 128, L}, {0, 37, 130, L}, {0, 1, 64, 200, L}}) {
      std::vector<PartialOutput> parts;
      for (size_t p = 0; p + 1 < cuts.size(); ++p) {
        TileInput tile = whole;
        tile.k = t.k.data() + cuts[p] * D;
        tile.v = t.v.data() + cuts[p] * D;
        tile.rows_k = cuts[p + 1] - cuts[p];
        tile.key_begin = cuts[p];
        parts.push_back(flash_tile_forward(tile, kOddBlocks));
      }
      const PartialOutput merged = merge_partials(parts, batch.dims);
      EXPECT_TRUE(all_close(merged.out, one.out, 1e-6, 1e-5)) << mask << " with " << parts.size() << " tiles";
      EXPECT_TRUE(all_close(merged.lse, one.lse, 1e-6, 1e-5)) << mask << " with " << parts.size() << " tiles";
    }
  }
}

// Backward over KV tiles with the merged (final) O and LSE sums to the whole backward; query
// tiles write disjoint dQ rows. This is how a ring or DCP backward accumulates dQ, dK, dV.
TEST(FlashAttention, BackwardOverTilesSumsToWhole) {
  const int64_t L = 201, D = 32, Hq = 4, Hkv = 2;
  const auto batch = make_batch({Hq, Hkv, D, 0.0}, {L}, {L}, testing::lambda_mask(8, 50));
  const Tensors t = make_tensors(batch, 21);
  const auto fwd = flash_attention_forward(batch, t.q, t.k, t.v, kOddBlocks);
  const auto whole = flash_attention_backward(batch, t.q, t.k, t.v, fwd.out, fwd.lse, t.dout, kOddBlocks);
  std::vector<float> dq(t.q.size(), 0.0f), dk(t.k.size(), 0.0f), dv(t.v.size(), 0.0f);
  const std::vector<int64_t> q_cuts{0, 90, L}, k_cuts{0, 45, 150, L};
  for (size_t a = 0; a + 1 < q_cuts.size(); ++a) {
    for (size_t b = 0; b + 1 < k_cuts.size(); ++b) {
      const int64_t i0 = q_cuts[a], j0 = k_cuts[b];
      TileInput tile{batch.dims, t.q.data() + i0 * Hq * D, q_cuts[a + 1] - i0, batch.row_ranges.data() + i0,
                     t.k.data() + j0 * Hkv * D, t.v.data() + j0 * Hkv * D, k_cuts[b + 1] - j0, j0};
      flash_tile_backward(tile, fwd.out.data() + i0 * Hq * D, fwd.lse.data() + i0, L, t.dout.data() + i0 * Hq * D,
                          dq.data() + i0 * Hq * D, dk.data() + j0 * Hkv * D, dv.data() + j0 * Hkv * D, kOddBlocks);
    }
  }
  EXPECT_TRUE(all_close(dq, whole.dq, 1e-6, 1e-5));
  EXPECT_TRUE(all_close(dk, whole.dk, 1e-6, 1e-5));
  EXPECT_TRUE(all_close(dv, whole.dv, 1e-6, 1e-5));
}

// Merge by hand: lse = log(e¹ + e²), O = weights e^(lse_k − lse); a −inf partial adds nothing.
TEST(FlashAttention, MergePartialsHandCase) {
  const AttentionDims dims{1, 1, 2, 0.0};
  const std::vector<PartialOutput> parts = {
      {{1.0f, 0.0f, 0.0f, 0.0f}, {1.0f, kNegInf}},
      {{0.0f, 1.0f, 0.0f, 0.0f}, {2.0f, kNegInf}},
      {{0.0f, 0.0f, 0.0f, 0.0f}, {kNegInf, kNegInf}}};
  const PartialOutput m = merge_partials(parts, dims);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0));
  EXPECT_NEAR(m.lse[0], lse, 1e-6);
  EXPECT_NEAR(m.out[0], std::exp(1.0 - lse), 1e-6);
  EXPECT_NEAR(m.out[1], std::exp(2.0 - lse), 1e-6);
  EXPECT_EQ(m.lse[1], kNegInf);  // every partial fully masked: row stays masked, O = 0
  EXPECT_EQ(m.out[2], 0.0f);
  EXPECT_EQ(m.out[3], 0.0f);
}

// Forward work items are independent, so the thread count cannot change a single bit.
TEST(FlashAttention, ThreadCountDoesNotChangeForward) {
  const auto batch = make_batch({4, 4, 64, 0.0}, {150}, {150}, testing::causal_row);
  const Tensors t = make_tensors(batch, 31);
  const auto one = flash_attention_forward(batch, t.q, t.k, t.v, {32, 64, 1});
  const auto two = flash_attention_forward(batch, t.q, t.k, t.v, {32, 64, 2});
  EXPECT_EQ(one.out, two.out);
  EXPECT_EQ(one.lse, two.lse);
}

// The vector exp polynomial (Cephes) against libm on the range softmax uses (x ≤ 0).
TEST(SoftmaxRow, ExpPolynomialAccuracy) {
  for (float x = -87.0f; x <= 0.0f; x += 0.01f) {
    const double want = std::exp(static_cast<double>(x));
    EXPECT_LE(std::abs(exp_poly(x) - want), 4e-7 * want) << "x = " << x;
  }
  EXPECT_EQ(exp_poly(kNegInf), 0.0f);
}

TEST(SoftmaxRow, MaskedColumnsAreZeroAndSumIsExact) {
  std::vector<float> row(20);
  for (int i = 0; i < 20; ++i) row[i] = -0.1f * static_cast<float>(i);
  row[0] = -5.0f;  // outside [lo, hi): must come back as it went in
  const int64_t c[4] = {3, 12, 15, 17};  // allowed columns 3..11 and 15..16 inside [1, 19)
  EXPECT_FLOAT_EQ(masked_row_max(row.data(), c), -0.3f);
  const float sum = masked_exp_row(row.data(), c, 1, 19, 0.0f);
  double want = 0.0;
  for (int i = 0; i < 20; ++i) {
    const bool allowed = (i >= 3 && i < 12) || (i >= 15 && i < 17);
    if (allowed) want += std::exp(-0.1 * i);
    if (allowed) EXPECT_NEAR(row[i], std::exp(-0.1 * i), 1e-6) << i;
    if (!allowed && i >= 1 && i < 19) EXPECT_EQ(row[i], 0.0f) << i;
  }
  EXPECT_NEAR(sum, want, 1e-5);
  EXPECT_FLOAT_EQ(row[0], -5.0f);
  EXPECT_FLOAT_EQ(row[19], -1.9f);  // outside [lo, hi): untouched
}

}  // namespace
}  // namespace cpbench::kernels
