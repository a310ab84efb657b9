// executor_mpi_test.cpp — every static CP layout, executed for real on MPI ranks (mpirun -np 4),
// forward and backward, on a packed variable-length batch with odd lengths: O, LSE, dQ, dK, dV
// match the single-device reference, and each rank moves exactly the bytes its plan predicts.
#include <gtest/gtest.h>
#include <mpi.h>

#include "core/layouts/cp_layouts_test_util.h"
#include "core/runtime/attention_check.h"
#include "core/runtime/cpu_attention_kernels.h"
#include "core/runtime/executor_test_util.h"
#include "core/runtime/mpi_communicator.h"
#include "core/runtime/mpi_session.h"

namespace cpbench {
namespace {

MpiCommunicator& world() {
  static MpiSession session;
  static auto comm = MpiCommunicator::world(std::chrono::seconds(120));
  return **comm;
}

std::vector<MaskCase> masks() { return every_mask(16, 16); }

// Runs one layout on a sub-communicator of cp ranks (world ranks split into groups of cp).
void run_case(const std::string& layout, const MaskCase& m, int cp,
              std::vector<int64_t> lengths = {37, 100, 5, 64},  // odd, unequal, one shorter than 2·cp
              RunStyle style = {}) {
  MpiCommunicator& w = world();
  auto sub = w.split(w.rank() / cp, w.rank());
  ASSERT_TRUE(sub.ok()) << sub.error_str();
  Communicator& comm = **sub;
  auto plan = test_layout_plan(layout, m.mask, cp, std::move(lengths), style);
  if (layout == "a2a" && 4 % cp != 0) {
    // Ulysses cannot split 4 KV heads over 8 ranks: a clear error, not a wrong answer.
    ASSERT_FALSE(plan.ok());
    EXPECT_NE(plan.error_str().find("heads"), std::string::npos) << plan.error_str();
    return;
  }
  ASSERT_TRUE(plan.ok()) << layout << " " << m.name << " cp=" << cp << ": " << plan.error_str();
  ASSERT_EQ(check_attention_plan(*plan), "") << layout << " " << m.name << " cp=" << cp;
  expect_runs_as_planned(*plan, comm, 42,
                         layout + " " + m.name + " cp=" + std::to_string(cp) + " " + style.name());
}

class Layouts : public ::testing::TestWithParam<std::string> {};

TEST_P(Layouts, MatchesReferenceAndPredictedBytes) {
  ASSERT_GE(world().size(), 4) << "run under mpirun -np 4 (or 8)";
  for (const auto& m : masks())
    for (int cp : {1, 2, 4, 8}) {
      if (cp > world().size() || world().size() % cp != 0) continue;
      if (GetParam() == "single" && cp > 1) continue;
      for (bool experiment : {false, true}) run_case(GetParam(), m, cp, {37, 100, 5, 64}, RunStyle{experiment});
    }
}

// A static layout runs a sparse mask on the causal layout's tiles (causal_envelope_work, as
// TransformerEngine does): the result is still the sparse mask's, the bytes the plan's.
TEST(Executor, SparseMasksOnCausalTilesMatchTheReference) {
  MpiCommunicator& w = world();
  ASSERT_GE(w.size(), 4);
  auto sub = w.split(w.rank() / 4, w.rank());
  ASSERT_TRUE(sub.ok()) << sub.error_str();
  Communicator& comm = **sub;
  for (const auto& m : masks()) {
    if (m.mask.kind == MaskKind::causal || m.mask.kind == MaskKind::full) continue;
    for (const char* layout : {"ring", "zigzag", "a2a+p2p"}) {
      CpLayoutRequest req;
      req.layout = layout;
      req.cp = 4;
      req.a2a_size = 2;
      req.seq_lengths = {37, 100, 5, 64};
      req.mask = MaskSpec{MaskKind::causal};
      req.heads_q = 8;
      req.heads_kv = 4;
      req.head_dim = 24;
      req.pad = true;
      auto plan = plan_cp_layout(req);
      ASSERT_TRUE(plan.ok()) << plan.error_str();
      plan->mask = m.mask;
      plan->causal_envelope_work = true;
      plan->value_bytes = 2;
      plan->fused_stages = plan->pipelined_backward = true;
      ASSERT_EQ(check_attention_plan(*plan), "") << layout << " " << m.name;
      expect_runs_as_planned(*plan, comm, 42, std::string(layout) + " " + m.name);
    }
  }
}

// The forward runs a tile 256 query rows per kernel call (testing the pending transfers between
// calls): a 1100-token sequence gives tiles of several blocks, whose merged output must still be
// the reference's.
TEST(Executor, LongTilesRunInRowBlocks) {
  ASSERT_GE(world().size(), 2);
  const MaskCase causal = masks()[1];
  run_case("single", causal, 1, {1100, 37});
  for (const char* layout : {"ring", "zigzag", "all_gather"}) run_case(layout, causal, 2, {1100, 37});
}

// The walker reaches kernels only through AttentionKernels: a backend that counts its calls sees
// every backward tile of the rank's stages once and at least one forward call per forward tile,
// and the results are the CPU backend's, bit for bit.
class CountingKernels final : public AttentionKernels {
 public:
  TensorOps& memory() override { return cpu.memory(); }
  void tile_forward(const ForwardCall& call) override {
    ++forward;
    cpu.tile_forward(call);
  }
  void tile_backward(const BackwardCall& call) override {
    ++backward;
    cpu.tile_backward(call);
  }
  CpuAttentionKernels cpu;
  int forward = 0, backward = 0;
};

TEST(Executor, RunsThroughTheKernelBackendInterface) {
  MpiCommunicator& w = world();
  ASSERT_GE(w.size(), 2);
  auto sub = w.split(w.rank() / 2, w.rank());
  ASSERT_TRUE(sub.ok()) << sub.error_str();
  CpLayoutRequest req;
  req.layout = "zigzag";
  req.cp = 2;
  req.seq_lengths = {37, 100, 64};
  req.mask = MaskSpec{MaskKind::causal};
  req.heads_q = 4;
  req.heads_kv = 2;
  req.head_dim = 16;
  req.pad = true;
  auto plan = plan_cp_layout(req);
  ASSERT_TRUE(plan.ok()) << plan.error_str();
  OwnedInputs in = make_attention_inputs(*plan, 7);
  CountingKernels counting;
  auto counted = execute_attention(*plan, **sub, counting, in.view(), true);
  auto plain = execute_attention(*plan, **sub, in.view(), true);
  ASSERT_TRUE(counted.ok() && plain.ok());
  const int me = (*sub)->rank();
  int fwd_tiles = 0;
  for (const auto& stage : plan->stages) fwd_tiles += static_cast<int>(stage.tiles[me].size());
  const int bwd_tiles = fwd_tiles;  // the backward runs each forward tile once
  EXPECT_GE(counting.forward, fwd_tiles);
  EXPECT_GT(fwd_tiles, 0);
  EXPECT_EQ(counting.backward, bwd_tiles);
  ASSERT_EQ(counted->home.size(), plain->home.size());
  for (size_t i = 0; i < plain->home.size(); ++i) {
    EXPECT_EQ(counted->home[i].out, plain->home[i].out);
    EXPECT_EQ(counted->home[i].dq, plain->home[i].dq);
    EXPECT_EQ(counted->home[i].dk, plain->home[i].dk);
    EXPECT_EQ(counted->home[i].dv, plain->home[i].dv);
    EXPECT_EQ(counted->home[i].lse, plain->home[i].lse);
  }
}

INSTANTIATE_TEST_SUITE_P(All, Layouts,
                         ::testing::Values("single", "ring", "zigzag", "all_gather", "a2a", "a2a+p2p", "double_ring"),
                         LayoutTestName());

}  // namespace
}  // namespace cpbench
