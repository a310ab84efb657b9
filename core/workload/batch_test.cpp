// batch_test.cpp — global batches by sequence count and by token budget: exact counts, the
// stopping rule at the budget boundary, determinism, and the batch statistics.
#include "core/workload/batch.h"

#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "core/workload/sampling.h"

namespace cpbench {
namespace {

LengthProfile lognormal_profile() {
  LengthProfile p;
  p.min_length = 256;
  p.max_length = 131072;
  p.distribution.kind = LengthKind::lognormal;
  p.distribution.log_median = std::log(8192.0);
  p.distribution.sigma = 1.1;
  return p;
}

TEST(GlobalBatch, StatisticsAreExact) {
  GlobalBatch b{{3, 1000, 7}};
  EXPECT_EQ(b.total_tokens(), 1010);
  EXPECT_DOUBLE_EQ(b.sum_sq(), 9 + 1e6 + 49);
  EXPECT_EQ(b.max_length(), 1000);
  EXPECT_EQ(GlobalBatch{}.max_length(), 0);
}

TEST(MakeGlobalBatch, BySequencesGivesExactlyThatManyFromTheSampleStream) {
  auto p = lognormal_profile();
  GlobalBatch b = make_global_batch(p, BatchRequest{2048, 0, 256, 131072, 17});
  ASSERT_EQ(b.lengths.size(), 2048u);
  EXPECT_EQ(b.lengths, sample_lengths(p, 17, 2048, 256, 131072));
  EXPECT_EQ(make_global_batch(p, BatchRequest{2048, 0, 256, 131072, 17}).lengths, b.lengths);
  EXPECT_NE(make_global_batch(p, BatchRequest{2048, 0, 256, 131072, 18}).lengths, b.lengths);
}

TEST(MakeGlobalBatch, ByTokensStopsBeforeTheFirstSequenceThatWouldOverflow) {
  auto p = lognormal_profile();
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const int64_t budget = 131072;
    GlobalBatch b = make_global_batch(p, BatchRequest{0, budget, 256, 65536, seed});
    ASSERT_FALSE(b.lengths.empty());
    EXPECT_LE(b.total_tokens(), budget);
    // The batch is the stream's prefix, and the stream's next length would not have fit.
    auto stream = sample_lengths(p, seed, b.lengths.size() + 1, 256, 65536);
    EXPECT_TRUE(std::equal(b.lengths.begin(), b.lengths.end(), stream.begin()));
    EXPECT_GT(b.total_tokens() + stream.back(), budget) << "seed " << seed;
  }
}

TEST(MakeGlobalBatch, MinFillRedrawsBatchesBelowItFromTheSameStream) {
  auto p = lognormal_profile();
  int redrawn = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const int64_t budget = 131072;
    BatchRequest r{0, budget, 256, 131072, seed};
    const GlobalBatch first = make_global_batch(p, r);
    r.min_fill = 0.75;
    const GlobalBatch b = make_global_batch(p, r);
    EXPECT_GE(b.total_tokens(), 0.75 * budget) << "seed " << seed;
    EXPECT_LE(b.total_tokens(), budget);
    if (first.total_tokens() >= 0.75 * budget) {
      EXPECT_EQ(b.lengths, first.lengths);  // the first batch was full enough
      continue;
    }
    ++redrawn;
    // A later run of the same stream: a contiguous stretch of it, after the first batch.
    const auto stream = sample_lengths(p, seed, 20000, 256, 131072);
    const auto at = std::search(stream.begin() + static_cast<long>(first.lengths.size()), stream.end(), b.lengths.begin(),
                                b.lengths.end());
    EXPECT_NE(at, stream.end()) << "seed " << seed;
  }
  EXPECT_GT(redrawn, 0) << "the test needs seeds whose first batch is below 75%";
}

TEST(MakeGlobalBatch, ByTokensCapsLengthsAtTheBudget) {
  auto p = lognormal_profile();
  // max_length 131072 > budget 4096: every sequence is capped at 4096, so the batch is never empty.
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    GlobalBatch b = make_global_batch(p, BatchRequest{0, 4096, 256, 131072, seed});
    ASSERT_FALSE(b.lengths.empty());
    EXPECT_LE(b.total_tokens(), 4096);
    EXPECT_LE(b.max_length(), 4096);
  }
}

TEST(MakeGlobalBatch, FixedLengthsFillTheBudgetByWholeSequences) {
  LengthProfile p;
  p.min_length = p.max_length = 2048;
  p.distribution.kind = LengthKind::fixed;
  p.distribution.length_tokens = 2048;
  // 4 · 2048 = 8192 ≤ 10000 < 5 · 2048: four sequences, the fifth is dropped rather than cut.
  GlobalBatch b = make_global_batch(p, BatchRequest{0, 10000, 2048, 2048, 1});
  EXPECT_EQ(b.lengths, (std::vector<int64_t>{2048, 2048, 2048, 2048}));
}

