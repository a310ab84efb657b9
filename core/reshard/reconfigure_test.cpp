// reconfigure_test.cpp — the reconfiguration time model: a change costs the restart plus the
// busiest node's network bytes at the store's rate; the bytes are those of the re-shard plan, by
// node; a central store carries one copy of the state in and every off-node target's state out,
// and is never faster than the parallel transformation on the same constants.
#include "core/reshard/reconfigure.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "core/evaluate/evaluate.h"
#include "core/experiment/registry.h"

namespace cpbench {
namespace {

ModelShape model(const std::string& name) { return *load_model(default_experiments_dir() / "models" / (name + ".json")); }

double state_bytes(const ModelShape& m, const std::vector<ModelTensor>& tensors, const StateLayout& L, int64_t rank) {
  double b = 0;
  for (const Piece& p : rank_state(m, tensors, L, rank)) b += static_cast<double>(p.rect.area()) * bytes_per_element(p.kind);
  return b;
}

// Bytes of the distinct pieces (tensor, kind, index range) that `ranks` hold under L: replicas
// (DP, and TP for the tensors TP replicates) counted once.
double distinct_bytes(const ModelShape& m, const std::vector<ModelTensor>& tensors, const StateLayout& L,
                      const std::vector<int64_t>& ranks) {
  std::set<std::tuple<int, int, int64_t, int64_t, int64_t, int64_t>> seen;
  double b = 0;
  for (int64_t r : ranks)
    for (const Piece& p : rank_state(m, tensors, L, r))
      if (seen.insert({p.tensor, static_cast<int>(p.kind), p.rect.r0, p.rect.r1, p.rect.c0, p.rect.c1}).second)
        b += static_cast<double>(p.rect.area()) * bytes_per_element(p.kind);
  return b;
}

ReshardRequest request(StateLayout from, StateLayout to, int64_t gpus_per_node) {
  ReshardRequest q;
  q.from = from;
  q.to = to;
  q.gpus_per_node = gpus_per_node;
  q.max_seq = 1024;
  return q;
}

const ReconfigurationCosts kCosts{true, 2.0, 3.0};  // 2 GB/s per node, 3 s restart

TEST(Reconfigure, TimeIsTheRestartPlusTheBusiestNodesBytesAtTheStoresRate) {
  // Tenplex's DP case: (4, 2, 1) on two 4-GPU nodes → (4, 2, 2) on four. Megatron's rank order
  // (TP, DP, PP) puts the new layout's stage 1 on nodes 2 and 3, and node 1 — which held all of
  // stage 1 — sends it to both; node 1 also receives stage 0's second replica. Node 1 is the
  // busiest: it sends stage 1's state twice. (Untied embeddings: with tied ones the last stage's
  // copy of the word embedding may come from node 0 instead.)
  const ModelShape m = model("llama2_7b");
  const ReshardRequest q = request({4, 2, 1}, {4, 2, 2}, 4);
  auto plan = plan_reconfiguration(m, q, StateStore::parallel);
  ASSERT_TRUE(plan) << plan.error_str();
  const auto tensors = model_tensors(m, 1024);
  ASSERT_FALSE(m.tied_embeddings);
  // Each node receives a range once (the TP ranks' copies of replicated norms are made inside it).
  const double stage0 = distinct_bytes(m, tensors, q.from, {0, 1, 2, 3});
  const double stage1 = distinct_bytes(m, tensors, q.from, {4, 5, 6, 7});
  double target = 0;
  for (int64_t r = 0; r < 16; ++r) target += state_bytes(m, tensors, q.to, r);
  const ReconfigurationCost c = price_reconfiguration(m, *plan, kCosts);
  EXPECT_EQ(c.critical_node, 1);
  EXPECT_DOUBLE_EQ(c.critical_bytes, 2 * stage1);
  // Network: stage 1 to nodes 2 and 3, stage 0's replica to node 1; the rest stays on its node.
  EXPECT_DOUBLE_EQ(c.network_bytes, 2 * stage1 + stage0);
  EXPECT_DOUBLE_EQ(c.local_bytes, target - c.network_bytes);
  EXPECT_DOUBLE_EQ(c.transfer_s, 2 * stage1 / 2e9);
  EXPECT_DOUBLE_EQ(c.restart_s, 3.0);
  EXPECT_DOUBLE_EQ(c.seconds, 3.0 + 2 * stage1 / 2e9);
  EXPECT_EQ(c.unrecoverable_bytes, 0);
}

TEST(Reconfigure, ACentralStoreCarriesOneCopyInAndEveryOffNodeTargetOut) {
  const ModelShape m = model("llama2_7b");
  const ReshardRequest q = request({4, 2, 1}, {4, 2, 2}, 4);
  auto plan = plan_reconfiguration(m, q, StateStore::central);
  ASSERT_TRUE(plan);
  const auto tensors = model_tensors(m, 1024);
  // Stage 1 lives on node 1 (its TP-replicated norms once); all of it goes up.
  double upload = distinct_bytes(m, tensors, q.from, {4, 5, 6, 7}), download = 0, stays = 0;
  for (int64_t r = 0; r < 16; ++r) (r < 4 ? stays : download) += state_bytes(m, tensors, q.to, r);
  const ReconfigurationCost c = price_reconfiguration(m, *plan, kCosts);
  EXPECT_EQ(c.critical_node, 0);
  EXPECT_DOUBLE_EQ(c.critical_bytes, upload + download);
  EXPECT_DOUBLE_EQ(c.network_bytes, upload + download);
  EXPECT_DOUBLE_EQ(c.local_bytes, stays);
  EXPECT_DOUBLE_EQ(c.seconds, 3.0 + (upload + download) / 2e9);
}

TEST(Reconfigure, TheCentralStoreUploadsOneCopyOfWhatItsNodeLacks) {
  // (4, 2, 2) on four 4-GPU nodes → (4, 2, 1): stage 0's replicas sit on nodes 0 and 1, stage 1's
  // on nodes 2 and 3. The store (node 0) already holds stage 0, so one copy of stage 1 goes up;
  // the new stage 1 (ranks 4-7, on node 1) gets its state back down.
  const ModelShape m = model("llama2_7b");
  const auto tensors = model_tensors(m, 1024);
  for (bool dist_opt : {false, true}) {
    const ReshardRequest q = request({4, 2, 2, dist_opt}, {4, 2, 1, dist_opt}, 4);
    auto plan = plan_reconfiguration(m, q, StateStore::central);
    ASSERT_TRUE(plan);
    // What node 0 lacks, once: stage 1, and with the distributed optimizer stage 0's second shard.
    std::vector<int64_t> all(16);
    for (int64_t r = 0; r < 16; ++r) all[r] = r;
    const double upload = distinct_bytes(m, tensors, q.from, all) - distinct_bytes(m, tensors, q.from, {0, 1, 2, 3});
    EXPECT_EQ(upload > distinct_bytes(m, tensors, q.from, {8, 9, 10, 11, 12, 13, 14, 15}), dist_opt);
    double download = 0;
    for (int64_t r = 4; r < 8; ++r) download += state_bytes(m, tensors, q.to, r);
    EXPECT_DOUBLE_EQ(price_reconfiguration(m, *plan, kCosts).critical_bytes, upload + download) << dist_opt;
  }
  // Losing node 0's GPUs but not its store's copy is a scale-in; losing the state of DP replica 0
  // of stage 1 (ranks 8-11) leaves replica 1 to upload it: the same bytes.
  ReshardRequest q = request({4, 2, 2}, {4, 2, 1}, 4);
  const double whole = price_reconfiguration(m, *plan_reconfiguration(m, q, StateStore::central), kCosts).critical_bytes;
  q.lost = {8, 9, 10, 11};
  EXPECT_DOUBLE_EQ(price_reconfiguration(m, *plan_reconfiguration(m, q, StateStore::central), kCosts).critical_bytes, whole);
}

TEST(Reconfigure, TheCentralStoreIsNeverFasterThanTheParallelTransformation) {
  // Every target element arrives once; each node's network bytes in either direction are bounded
  // by what the store node uploads plus what it sends out, so on the same constants the central
  // store is at least as slow — checked over TP, PP, DP, combined, scale-in and failure changes.
  struct Case {
    std::string model;
    StateLayout from, to;
    int64_t gpus_per_node;
    std::vector<int64_t> lost;
  };
  const std::vector<Case> cases = {
      {"gpt3_2.7b", {4, 2, 1}, {8, 2, 1}, 4, {}},     {"gpt3_2.7b", {4, 2, 1}, {4, 4, 1}, 4, {}},
      {"gpt3_2.7b", {4, 2, 2}, {4, 2, 1}, 4, {}},     {"gpt3_2.7b", {4, 2, 2}, {4, 1, 1}, 4, {}},
      {"gpt3_1.3b", {4, 1, 2}, {4, 1, 4}, 4, {}},     {"gpt3_1.3b", {2, 2, 4, true}, {4, 1, 2, true}, 8, {}},
      {"llama3_8b", {2, 2, 2, true}, {4, 2, 2}, 4, {}}, {"gpt3_1.3b", {4, 2, 2}, {4, 2, 1}, 4, {12, 13, 14, 15}},
      {"gpt3_2.7b", {4, 2, 2}, {4, 2, 1}, 8, {8, 9, 10, 11}},  // replica 0 of stage 1 lost: replica 1 uploads
  };
  for (const Case& k : cases) {
    const ModelShape m = model(k.model);
    ReshardRequest q = request(k.from, k.to, k.gpus_per_node);
    q.lost = k.lost;
    auto parallel = plan_reconfiguration(m, q, StateStore::parallel);
    auto central = plan_reconfiguration(m, q, StateStore::central);
    ASSERT_TRUE(parallel && central) << k.from.str() << " → " << k.to.str();
    const ReconfigurationCost p = price_reconfiguration(m, *parallel, kCosts);
    const ReconfigurationCost c = price_reconfiguration(m, *central, kCosts);
    EXPECT_GE(c.critical_bytes, p.critical_bytes) << k.model << " " << k.from.str() << " → " << k.to.str();
    EXPECT_GE(c.seconds, p.seconds);
    EXPECT_GT(p.critical_bytes, 0) << "every case here moves state across nodes";
  }
}

TEST(Reconfigure, AChangeThatKeepsItsStateOnItsNodesCostsTheRestartOnly) {
  // GPT-3 XL (4, 1, 4) on 16 GPUs → (4, 1, 2) on 8: both remaining replicas already sit on the
  // first two nodes.
  const ModelShape m = model("gpt3_1.3b");
  auto plan = plan_reconfiguration(m, request({4, 1, 4}, {4, 1, 2}, 4), StateStore::parallel);
  ASSERT_TRUE(plan);
  const ReconfigurationCost c = price_reconfiguration(m, *plan, kCosts);
  EXPECT_EQ(c.network_bytes, 0);
  EXPECT_GT(c.local_bytes, 0);
  EXPECT_DOUBLE_EQ(c.seconds, kCosts.restart_s);
}

TEST(Reconfigure, LostStateWithoutAReplicaIsReportedNotPriced) {
  // The distributed optimizer shards Adam state over DP: a lost rank's shard has no copy.
  const ModelShape m = model("gpt3_1.3b");
  ReshardRequest q = request({4, 2, 2, true}, {4, 2, 1}, 4);
  q.lost = {12};
  auto plan = plan_reconfiguration(m, q, StateStore::parallel);
  ASSERT_TRUE(plan);
  EXPECT_GT(price_reconfiguration(m, *plan, kCosts).unrecoverable_bytes, 0);
  ClusterSpec cluster;
  cluster.gpus_per_node = 4;
  cluster.reconfiguration = kCosts;
  const Evaluation e = evaluate_reconfiguration(cluster, m, *plan, "sim");
  EXPECT_EQ(e.status, "infeasible");
  EXPECT_NE(e.reason.find("needs a checkpoint"), std::string::npos) << e.reason;
  EXPECT_TRUE(e.metrics.empty());
  // With the replica of the lost rank's weights and no distributed optimizer: priced.
  q.from.distributed_optimizer = q.to.distributed_optimizer = false;
  const Evaluation ok = evaluate_reconfiguration(cluster, m, *plan_reconfiguration(m, q, StateStore::parallel), "sim");
  EXPECT_EQ(ok.status, "ok") << ok.reason;
  EXPECT_GT(ok.metrics.at("reconfigure_time_s"), kCosts.restart_s);
  // Through the backend table: the cpu backend has no re-shard inside a run and says where one
  // runs; an unknown backend is an error listing the known ones.
  const Evaluation cpu = evaluate_reconfiguration(cluster, m, *plan_reconfiguration(m, q, StateStore::parallel), "cpu");
  EXPECT_EQ(cpu.status, "infeasible");
  EXPECT_NE(cpu.reason.find("cpbench reshard"), std::string::npos) << cpu.reason;
  const Evaluation unknown = evaluate_reconfiguration(cluster, m, *plan, "gpu?");
  EXPECT_EQ(unknown.status, "error");
  EXPECT_NE(unknown.reason.find("unknown backend 'gpu?'"), std::string::npos) << unknown.reason;
}

TEST(Reconfigure, StrategiesAreRegisteredByName) {
  ASSERT_NE(find_reconfiguration_strategy("tenplex"), nullptr);
  EXPECT_EQ(find_reconfiguration_strategy("tenplex")->store, StateStore::parallel);
  EXPECT_EQ(find_reconfiguration_strategy("central_store")->store, StateStore::central);
  EXPECT_EQ(find_reconfiguration_strategy("ptdp"), nullptr);
}

}  // namespace
}  // namespace cpbench
