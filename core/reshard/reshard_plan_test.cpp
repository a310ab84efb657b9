// reshard_plan_test.cpp — Tenplex's re-shard planner: for TP, PP, DP, combined and GPU-count
// changes (with and without the distributed optimizer) every target element has exactly one
// source (check_reshard_plan), the bytes are what the change must move, staging respects its cap,
// and a lost rank is recovered from its data-parallel replica when one exists.
#include "core/reshard/reshard_plan.h"

#include <gtest/gtest.h>

#include "core/experiment/registry.h"

namespace cpbench {
namespace {

ModelShape model(const std::string& name) { return *load_model(default_experiments_dir() / "models" / (name + ".json")); }

double total(const GpuStateBytes& b, LinkClass c, bool received) {
  double s = 0;
  for (const auto& r : received ? b.received : b.sent) s += r[static_cast<int>(c)];
  return s;
}

TEST(StateLayout, RanksHoldTheirSlicesAndTheFlatOptimizerShardsCrossTensors) {
  const ModelShape m = model("llama3_8b");  // GQA, gated MLP, untied output, vocabulary 128,256
  const auto tensors = model_tensors(m, 2048);
  for (bool dist_opt : {false, true}) {
    const StateLayout L{2, 2, 2, dist_opt};
    // Weights: every element once per DP replica (the vocabulary's padding holds nothing).
    std::vector<double> weights(tensors.size(), 0), optimizer(tensors.size(), 0);
    for (int64_t r = 0; r < L.ranks(); ++r)
      for (const Piece& p : rank_state(m, tensors, L, r))
        (p.kind == StateKind::weights ? weights : optimizer)[p.tensor] += static_cast<double>(p.rect.area());
    for (size_t i = 0; i < tensors.size(); ++i) {
      // Every element once per DP replica, and once per TP rank for the tensors TP replicates
      // (norms, position table); the word embedding twice with tied weights (first, last stage).
      const double copies = (tensors[i].split == TpSplit::replicated ? L.tp : 1) *
                            (tensors[i].first_stage && tensors[i].last_stage ? 2 : 1);
      const double n = static_cast<double>(tensors[i].rows) * tensors[i].cols * copies;
      EXPECT_EQ(weights[i], L.dp * n) << tensors[i].name;
      EXPECT_EQ(optimizer[i], dist_opt ? n : L.dp * n) << tensors[i].name;  // sharded over DP, or replicated
    }
  }
  EXPECT_EQ(padded_vocab(128256, 8), 129024);
  EXPECT_EQ(padded_vocab(50257, 1), 50304);
}

TEST(ReshardPlan, EveryChangeGivesEachTargetElementExactlyOneSource) {
  struct Case {
    std::string model;
    StateLayout from, to;
  };
  const std::vector<Case> cases = {
      {"gpt_1.7b", {4, 2, 1}, {4, 2, 2}},             // DP (Tenplex's case, scale-out)
      {"gpt_1.7b", {4, 2, 1}, {8, 2, 1}},             // TP
      {"gpt_1.7b", {4, 2, 1}, {4, 4, 1}},             // PP
      {"gpt_1.7b", {2, 2, 4}, {4, 1, 2}},             // all three, 16 → 8 GPUs (scale-in)
      {"llama3_8b", {2, 2, 2, true}, {4, 2, 2, true}},  // distributed optimizer, GQA, gated MLP, untied
      {"llama3_8b", {1, 1, 8, true}, {8, 1, 1}},      // the optimizer's DP shards into TP slices
      {"llama2_7b", {4, 4, 1}, {2, 4, 2, true}},
  };
  for (const Case& c : cases) {
    const ModelShape m = model(c.model);
    const ReshardRequest q{c.from, c.to};
    auto plan = plan_reshard(m, q);
    ASSERT_TRUE(plan.ok()) << plan.error_str();
    EXPECT_EQ(check_reshard_plan(m, q, *plan), "") << c.model << " " << c.from.str() << " → " << c.to.str();
    EXPECT_TRUE(plan->unrecoverable.empty());
    // What arrives equals what the target layout holds, in bytes.
    double want = 0;
    for (int64_t r = 0; r < c.to.ranks(); ++r)
      for (const Piece& p : rank_state(m, plan->tensors, c.to, r)) want += static_cast<double>(p.rect.area()) * bytes_per_element(p.kind);
    const GpuStateBytes b = rank_bytes(*plan, q);
    EXPECT_DOUBLE_EQ(total(b, LinkClass::local, true) + total(b, LinkClass::nvlink, true) + total(b, LinkClass::network, true), want);
  }
}

// Bytes `ranks` of `layout` hold.
double held(const ModelShape& m, const std::vector<ModelTensor>& tensors, const StateLayout& L, int64_t first, int64_t last) {
  double b = 0;
  for (int64_t r = first; r < last; ++r)
    for (const Piece& p : rank_state(m, tensors, L, r)) b += static_cast<double>(p.rect.area()) * bytes_per_element(p.kind);
  return b;
}

TEST(ReshardPlan, TheCheckerCatchesAMissingADuplicateAndAWrongSource) {
  const ModelShape m = model("tiny_llama");
  const ReshardRequest q{{2, 2, 1}, {4, 1, 1}};
  auto plan = plan_reshard(m, q);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(check_reshard_plan(m, q, *plan), "");
  ReshardPlan missing = *plan;
  missing.transfers.pop_back();
  EXPECT_NE(check_reshard_plan(m, q, missing).find("elements"), std::string::npos) << check_reshard_plan(m, q, missing);
  ReshardPlan twice = *plan;
  twice.transfers.push_back(twice.transfers.back());
  EXPECT_NE(check_reshard_plan(m, q, twice).find("twice"), std::string::npos) << check_reshard_plan(m, q, twice);
  ReshardPlan wrong = *plan;
  for (Transfer& t : wrong.transfers)
    if (plan->tensors[t.piece.tensor].name == "layer7.fc2.weight") t.src = 0;  // stage 1's layer, from stage 0
  EXPECT_NE(check_reshard_plan(m, q, wrong).find("does not hold what it sends"), std::string::npos)
      << check_reshard_plan(m, q, wrong);
}

TEST(ReshardPlan, BytesAreWhatTheChangeMustMove) {
  const ModelShape m = model("gpt_1.7b");
  const auto tensors = model_tensors(m, 2048);
  // Nothing changes: everything stays in place.
  ReshardRequest same{{4, 2, 1}, {4, 2, 1}};
  auto plan = plan_reshard(m, same);
  ASSERT_TRUE(plan.ok());
  GpuStateBytes b = rank_bytes(*plan, same);
  EXPECT_DOUBLE_EQ(total(b, LinkClass::local, true), held(m, tensors, same.from, 0, 8));
  EXPECT_EQ(total(b, LinkClass::nvlink, true) + total(b, LinkClass::network, true), 0);
  // DP 1 → 2 onto a second node (Tenplex's DP case): the new node's GPUs hold nothing and no GPU
  // of theirs can send, so exactly what they hold under the target crosses the network, once.
  ReshardRequest dp{{4, 2, 1}, {4, 2, 2}};
  plan = plan_reshard(m, dp);
  ASSERT_TRUE(plan.ok());
  b = rank_bytes(*plan, dp);
  EXPECT_DOUBLE_EQ(total(b, LinkClass::network, true), held(m, tensors, dp.to, 8, 16));
  for (int64_t r = 0; r < 8; ++r) EXPECT_EQ(b.received[r][static_cast<int>(LinkClass::network)], 0) << r;
  // PP 2 → 4 inside one node: nothing crosses the network; the first stage keeps its first half.
  ReshardRequest pp{{2, 2, 1}, {2, 4, 1}};
  plan = plan_reshard(m, pp);
  ASSERT_TRUE(plan.ok());
  b = rank_bytes(*plan, pp);
  EXPECT_EQ(total(b, LinkClass::network, true), 0);
  EXPECT_DOUBLE_EQ(total(b, LinkClass::local, true) + total(b, LinkClass::nvlink, true), held(m, tensors, pp.to, 0, 8));
  EXPECT_DOUBLE_EQ(b.received[0][static_cast<int>(LinkClass::local)], held(m, tensors, pp.to, 0, 1));
}

TEST(ReshardPlan, StagesKeepEachReceiverWithinTheCap) {
  const ModelShape m = model("gpt_1.7b");
  ReshardRequest q{{4, 2, 1}, {2, 2, 4}};
  q.staging_bytes = 64e6;
  auto plan = plan_reshard(m, q);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(check_reshard_plan(m, q, *plan), "");
  EXPECT_GT(plan->stages(), 10u);
  for (size_t k = 0; k < plan->stages(); ++k) {
    std::map<int64_t, double> got;
    for (size_t i = plan->stage_begin[k]; i < plan->stage_begin[k + 1]; ++i)
      if (plan->transfers[i].src != plan->transfers[i].dst) got[plan->transfers[i].dst] += plan->transfers[i].bytes();
    for (const auto& [dst, bytes] : got) EXPECT_LE(bytes, q.staging_bytes) << "stage " << k << " rank " << dst;
  }
}

TEST(ReshardPlan, ALostRankIsRecoveredFromItsReplicaOrNeedsACheckpoint) {
  const ModelShape m = model("gpt_1.7b");
  // Tenplex's failure case: TP4 PP2 DP2 on 16 GPUs loses 4 GPUs (one DP replica's first stage).
  ReshardRequest q{{4, 2, 2}, {4, 2, 1}};
  q.lost = {4, 5, 6, 7};
  auto plan = plan_reshard(m, q);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(check_reshard_plan(m, q, *plan), "");
  EXPECT_TRUE(plan->unrecoverable.empty());
  // The 8 surviving GPUs run the new layout: target rank r on GPU r, or r + 4 past the lost ones.
  for (const Transfer& t : plan->transfers) {
    EXPECT_TRUE(t.src < 4 || t.src > 7);
    EXPECT_EQ(t.dst_gpu, t.dst < 4 ? t.dst : t.dst + 4);
  }
  // With the distributed optimizer the lost ranks' optimizer shards have no replica.
  q.from.distributed_optimizer = true;
  plan = plan_reshard(m, q);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(check_reshard_plan(m, q, *plan), "");
  ASSERT_FALSE(plan->unrecoverable.empty());
  for (const Transfer& u : plan->unrecoverable) EXPECT_EQ(u.piece.kind, StateKind::optimizer);
  // Bad input is an error naming it.
  q.lost = {16};
  EXPECT_FALSE(plan_reshard(m, q).ok());
  q.lost = {};
  q.to = {5, 1, 1};
  auto bad = plan_reshard(m, q);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error_str().find("(t5, p1, d1)"), std::string::npos) << bad.error_str();
}

}  // namespace
}  // namespace cpbench
