// attention_plan_test.cpp — byte formulas, derived backward transfers and the plan checker on
// small hand-built plans (a 2-rank causal ring and a 2-rank Ulysses exchange).
#include "core/plan/attention_plan.h"

#include <gtest/gtest.h>

namespace cpbench {
namespace {

AttnSlice sl(int64_t b, int64_t e, int32_t hb = 0, int32_t he = 1) { return {0, b, e, hb, he}; }

// One causal sequence of 8 tokens on 2 ranks, contiguous: rank 1 receives rank 0's KV in stage 1.
AttentionPlan causal_ring() {
  AttentionPlan p;
  p.layout = "ring";
  p.ranks = 2;
  p.seq_lengths = {8};
  p.mask.kind = MaskKind::causal;
  p.head_dim = 4;
  p.home = {{sl(0, 4)}, {sl(4, 8)}};
  p.stages.resize(2);
  p.stages[0].tiles = {{{sl(0, 4), sl(0, 4)}}, {{sl(4, 8), sl(4, 8)}}};
  p.stages[1].transfers = {{0, 1, AttnTensor::kv, sl(0, 4)}};
  p.stages[1].tiles = {{}, {{sl(4, 8), sl(0, 4)}}};
  return p;
}

// Ulysses on 2 ranks and 2 heads: each rank computes the whole sequence for one head.
AttentionPlan ulysses() {
  AttentionPlan p;
  p.layout = "a2a";
  p.ranks = 2;
  p.seq_lengths = {8};
  p.mask.kind = MaskKind::full;
  p.heads_q = p.heads_kv = 2;
  p.head_dim = 4;
  p.home = {{sl(0, 4, 0, 2)}, {sl(4, 8, 0, 2)}};
  p.stages.resize(1);
  p.stages[0].transfers = {{0, 1, AttnTensor::q, sl(0, 4, 1, 2)},
                           {0, 1, AttnTensor::kv, sl(0, 4, 1, 2)},
                           {1, 0, AttnTensor::q, sl(4, 8, 0, 1)},
                           {1, 0, AttnTensor::kv, sl(4, 8, 0, 1)}};
  // Rank j holds its head of the sequence in two buffers (its own tokens, the received ones).
  for (int32_t j : {0, 1}) {
    std::vector<AttnTile> tiles;
    for (int64_t qb : {0, 4}) {
      for (int64_t kb : {0, 4}) tiles.push_back({sl(qb, qb + 4, j, j + 1), sl(kb, kb + 4, j, j + 1)});
    }
    p.stages[0].tiles.push_back(tiles);
  }
  p.gather_out = {{0, 1, AttnTensor::out, sl(4, 8, 0, 1)}, {1, 0, AttnTensor::out, sl(0, 4, 1, 2)}};
  return p;
}

TEST(AttentionPlan, TransferBytesFollowTheFp32Formulas) {
  AttentionPlan p;
  p.heads_q = 8;
  p.heads_kv = 2;  // g = 4
  p.head_dim = 16;
  const AttnSlice s{0, 0, 10, 0, 8};
  EXPECT_EQ(transfer_bytes(p, {0, 1, AttnTensor::q, s}), 10 * 8 * 16 * 4);
  EXPECT_EQ(transfer_bytes(p, {0, 1, AttnTensor::dout, s}), 10 * 8 * 16 * 4);
  EXPECT_EQ(transfer_bytes(p, {0, 1, AttnTensor::dq, s}), 10 * 8 * 16 * 4);
  EXPECT_EQ(transfer_bytes(p, {0, 1, AttnTensor::kv, s}), 2 * 10 * 2 * 16 * 4);
  EXPECT_EQ(transfer_bytes(p, {0, 1, AttnTensor::dkv, s}), 2 * 10 * 2 * 16 * 4);
  EXPECT_EQ(transfer_bytes(p, {0, 1, AttnTensor::out, s}), 10 * 8 * 17 * 4);
  EXPECT_EQ(transfer_bytes(p, {0, 1, AttnTensor::kv, {0, 0, 10, 4, 8}}), 2 * 10 * 1 * 16 * 4);
  EXPECT_STREQ(attn_tensor_name(AttnTensor::dkv), "dkv");
  EXPECT_STREQ(attn_tensor_name(AttnTensor::out), "out");
  // 16-bit training: values at 2 bytes, the LSE stays fp32.
  p.value_bytes = 2;
  EXPECT_EQ(transfer_bytes(p, {0, 1, AttnTensor::q, s}), 10 * 8 * 16 * 2);
  EXPECT_EQ(transfer_bytes(p, {0, 1, AttnTensor::dkv, s}), 2 * 10 * 2 * 16 * 2);
  EXPECT_EQ(transfer_bytes(p, {0, 1, AttnTensor::out, s}), 10 * 8 * (16 * 2 + 4));
  // fp32 gradient partials (ring-flash-attention's dK/dV): only dq and dkv change.
  p.grad_bytes = 4;
  EXPECT_EQ(transfer_bytes(p, {0, 1, AttnTensor::dkv, s}), 2 * 10 * 2 * 16 * 4);
  EXPECT_EQ(transfer_bytes(p, {0, 1, AttnTensor::dq, s}), 10 * 8 * 16 * 4);
  EXPECT_EQ(transfer_bytes(p, {0, 1, AttnTensor::kv, s}), 2 * 10 * 2 * 16 * 2);
  EXPECT_EQ(transfer_bytes(p, {0, 1, AttnTensor::out, s}), 10 * 8 * (16 * 2 + 4));
  EXPECT_EQ(check_attention_plan(p).find("grad_bytes"), std::string::npos);
  p.grad_bytes = 3;
  EXPECT_NE(check_attention_plan(p).find("grad_bytes = 3: need 0 (value_bytes), 2 or 4"), std::string::npos);
}

// On a 2-rank ring (no relay) the backward phases carry exactly the derived backward transfers,
// either way they are scheduled; pipelined, an input arrives no later than the phase before the
// first stage that reads it and a return leaves no earlier than the phase after the last stage
// that writes it. (Relays: cp_layouts_test, RingBackwardCarriesTheRunningGradientToItsOwner.)
TEST(AttentionPlan, BackwardPhasesCarryTheBackwardTransfers) {
  AttentionPlan p = causal_ring();
  const BackwardTransfers bt = backward_transfers(p);
  ASSERT_FALSE(bt.inputs.empty());
  ASSERT_FALSE(bt.returns.empty());
  for (bool pipelined : {false, true}) {
    p.pipelined_backward = pipelined;
    const auto phases = backward_phases(p);
    size_t count = 0;
    for (const auto& ph : phases) count += ph.transfers.size();
    EXPECT_EQ(count, bt.inputs.size() + bt.returns.size()) << pipelined;
    std::vector<std::vector<std::vector<AttnTile>>> stages;
    for (const auto& ph : phases)
      if (!ph.tiles.empty()) stages.push_back(ph.tiles);
    std::vector<std::vector<std::vector<AttnTile>>> expected;
    for (const AttnStage& st : p.stages) expected.push_back(st.tiles);
    EXPECT_EQ(stages, expected) << pipelined;  // every stage's tiles once, in order
    if (!pipelined) {
      EXPECT_EQ(phases.front().transfers, bt.inputs);
      EXPECT_EQ(phases.back().transfers, bt.returns);
    }
  }
}

TEST(AttentionPlan, ContainsAndHomeOf) {
  EXPECT_TRUE(sl(0, 8, 0, 4).contains(sl(2, 5, 1, 3)));
  EXPECT_FALSE(sl(0, 8, 0, 4).contains(sl(2, 9, 1, 3)));
  EXPECT_FALSE(sl(0, 8, 0, 4).contains({1, 2, 5, 1, 3}));  // other sequence
  const AttentionPlan p = causal_ring();
  EXPECT_EQ(home_of(p, sl(1, 3)), 0);
  EXPECT_EQ(home_of(p, sl(4, 8)), 1);
  EXPECT_EQ(home_of(p, sl(3, 5)), -1);  // spans two homes
}

TEST(AttentionPlan, CausalRingIsWellFormedAndItsBytesAreTheKvShard) {
  const AttentionPlan p = causal_ring();
  EXPECT_EQ(check_attention_plan(p), "");
  const double shard_kv = 2 * 4 * 1 * 4 * 4;
  RankBytes f = plan_bytes(p, false);
  EXPECT_EQ(f.sent, (std::vector<double>{shard_kv, 0}));
  EXPECT_EQ(f.received, (std::vector<double>{0, shard_kv}));
  // Backward: rank 1 fetches rank 0's KV again and returns the dKV partial; no Q moves.
  BackwardTransfers bt = backward_transfers(p);
  EXPECT_EQ(bt.inputs, (std::vector<AttnTransfer>{{0, 1, AttnTensor::kv, sl(0, 4)}}));
  EXPECT_EQ(bt.returns, (std::vector<AttnTransfer>{{1, 0, AttnTensor::dkv, sl(0, 4)}}));
  RankBytes fb = plan_bytes(p, true);
  EXPECT_EQ(fb.sent, (std::vector<double>{2 * shard_kv, shard_kv}));
}

TEST(AttentionPlan, CheckFindsUnheldInputsAndWrongCoverage) {
  AttentionPlan missing_kv = causal_ring();
  missing_kv.stages[1].transfers.clear();
  EXPECT_EQ(check_attention_plan(missing_kv),
            "stage 1 rank 1 tile: kv sequence 0 tokens [0, 4) heads [0, 1) is not held");

  AttentionPlan twice = causal_ring();
  twice.stages[1].tiles[1].push_back({sl(6, 7), sl(2, 3)});
  EXPECT_EQ(check_attention_plan(twice),
            "sequence 0 heads [0, 1) query 6: keys [2, 3) allowed by the causal mask are computed 2 times");

  AttentionPlan never = causal_ring();
  never.stages[1].tiles[1] = {{sl(4, 8), sl(1, 4)}};
  EXPECT_EQ(check_attention_plan(never),
            "sequence 0 heads [0, 1) query 4: keys [0, 1) allowed by the causal mask are computed 0 times");

  AttentionPlan two_homes = causal_ring();
  two_homes.home[1][0].tok_begin = 3;
  EXPECT_EQ(check_attention_plan(two_homes), "sequence 0 tokens [3, 4) heads [0, 1) has 2 homes (ranks 0 and 1)");

  // Homes may split the heads (DCP's head blocks): every (token, head) still needs one home.
  AttentionPlan split = ulysses();  // 2 heads, 2 KV heads: g = 1
  split.home = {{sl(0, 8, 0, 1)}, {sl(0, 8, 1, 2)}};
  EXPECT_EQ(check_attention_plan(split).find("home"), std::string::npos) << check_attention_plan(split);
  split.home = {{sl(0, 8, 0, 1)}, {sl(0, 4, 1, 2)}};
  EXPECT_NE(check_attention_plan(split).find("sequence 0 tokens [4, 8) heads [1, 2) has no home"), std::string::npos)
      << check_attention_plan(split);

  AttentionPlan relay = causal_ring();  // rank 1 forwards KV it never received
  relay.stages[1].transfers = {{1, 0, AttnTensor::kv, sl(0, 4)}};
  EXPECT_NE(check_attention_plan(relay).find(
                "stage 1: rank 1 sends kv of sequence 0 tokens [0, 4) heads [0, 1) that it does not hold"),
            std::string::npos);
}

TEST(AttentionPlan, UlyssesTilesReadPiecesReceivedFromEveryRank) {
  const AttentionPlan p = ulysses();
  EXPECT_EQ(check_attention_plan(p), "");

  // A tile input may be assembled from token pieces that each hold all its heads (rank 0's home
  // [0, 4) and the received [4, 8) of head 0), not from pieces holding some of its heads.
  AttentionPlan spanning = p;
  spanning.stages[0].tiles[0] = {{sl(0, 8, 0, 1), sl(0, 8, 0, 1)}};
  EXPECT_EQ(check_attention_plan(spanning).find("is not held"), std::string::npos);
  spanning.stages[0].tiles[0] = {{sl(0, 8, 0, 2), sl(0, 8, 0, 2)}};
  EXPECT_EQ(check_attention_plan(spanning).substr(0, 72),
            "stage 0 rank 0 tile: q sequence 0 tokens [0, 8) heads [0, 2) is not held");

  AttentionPlan lost = p;
  lost.gather_out.pop_back();
  EXPECT_EQ(check_attention_plan(lost),
            "rank 1 computes sequence 0 tokens [0, 4) heads [1, 2) but gather_out does not send it to its home rank 0");

  // Backward: rank 0 fetches the remote piece of its head (q, dout, out and kv) and returns dq, dkv.
  BackwardTransfers bt = backward_transfers(p);
  const std::vector<AttnTransfer> inputs = {
      {1, 0, AttnTensor::q, sl(4, 8, 0, 1)},   {1, 0, AttnTensor::dout, sl(4, 8, 0, 1)},
      {1, 0, AttnTensor::out, sl(4, 8, 0, 1)}, {1, 0, AttnTensor::kv, sl(4, 8, 0, 1)},
      {0, 1, AttnTensor::q, sl(0, 4, 1, 2)},   {0, 1, AttnTensor::dout, sl(0, 4, 1, 2)},
      {0, 1, AttnTensor::out, sl(0, 4, 1, 2)}, {0, 1, AttnTensor::kv, sl(0, 4, 1, 2)}};
  EXPECT_EQ(bt.inputs, inputs);
  const std::vector<AttnTransfer> returns = {{0, 1, AttnTensor::dq, sl(4, 8, 0, 1)},
                                             {0, 1, AttnTensor::dkv, sl(4, 8, 0, 1)},
                                             {1, 0, AttnTensor::dq, sl(0, 4, 1, 2)},
                                             {1, 0, AttnTensor::dkv, sl(0, 4, 1, 2)}};
  EXPECT_EQ(bt.returns, returns);

  // Forward moves half of each rank's Q and KV and half its O back: (cp−1)/cp with cp = 2.
  const double q_half = 4 * 1 * 4 * 4, kv_half = 2 * 4 * 1 * 4 * 4, out_half = 4 * 1 * 5 * 4;
  const std::vector<AttnTransfer> fwd = forward_transfers(p);
  EXPECT_EQ(fwd.size(), 6u);
  EXPECT_EQ(fwd.back(), p.gather_out.back());
  EXPECT_EQ(plan_bytes(p, false).sent, (std::vector<double>{q_half + kv_half + out_half, q_half + kv_half + out_half}));
}

TEST(AttentionPlan, CheckRejectsMalformedSlices) {
  AttentionPlan p = causal_ring();
  p.stages[0].tiles[0][0].kv = sl(0, 9);
  EXPECT_EQ(
      check_attention_plan(p),
      "stage 0 rank 0 tile kv: sequence 0 tokens [0, 9) heads [0, 1) is empty or outside the sequence's 8 tokens");

  AttentionPlan gqa = ulysses();
  gqa.heads_kv = 1;  // g = 2: a tile of one query head splits the KV head
  EXPECT_NE(check_attention_plan(gqa).find("splits a KV head (query heads per KV head g = 2)"), std::string::npos);
}


// Rank 0 computes rows homed on rank 1 (stage 1) and sends the partial output home inside the
// stages: not before stage 3 (stage 2's transfers are posted while stage 1 runs), and once.
TEST(AttentionPlan, EarlyOutputsAreFinalAndSentOnce) {
  AttentionPlan p = causal_ring();  // stage 1 turned around: rank 1's Q goes to rank 0's KV
  p.stages.resize(4);
  for (AttnStage& st : p.stages) st.tiles.resize(2);
  p.stages[1].transfers = {{1, 0, AttnTensor::q, sl(4, 8)}};
  p.stages[1].tiles = {{{sl(4, 8), sl(0, 4)}}, {}};
  AttentionPlan good = p;
  good.stages[3].transfers = {{0, 1, AttnTensor::out, sl(4, 8)}};
  EXPECT_EQ(check_attention_plan(good), "");
  AttentionPlan early = p;
  early.stages[2].transfers = {{0, 1, AttnTensor::out, sl(4, 8)}};
  EXPECT_NE(check_attention_plan(early).find("while it still computes rows of it"), std::string::npos);
  AttentionPlan twice = good;
  twice.gather_out = {{0, 1, AttnTensor::out, sl(4, 8)}};
  EXPECT_NE(check_attention_plan(twice).find("twice"), std::string::npos) << check_attention_plan(twice);
  AttentionPlan missing = p;  // no output sent at all
  EXPECT_NE(check_attention_plan(missing).find("gather_out does not send it"), std::string::npos);
  // The backward repeats the q transfer (with dO and O), not the output.
  good.pipelined_backward = true;
  for (const AttnBackwardPhase& ph : backward_phases(good))
    for (const AttnTransfer& t : ph.transfers) EXPECT_FALSE(t.tensor == AttnTensor::out && t.src == 0);
}

// A rank receives each slice once: a second copy would send the backward's partial twice.
TEST(AttentionPlan, ASliceIsReceivedOnce) {
  AttentionPlan again = causal_ring();
  again.stages[0].transfers = {{0, 1, AttnTensor::kv, sl(0, 4)}};
  EXPECT_NE(check_attention_plan(again).find("that it already holds"), std::string::npos) << check_attention_plan(again);
}

// A rank that receives K/V of two heads and forwards one of them relays nothing: its partial of
// both goes home (the relay is of the same slice, heads included).
TEST(AttentionPlan, ARelayIsOfTheSameSliceHeadsIncluded) {
  AttentionPlan p;
  p.layout = "hand";
  p.ranks = 3;
  p.seq_lengths = {4};
  p.mask.kind = MaskKind::full;
  p.heads_q = p.heads_kv = 2;
  p.head_dim = 4;
  p.home = {{sl(0, 4, 0, 2)}, {}, {}};
  p.stages.resize(2);
  for (AttnStage& st : p.stages) st.tiles.assign(3, {});
  p.stages[0].transfers = {{0, 1, AttnTensor::kv, sl(0, 4, 0, 2)}, {0, 1, AttnTensor::q, sl(0, 4, 1, 2)},
                           {0, 2, AttnTensor::q, sl(0, 4, 0, 1)}};
  p.stages[1].transfers = {{1, 2, AttnTensor::kv, sl(0, 4, 0, 1)}};
  p.stages[1].tiles[1] = {{sl(0, 4, 1, 2), sl(0, 4, 1, 2)}};
  p.stages[1].tiles[2] = {{sl(0, 4, 0, 1), sl(0, 4, 0, 1)}};
  p.gather_out = {{1, 0, AttnTensor::out, sl(0, 4, 1, 2)}, {2, 0, AttnTensor::out, sl(0, 4, 0, 1)}};
  ASSERT_EQ(check_attention_plan(p), "");
  p.pipelined_backward = true;
  std::vector<AttnTransfer> dkv;
  for (const AttnBackwardPhase& ph : backward_phases(p))
    for (const AttnTransfer& t : ph.transfers)
      if (t.tensor == AttnTensor::dkv) dkv.push_back(t);
  EXPECT_EQ(dkv, (std::vector<AttnTransfer>{{1, 0, AttnTensor::dkv, sl(0, 4, 0, 2)}, {2, 0, AttnTensor::dkv, sl(0, 4, 0, 1)}}))
      << dkv.size();
}

}  // namespace
}  // namespace cpbench