TEST(MakeGlobalBatch, LengthScaleMultipliesBeforeClipping) {
  auto p = lognormal_profile();
  auto base = make_global_batch(p, BatchRequest{64, 0, 1, 1 << 30, 3});
  BatchRequest doubled{64, 0, 1, 1 << 30, 3};
  doubled.length_scale = 2.0;
  auto scaled = make_global_batch(p, doubled);
  for (size_t i = 0; i < base.lengths.size(); ++i)
    EXPECT_NEAR(double(scaled.lengths[i]), 2.0 * double(base.lengths[i]), 1.0);  // each rounded once
  // A cap at the median: half the doubled draws pass it and are clipped to it, which clipping
  // before scaling (2 · min(raw, cap)) would not do.
  std::vector<int64_t> sorted = base.lengths;
  std::sort(sorted.begin(), sorted.end());
  const int64_t cap = sorted[sorted.size() / 2];
  BatchRequest tight{64, 0, 1, cap, 3};
  tight.length_scale = 2.0;
  auto clipped = make_global_batch(p, tight);
  ASSERT_EQ(clipped.lengths.size(), base.lengths.size());
  int over = 0;
  for (size_t i = 0; i < base.lengths.size(); ++i) {
    over += 2 * base.lengths[i] > cap;
    EXPECT_LE(clipped.lengths[i], cap);
    EXPECT_NEAR(double(clipped.lengths[i]), std::min(2.0 * double(base.lengths[i]), double(cap)), 1.0);
  }
  EXPECT_GE(over, 32);
}

TEST(MakeGlobalBatch, DropLeavesOutScaledLengthsOverTheCapAndScalesTheDatasetAsItIs) {
  // DCP's get_*_batches.py: the dataset's lengths (its own range) scaled, those over the cap dropped.
  auto p = lognormal_profile();  // the dataset: 256 … 131072
  BatchRequest clip{200, 0, 1, 65536, 5};
  clip.length_scale = 2.0;
  BatchRequest drop = clip;
  drop.overlong = Overlong::drop;
  const auto clipped = make_global_batch(p, clip).lengths;
  const auto dropped = make_global_batch(p, drop).lengths;
  ASSERT_EQ(dropped.size(), 200u);
  const auto at_cap = std::count(clipped.begin(), clipped.end(), int64_t{65536});
  EXPECT_GT(at_cap, 5) << "the test needs draws over the cap";
  EXPECT_EQ(std::count(dropped.begin(), dropped.end(), int64_t{65536}), 0);  // none clipped to it
  EXPECT_LE(*std::max_element(dropped.begin(), dropped.end()), 65536);
  // The kept draws are the clip stream's draws under the cap, in order (a dropped draw is skipped).
  std::vector<int64_t> under;
  for (int64_t l : sample_lengths(p, 5, 2000, 1, 1 << 30))
    if (std::llround(2.0 * double(std::clamp<int64_t>(l, 256, 131072))) <= 65536) under.push_back(l);
  for (size_t i = 0; i < dropped.size(); ++i)
    EXPECT_NEAR(double(dropped[i]), 2.0 * double(std::clamp<int64_t>(under[i], 256, 131072)), 1.0) << i;
  // Scaled below the dataset's floor: 0.5 × 256 = 128 is kept (no floor unless the caller asks).
  BatchRequest half{2000, 0, 1, 1 << 30, 5};
  half.length_scale = 0.5;
  half.overlong = Overlong::drop;
  const auto h = make_global_batch(p, half).lengths;
  EXPECT_EQ(*std::min_element(h.begin(), h.end()), 128);
  // The raw draw is clipped to the dataset's range before scaling: nothing above 0.5 × 131072.
  EXPECT_EQ(*std::max_element(h.begin(), h.end()), 65536);
  // A range no scaled length can reach is an error, not a hang.
  BatchRequest none{1, 0, 1, 100, 5};
  none.overlong = Overlong::drop;
  EXPECT_THROW(make_global_batch(p, none), std::runtime_error);
}

TEST(MakeGlobalBatches, AreConsecutiveBatchesOfOneStream) {
  auto p = lognormal_profile();
  BatchRequest r{0, 131072, 256, 131072, 9};
  r.min_fill = 0.75;
  const auto batches = make_global_batches(p, r, 6);
  ASSERT_EQ(batches.size(), 6u);
  EXPECT_EQ(batches[0].lengths, make_global_batch(p, r).lengths);
  // Every batch is ≥ 75% full, and each is a later stretch of the stream than the one before.
  const auto stream = sample_lengths(p, 9, 20000, 256, 131072);
  auto from = stream.begin();
  for (const GlobalBatch& b : batches) {
    EXPECT_GE(b.total_tokens(), 0.75 * 131072);
    EXPECT_LE(b.total_tokens(), 131072);
    const auto at = std::search(from, stream.end(), b.lengths.begin(), b.lengths.end());
    ASSERT_NE(at, stream.end());
    from = at + static_cast<long>(b.lengths.size());
  }
  EXPECT_NE(batches[1].lengths, batches[0].lengths);
}

}  // namespace
}  // namespace cpbench
