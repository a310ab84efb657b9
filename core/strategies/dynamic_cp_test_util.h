// dynamic_cp_test_util.h — what the Dynamic-CP planner tests share (main, dev, solver): the seeded
// dynamic_cp_github batches they plan, and the schedule properties issue 5 asks of every planner.
// Requires: GoogleTest (included by the tests only). Note: planner-specific checks (work formula,
// caps, idle ranks) stay in each test; this header checks what all planners promise.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/plan/dynamic_cp_schedule.h"
#include "core/strategies/dynamic_cp.h"
#include "core/workload/length_profile.h"
#include "core/workload/sampling.h"

namespace cpbench::testing_util {

// n sequences of the dynamic_cp_github profile (256–131072 tokens) drawn with `seed`.
inline std::vector<int64_t> github_batch(uint64_t seed, size_t n) {
  auto profile = load_length_profile(CPBENCH_SOURCE_DIR "/experiments/datasets/dynamic_cp_github.json");
  EXPECT_TRUE(profile.ok()) << (profile.ok() ? "" : profile.error_str());
  return sample_lengths(*profile, seed, n, 256, 131072);
}

inline bool is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

// Every sequence in exactly one group of one round; groups aligned power-of-two slices inside
// [0, ranks) that do not overlap within a round (`full_group_allowed`: a group of all `ranks`
// may stand alone when ranks is not a power of two, as Megatron dev falls back to); every group
// has sequences, each with size ≥ its cp_min; with `packed` (a group's sequences run as one
// micro-batch: dev, the solver) per-rank tokens Σ L / size ≤ max_seqlen. Calls
// `per_group(round, group)` for the caller's own checks. Returns the ranks used per round.
template <typename PerGroup>
std::vector<int64_t> expect_valid_schedule(const DynamicCpSchedule& s, const std::vector<int64_t>& lengths, int64_t ranks,
                                           int64_t max_seqlen, bool full_group_allowed, bool packed, PerGroup per_group) {
  std::vector<int> seen(lengths.size(), 0);
  std::vector<int64_t> used(s.rounds.size(), 0);
  for (size_t r = 0; r < s.rounds.size(); ++r) {
    std::vector<int> owner(static_cast<size_t>(ranks), 0);
    for (const DynamicCpGroup& g : s.rounds[r].groups) {
      SCOPED_TRACE("round " + std::to_string(r) + " group at " + std::to_string(g.first_rank));
      if (!is_pow2(g.size)) {
        EXPECT_TRUE(full_group_allowed && g.size == ranks && s.rounds[r].groups.size() == 1u) << "size " << g.size;
      }
      EXPECT_EQ(g.first_rank % g.size, 0);
      if (g.first_rank < 0 || g.first_rank + g.size > ranks) {
        ADD_FAILURE() << "group outside ranks [0, " << ranks << ")";
        continue;
      }
      for (int64_t k = g.first_rank; k < g.first_rank + g.size; ++k) EXPECT_EQ(owner[k]++, 0) << "rank " << k;
      used[r] += g.size;
      EXPECT_FALSE(g.seq_ids.empty());
      int64_t tokens = 0;
      for (int64_t id : g.seq_ids) {
        ++seen[static_cast<size_t>(id)];
        const int64_t L = lengths[static_cast<size_t>(id)];
        tokens += L;
        EXPECT_GE(g.size, dynamic_cp_min_cp_size(L, max_seqlen));
      }
      if (packed) EXPECT_LE(tokens, max_seqlen * g.size);  // per-rank tokens Σ L / size ≤ max
      per_group(r, g);
    }
  }
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "sequence " << i;
  return used;
}

// Σ L² / size of a group: the work measure of Megatron's main and dev schedulers.
inline double sum_sq_per_rank(const DynamicCpGroup& g, const std::vector<int64_t>& lengths) {
  double sum_sq = 0;
  for (int64_t id : g.seq_ids) {
    const double L = static_cast<double>(lengths[static_cast<size_t>(id)]);
    sum_sq += L * L;
  }
  return sum_sq / static_cast<double>(g.size);
}

// The settings the property tests sweep: seeds 1–3 of a 2048-sequence batch × DP×CP pools of
// powers of two and not × max_seqlen_per_dp_cp_rank 64K and 16K (skipping pools too small for a
// 131072-token sequence). f(lengths, ranks, max_seqlen) runs inside a SCOPED_TRACE naming them.
template <typename F>
void for_each_sampled_setting(F f) {
  for (uint64_t seed : {1, 2, 3}) {
    const std::vector<int64_t> lengths = github_batch(seed, 2048);
    for (int64_t ranks : {4, 8, 64, 512, 6, 12, 24})
      for (int64_t max_seqlen : {65536, 16384}) {
        if (dynamic_cp_min_cp_size(131072, max_seqlen) > ranks) continue;
        SCOPED_TRACE("seed " + std::to_string(seed) + " ranks " + std::to_string(ranks) + " max " +
                     std::to_string(max_seqlen));
        f(lengths, ranks, max_seqlen);
      }
  }
}

// Two schedules place every sequence in the same group of the same round.
inline void expect_same_schedule(const DynamicCpSchedule& x, const DynamicCpSchedule& y) {
  ASSERT_EQ(x.rounds.size(), y.rounds.size());
  for (size_t r = 0; r < x.rounds.size(); ++r) {
    ASSERT_EQ(x.rounds[r].groups.size(), y.rounds[r].groups.size());
    for (size_t g = 0; g < x.rounds[r].groups.size(); ++g) {
      EXPECT_EQ(x.rounds[r].groups[g].first_rank, y.rounds[r].groups[g].first_rank);
      EXPECT_EQ(x.rounds[r].groups[g].size, y.rounds[r].groups[g].size);
      EXPECT_EQ(x.rounds[r].groups[g].seq_ids, y.rounds[r].groups[g].seq_ids);
    }
  }
}

}  // namespace cpbench::testing_util
