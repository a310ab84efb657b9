// reshard_mpi_test.cpp — Tenplex's re-shard executed on 4 MPI ranks (and 2, on a sub-communicator)
// with real tensors: for TP, PP, DP and combined changes, scale-out, scale-in and a lost rank
// recovered from its replica, the state assembled on every rank equals the state built directly
// under the target layout bit for bit, and every rank moves exactly the bytes of the plan.
// (8 ranks: the CTest reshard_cli_8_ranks runs `cpbench reshard` under mpirun -np 8.)
#include "core/reshard/reshard_exec.h"

#include <gtest/gtest.h>

#include "core/experiment/registry.h"
#include "core/runtime/mpi_communicator.h"
#include "core/runtime/mpi_test_environment.h"

namespace cpbench {
namespace {

ModelShape model(const std::string& name) { return *load_model(default_experiments_dir() / "models" / (name + ".json")); }

// Runs one re-shard on `comm` and checks it on every rank; the verdicts are agreed over the ranks.
void run_case(Communicator& comm, const std::string& model_name, ReshardRequest q) {
  SCOPED_TRACE(model_name + " " + q.from.str() + " → " + q.to.str());
  const ModelShape m = model(model_name);
  q.staging_bytes = 256 * 1024;  // several stages
  auto plan = plan_reshard(m, q);
  ASSERT_TRUE(plan.ok()) << plan.error_str();
  ASSERT_EQ(check_reshard_plan(m, q, *plan), "");
  ASSERT_GT(plan->stages(), 1u);
  auto run = execute_reshard(comm, m, q, *plan);
  ASSERT_TRUE(run.ok()) << run.error_str();
  EXPECT_TRUE(run->state_matches) << run->mismatch;
  // The bytes the Communicator counted are the plan's, for this rank.
  const GpuStateBytes b = rank_bytes(*plan, q);
  const auto me = static_cast<size_t>(comm.rank());  // = the GPU
  EXPECT_EQ(run->bytes_sent, run->plan_bytes_sent);
  EXPECT_EQ(run->bytes_received, run->plan_bytes_received);
  EXPECT_DOUBLE_EQ(static_cast<double>(run->plan_bytes_sent), b.sent[me][1] + b.sent[me][2]);
  EXPECT_DOUBLE_EQ(static_cast<double>(run->plan_bytes_received), b.received[me][1] + b.received[me][2]);
  EXPECT_DOUBLE_EQ(static_cast<double>(run->bytes_copied), b.received[me][0]);
  std::vector<double> failed{run->state_matches ? 0.0 : 1.0};  // summed over the world's ranks
  ASSERT_TRUE(MpiEnvironment::world().all_reduce(std::span<double>(failed)));
  EXPECT_EQ(failed[0], 0);
}

[[maybe_unused]] auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new MpiEnvironment(std::chrono::seconds(60)));

class ReshardMpi : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(world_->size(), 4) << "run under mpirun -np 4"; }
  void TearDown() override { ASSERT_TRUE(world_->barrier()); }
  MpiCommunicator* world_ = &MpiEnvironment::world();
};

TEST_F(ReshardMpi, TpPpDpAndCombinedChangesOnFourRanks) {
  ReshardRequest q;
  q.gpus_per_node = 2;  // two "nodes" of two ranks: all three link classes
  for (auto [from, to] : std::vector<std::pair<StateLayout, StateLayout>>{
           {{2, 2, 1}, {4, 1, 1}},              // TP 2 → 4 (the vocabulary's padding changes)
           {{2, 2, 1}, {1, 4, 1}},              // PP 2 → 4
           {{2, 1, 2}, {1, 2, 2}},              // TP and PP, DP kept
           {{1, 1, 4, true}, {2, 2, 1, true}},  // the optimizer's DP shards into TP × PP slices
           {{4, 1, 1}, {1, 1, 4, true}}}) {     // and back into DP shards
    q.from = from;
    q.to = to;
    run_case(*world_, "tiny_gpt", q);
    run_case(*world_, "tiny_llama", q);
  }
}

TEST_F(ReshardMpi, ScaleOutScaleInAndALostRank) {
  ReshardRequest q;
  q.gpus_per_node = 2;
  q.from = {1, 2, 1};  // 2 GPUs → 4: DP 1 → 2
  q.to = {1, 2, 2};
  run_case(*world_, "tiny_gpt", q);
  q.from = {2, 1, 2, true};  // 4 GPUs → 2
  q.to = {1, 2, 1};
  run_case(*world_, "tiny_llama", q);
  q.from = {2, 1, 2};  // GPU 1 fails: its slices come from its DP replica (rank 3); GPUs 0, 2 and 3 run (t1, p1, d2) and (t1, p3, d1)
  q.to = {1, 1, 2};
  q.lost = {1};
  run_case(*world_, "tiny_gpt", q);
  q.to = {1, 2, 1};
  q.to_gpus = {3, 2};  // placed by hand, on the other node first
  run_case(*world_, "tiny_llama", q);
  q.to_gpus = {};
  // With the distributed optimizer the lost shard has no replica: an error says a checkpoint is needed.
  q.from.distributed_optimizer = true;
  const ModelShape m = model("tiny_gpt");
  auto plan = plan_reshard(m, q);
  ASSERT_TRUE(plan.ok());
  auto run = execute_reshard(*world_, m, q, *plan);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.error_str().find("needs a checkpoint"), std::string::npos) << run.error_str();
}

TEST_F(ReshardMpi, APlanThatDoesNotFitTheLayoutsIsAnErrorOnEveryRank) {
  // A transfer whose sender does not hold the slice: every rank returns the error (none waits in
  // a collective for the rank that found it).
  const ModelShape m = model("tiny_gpt");
  ReshardRequest q;
  q.from = {2, 2, 1};
  q.to = {4, 1, 1};
  auto plan = plan_reshard(m, q);
  ASSERT_TRUE(plan.ok());
  for (Transfer& t : plan->transfers)
    if (plan->tensors[t.piece.tensor].name == "layer7.fc2.weight") t.src = 0;  // stage 1's layer, from stage 0
  auto run = execute_reshard(*world_, m, q, *plan);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.error_str().find("not a plan of this change"), std::string::npos) << run.error_str();
}

TEST_F(ReshardMpi, TwoRanksOnASubCommunicator) {
  auto sub = world_->split(world_->rank() < 2 ? 0 : -1, world_->rank());
  ASSERT_TRUE(sub.ok()) << sub.error_str();
  if (*sub) {
    ReshardRequest q;
    q.gpus_per_node = 1;  // every transfer crosses "nodes"
    q.from = {1, 1, 2};
    q.to = {2, 1, 1};
    const ModelShape m = model("tiny_llama");
    q.staging_bytes = 128 * 1024;
    auto plan = plan_reshard(m, q);
    ASSERT_TRUE(plan.ok());
    auto run = execute_reshard(**sub, m, q, *plan);
    ASSERT_TRUE(run.ok()) << run.error_str();
    EXPECT_TRUE(run->state_matches) << run->mismatch;
    EXPECT_EQ(run->bytes_sent, run->plan_bytes_sent);
  }
  ASSERT_TRUE(MpiEnvironment::world().barrier());
}

}  // namespace
}  // namespace cpbench
