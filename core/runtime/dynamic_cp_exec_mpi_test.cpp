// dynamic_cp_exec_mpi_test.cpp — Dynamic-CP rounds executed for real on MPI ranks (mpirun -np 4):
// a batch scheduled by schedule_dynamic_cp_main into groups of 4, 2 and 1 ranks runs every round
// forward and backward (causal and full) and matches the reference with exactly the planned bytes.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <set>

#include "baselines/cp_layouts.h"
#include "core/runtime/dynamic_cp_exec.h"
#include "core/runtime/mpi_communicator.h"
#include "core/runtime/mpi_session.h"
#include "core/strategies/dynamic_cp.h"

namespace cpbench {
namespace {

MpiCommunicator& world() {
  static MpiSession session;
  static auto comm = MpiCommunicator::world(std::chrono::seconds(120));
  return **comm;
}

// With max_seqlen_per_dp_cp_rank = 256: cp_min(1000) = 4, cp_min(300) = 2, the rest 1.
const std::vector<int64_t> kLengths{300, 37, 64, 129, 1000, 17, 250, 90};
constexpr int64_t kMaxSeqlen = 256;
constexpr int64_t kHeads = 4, kKvHeads = 2, kHeadDim = 16;  // GQA group 2; d = 16

DynCpSchedule schedule() {
  auto s = schedule_dynamic_cp_main(kLengths, world().size(), kMaxSeqlen);
  EXPECT_TRUE(s.ok()) << s.error_str();
  return s.ok() ? *s : DynCpSchedule{};
}

TEST(DynamicCpExec, ScheduleCoversEveryGroupSize) {
  ASSERT_EQ(world().size(), 4) << "run under mpirun -np 4";
  DynCpSchedule s = schedule();
  std::set<int64_t> sizes;
  std::vector<int> placed(kLengths.size(), 0);
  for (const auto& round : s.rounds) {
    EXPECT_EQ(check_dyncp_round(round, 4, static_cast<int64_t>(kLengths.size())), "");
    for (const auto& g : round.groups) {
      sizes.insert(g.size);
      for (int64_t id : g.seq_ids) ++placed[id];
    }
  }
  EXPECT_EQ(sizes, (std::set<int64_t>{1, 2, 4}));
  EXPECT_EQ(placed, std::vector<int>(kLengths.size(), 1)) << "every sequence runs in exactly one round";
}

// Plans the round's groups as `layout` (baselines' plan_dyncp_round) and executes it.
Expected<DynCpRoundReport> run_round(MpiCommunicator& w, const DynCpRound& round, const std::string& layout,
                                   const std::string& mask, bool backward, uint64_t seed) {
  auto plans = plan_dyncp_round(round, kLengths, w.size(), layout, mask, kHeads, kKvHeads, kHeadDim,
                              dyncp_pad_multiple(w.size(), 1));
  if (!plans) return plans.errors();
  return execute_dyncp_round(w, round, *plans, backward, seed);
}

class Masks : public ::testing::TestWithParam<std::string> {};

TEST_P(Masks, EveryRoundMatchesReferenceAndPlannedBytes) {
  MpiCommunicator& w = world();
  const int me = w.rank();
  DynCpSchedule s = schedule();
  ASSERT_FALSE(s.rounds.empty());
  for (size_t r = 0; r < s.rounds.size(); ++r) {
    const DynCpRound& round = s.rounds[r];
    auto rep = run_round(w, round, "zigzag", GetParam(), true, 7);
    ASSERT_TRUE(rep.ok()) << "round " << r << ": " << rep.error_str();
    int expected_group = -1;
    for (size_t i = 0; i < round.groups.size(); ++i)
      if (me >= round.groups[i].first_rank && me < round.groups[i].first_rank + round.groups[i].size)
        expected_group = static_cast<int>(i);
    ASSERT_EQ(rep->group, expected_group) << "round " << r;
    const std::string where = "round " + std::to_string(r) + " rank " + std::to_string(me) + " " + GetParam();
    if (!rep->idle()) {
      const DynCpGroup& g = round.groups[rep->group];
      EXPECT_EQ(rep->group_rank, me - g.first_rank) << where;
      EXPECT_EQ(rep->seq_ids, g.seq_ids) << where;
      ASSERT_EQ(rep->padded_lengths.size(), g.seq_ids.size()) << where;
      for (size_t i = 0; i < g.seq_ids.size(); ++i) {
        // Every sequence is padded as the simulator's plan pads it: to 2·pool = 8, no further.
        const int64_t L = kLengths[g.seq_ids[i]], unit = 8;
        EXPECT_EQ(rep->padded_lengths[i], (L + unit - 1) / unit * unit) << where;
      }
      EXPECT_LE(rep->check.worst, 1.0) << where << ": " << rep->check.where << " off by " << rep->check.max_abs_error;
      EXPECT_EQ(rep->reference_kind, "naive (double accumulation)") << where;
      EXPECT_EQ(rep->bytes_sent, rep->plan_bytes_sent) << where;
      EXPECT_EQ(rep->bytes_received, rep->plan_bytes_received) << where;
      // A group of one rank moves nothing; a real CP group moves KV forward and gradients back.
      if (g.size == 1) EXPECT_EQ(rep->plan_bytes_sent, 0) << where;
      if (g.size > 1) EXPECT_GT(rep->plan_bytes_sent, 0) << where;
    }
    std::vector<double> ok{rep->ok() ? 1.0 : 0.0};
    ASSERT_TRUE(w.all_reduce(std::span<double>(ok), ReduceOp::kSum).ok());
    EXPECT_EQ(ok[0], w.size()) << "round " << r << ": some rank's result or bytes differ";
  }
}

INSTANTIATE_TEST_SUITE_P(All, Masks, ::testing::Values("causal", "full"));

TEST(DynamicCpExec, RanksOutsideEveryGroupAreIdle) {
  // Groups [0, 2) and [2, 3); rank 3 has no work but still takes part in the split.
  MpiCommunicator& w = world();
  ASSERT_EQ(w.size(), 4);
  DynCpRound round;
  round.groups = {{0, 2, {0, 2}, 0}, {2, 1, {1}, 0}};
  auto rep = run_round(w, round, "zigzag", "causal", false, 3);
  ASSERT_TRUE(rep.ok()) << rep.error_str();
  EXPECT_EQ(rep->idle(), w.rank() == 3);
  EXPECT_TRUE(rep->ok());
  if (w.rank() < 2) {
    EXPECT_EQ(rep->padded_lengths, (std::vector<int64_t>{304, 64}));
    EXPECT_LE(rep->check.worst, 1.0) << rep->check.where;
    EXPECT_GT(rep->bytes_sent, 0);
    EXPECT_EQ(rep->bytes_sent, rep->plan_bytes_sent);
  }
  if (w.rank() == 2) EXPECT_EQ(rep->padded_lengths, (std::vector<int64_t>{40}));
  if (w.rank() == 3) EXPECT_EQ(rep->bytes_sent + rep->plan_bytes_sent, 0);
}

// An invalid round is refused identically on every rank before any communication: the world
// stays usable (the barrier below would time out, not pass, if some rank were stuck in split).
void expect_refused(const DynCpRound& round, const std::string& layout, const std::string& fragment) {
  MpiCommunicator& w = world();
  auto rep = run_round(w, round, layout, "causal", true, 7);
  ASSERT_FALSE(rep.ok()) << "rank " << w.rank() << " ran an invalid round";
  EXPECT_NE(rep.error_str().find(fragment), std::string::npos) << rep.error_str();
  EXPECT_TRUE(w.barrier().ok());
  EXPECT_TRUE(w.healthy());
}

TEST(DynamicCpExec, OverlappingGroupsAreAnError) {
  DynCpRound round;
  round.groups = {{0, 2, {0}, 0}, {1, 2, {1}, 0}};
  expect_refused(round, "zigzag", "group 1 (ranks [1, 3)) overlaps group 0 (ranks [0, 2)) at rank 1");
}

TEST(DynamicCpExec, GroupBeyondTheWorldIsAnError) {
  DynCpRound round;
  round.groups = {{0, 2, {0}, 0}, {2, 4, {1}, 0}};
  expect_refused(round, "zigzag", "group 1 (ranks [2, 6)) exceeds the world of 4 ranks");
}

TEST(DynamicCpExec, GroupTheLayoutRejectsIsAnErrorOnEveryRank) {
  // "single" runs on one rank only; the 2-rank group fails on the ranks outside it too.
  DynCpRound round;
  round.groups = {{0, 1, {1}, 0}, {2, 2, {0}, 0}};
  expect_refused(round, "single", "group 1 (ranks [2, 4))");
}

TEST(DynamicCpExec, CheckNamesSequenceProblems) {
  DynCpRound dup;
  dup.groups = {{0, 1, {3}, 0}, {1, 1, {3}, 0}};
  EXPECT_EQ(check_dyncp_round(dup, 4, 8), "sequence 3 is in group 0 (ranks [0, 1)) and group 1 (ranks [1, 2))");
  DynCpRound range;
  range.groups = {{0, 2, {8}, 0}};
  EXPECT_EQ(check_dyncp_round(range, 4, 8), "group 0 (ranks [0, 2)) names sequence 8 of a batch of 8");
  DynCpRound empty;
  empty.groups = {{0, 2, {}, 0}};
  EXPECT_EQ(check_dyncp_round(empty, 4, 8), "group 0 (ranks [0, 2)) has no sequences");
  DynCpRound zero;
  zero.groups = {{0, 0, {1}, 0}};
  EXPECT_EQ(check_dyncp_round(zero, 4, 8), "group 0 (ranks [0, 0)) has size 0; a group needs ≥ 1 rank");
}

TEST(DynamicCpExec, InputsDependOnSequenceNotGroup) {
  // Sequence 5 alone, and behind sequence 2 in another group: the same rows either way.
  AttentionPlan alone, pair;
  for (AttentionPlan* p : {&alone, &pair}) {
    p->heads_q = kHeads;
    p->heads_kv = kKvHeads;
    p->head_dim = kHeadDim;
  }
  alone.seq_lengths = {18};
  pair.seq_lengths = {64, 18};
  OwnedInputs a = dyncp_group_inputs(alone, {5}, 7), b = dyncp_group_inputs(pair, {2, 5}, 7);
  const size_t q_row = kHeads * kHeadDim, kv_row = kKvHeads * kHeadDim;
  ASSERT_EQ(b.q.size(), 82 * q_row);
  EXPECT_TRUE(std::equal(a.q.begin(), a.q.end(), b.q.begin() + 64 * q_row));
  EXPECT_TRUE(std::equal(a.k.begin(), a.k.end(), b.k.begin() + 64 * kv_row));
  EXPECT_TRUE(std::equal(a.v.begin(), a.v.end(), b.v.begin() + 64 * kv_row));
  EXPECT_TRUE(std::equal(a.dout.begin(), a.dout.end(), b.dout.begin() + 64 * q_row));
  // A different seed, or a different id, gives different data.
  EXPECT_NE(dyncp_group_inputs(alone, {5}, 8).q, a.q);
  EXPECT_NE(dyncp_group_inputs(alone, {4}, 7).q, a.q);
}

}  // namespace
}  // namespace cpbench
