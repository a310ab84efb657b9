// packing_test.cpp — exact small cases of each packer, errors, and properties on seeded batches of
// the dynamic_cp_github profile (every sequence once, capacity, multiple of dp, FFD ≤ next-fit,
// FLOPs-balanced max cost ≤ dp_balanced's).
#include "core/strategies/packing.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "core/workload/length_profile.h"
#include "core/workload/sampling.h"

namespace cpbench {
namespace {

std::vector<int64_t> github_batch(uint64_t seed, size_t n) {
  auto profile = load_length_profile(CPBENCH_SOURCE_DIR "/experiments/datasets/dynamic_cp_github.json");
  EXPECT_TRUE(profile.ok()) << (profile.ok() ? "" : profile.error_str());
  return sample_lengths(*profile, seed, n, 256, 131072);
}

size_t non_empty(const std::vector<Pack>& packs) {
  return static_cast<size_t>(std::count_if(packs.begin(), packs.end(), [](const Pack& p) { return !p.seq_ids.empty(); }));
}

void expect_valid(const std::vector<Pack>& packs, const std::vector<int64_t>& lengths, int64_t capacity, int64_t dp) {
  EXPECT_EQ(packs.size() % static_cast<size_t>(dp), 0u);
  std::vector<int> seen(lengths.size(), 0);
  for (const Pack& p : packs) {
    int64_t tokens = 0;
    double sum_sq = 0;
    for (int64_t id : p.seq_ids) {
      ++seen[static_cast<size_t>(id)];
      tokens += lengths[static_cast<size_t>(id)];
      sum_sq += static_cast<double>(lengths[static_cast<size_t>(id)]) * static_cast<double>(lengths[static_cast<size_t>(id)]);
    }
    EXPECT_EQ(p.tokens, tokens);
    EXPECT_DOUBLE_EQ(p.sum_sq, sum_sq);
    EXPECT_LE(p.tokens, capacity);
  }
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "sequence " << i;
}

TEST(Packing, DpBalancedIsNextFitInOrderRoundedToDp) {
  const std::vector<int64_t> lengths = {5, 3, 4, 2, 6};
  auto packs = pack_dp_balanced(lengths, 8, 2);
  ASSERT_TRUE(packs.ok());
  ASSERT_EQ(packs->size(), 4u);  // 3 packs, rounded up to a multiple of dp = 2
  EXPECT_EQ((*packs)[0].seq_ids, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ((*packs)[1].seq_ids, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ((*packs)[2].seq_ids, (std::vector<int64_t>{4}));
  EXPECT_TRUE((*packs)[3].seq_ids.empty());
  EXPECT_EQ((*packs)[1].tokens, 6);
  EXPECT_DOUBLE_EQ((*packs)[1].sum_sq, 20.0);
}

TEST(Packing, FirstFitDecreasingFillsTheFirstPackWithRoom) {
  auto packs = pack_first_fit_decreasing({5, 3, 4, 2, 6}, 8, 2);
  ASSERT_TRUE(packs.ok());
  ASSERT_EQ(packs->size(), 4u);
  EXPECT_EQ((*packs)[0].seq_ids, (std::vector<int64_t>{4, 3}));  // 6 + 2
  EXPECT_EQ((*packs)[1].seq_ids, (std::vector<int64_t>{0, 1}));  // 5 + 3
  EXPECT_EQ((*packs)[2].seq_ids, (std::vector<int64_t>{2}));
  EXPECT_TRUE((*packs)[3].seq_ids.empty());
}

TEST(Packing, FlopsBalancedIsLongestProcessingTimeUnderCapacity) {
  // cost = L²: 16, 9, 9, 4, 4, 4; ⌈16 / 6⌉ = 3 packs, rounded to 4 for dp = 2.
  auto packs = pack_flops_balanced({4, 3, 3, 2, 2, 2}, 6, 2, 0.0, 1.0);
  ASSERT_TRUE(packs.ok());
  ASSERT_EQ(packs->size(), 4u);
  EXPECT_EQ((*packs)[0].seq_ids, (std::vector<int64_t>{0}));
  EXPECT_EQ((*packs)[1].seq_ids, (std::vector<int64_t>{1}));
  EXPECT_EQ((*packs)[2].seq_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ((*packs)[3].seq_ids, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_DOUBLE_EQ(pack_cost((*packs)[3], 0.0, 1.0), 12.0);
  EXPECT_DOUBLE_EQ(pack_cost((*packs)[0], 2.0, 1.0), 16.0 + 8.0);
}

TEST(Packing, FlopsBalancedAddsDpPacksUntilEverySequenceFits) {
  // Token bound ⌈12 / 4⌉ = 3, but no two sequences share a pack of 4 tokens.
  auto packs = pack_flops_balanced({3, 3, 3, 3}, 4, 1, 1.0, 0.0);
  ASSERT_TRUE(packs.ok());
  ASSERT_EQ(packs->size(), 4u);
  for (const Pack& p : *packs) EXPECT_EQ(p.seq_ids.size(), 1u);
}

TEST(Packing, SequenceLongerThanCapacityIsAnErrorNamingIt) {
  for (auto packs : {pack_dp_balanced({10, 20}, 15, 1), pack_first_fit_decreasing({10, 20}, 15, 1),
                     pack_flops_balanced({10, 20}, 15, 1, 1.0, 1.0)}) {
    ASSERT_FALSE(packs.ok());
    EXPECT_NE(packs.error_str().find("sequence 1 has 20 tokens"), std::string::npos) << packs.error_str();
    EXPECT_NE(packs.error_str().find("capacity of 15"), std::string::npos) << packs.error_str();
  }
  EXPECT_FALSE(pack_dp_balanced({10}, 15, 0).ok());
  EXPECT_FALSE(pack_first_fit_decreasing({0}, 15, 1).ok());
}

TEST(Packing, SampledBatchesRespectCapacityDpAndFfdNeverUsesMorePacksThanNextFit) {
  const int64_t max_seqlen_per_dp_cp_rank = 65536;
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    const std::vector<int64_t> lengths = github_batch(seed, 2048);
    for (int64_t cp : {2, 4, 8}) {
      for (int64_t dp : {1, 4, 8}) {
        const int64_t capacity = max_seqlen_per_dp_cp_rank * cp;
        auto nf = pack_dp_balanced(lengths, capacity, dp);
        auto ffd = pack_first_fit_decreasing(lengths, capacity, dp);
        auto flops = pack_flops_balanced(lengths, capacity, dp, 1.0, 1e-3);
        ASSERT_TRUE(nf.ok() && ffd.ok() && flops.ok());
        expect_valid(*nf, lengths, capacity, dp);
        expect_valid(*ffd, lengths, capacity, dp);
        expect_valid(*flops, lengths, capacity, dp);
        EXPECT_LE(non_empty(*ffd), non_empty(*nf)) << "seed " << seed << " cp " << cp;
        EXPECT_LE(ffd->size(), nf->size());
      }
    }
  }
}

TEST(Packing, FlopsBalancedMaxCostIsAtMostDpBalancedsOnASkewedBatch) {
  // Attention-dominated cost: per token a linear term of 1 and a quadratic term of 1/4096 (so a
  // 4K-token sequence spends as much in attention as in linear layers).
  const double a = 1.0, b = 1.0 / 4096;
  for (uint64_t seed : {1, 2, 3}) {
    const std::vector<int64_t> lengths = github_batch(seed, 2048);
    for (int64_t cp : {2, 4}) {
      const int64_t capacity = 65536 * cp;
      auto nf = pack_dp_balanced(lengths, capacity, 8);
      auto flops = pack_flops_balanced(lengths, capacity, 8, a, b);
      ASSERT_TRUE(nf.ok() && flops.ok());
      auto max_cost = [&](const std::vector<Pack>& packs) {
        double m = 0;
        for (const Pack& p : packs) m = std::max(m, pack_cost(p, a, b));
        return m;
      };
      EXPECT_LE(max_cost(*flops), max_cost(*nf)) << "seed " << seed << " cp " << cp;
    }
  }
}

TEST(Packing, SameInputSamePacks) {
  const std::vector<int64_t> lengths = github_batch(7, 512);
  auto x = pack_flops_balanced(lengths, 131072, 4, 1.0, 1e-4);
  auto y = pack_flops_balanced(lengths, 131072, 4, 1.0, 1e-4);
  ASSERT_TRUE(x.ok() && y.ok());
  ASSERT_EQ(x->size(), y->size());
  for (size_t i = 0; i < x->size(); ++i) EXPECT_EQ((*x)[i].seq_ids, (*y)[i].seq_ids);
}

}  // namespace
}  // namespace cpbench
