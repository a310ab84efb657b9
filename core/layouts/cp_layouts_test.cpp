// cp_layouts_test.cpp — every layout × mask × cp on a varlen batch with odd lengths is a
// well-formed plan (every allowed pair computed once, every input held); bytes match the
// layouts' closed forms; rule violations give the stated errors; zigzag balances causal work.
#include "core/layouts/cp_layouts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace cpbench {
namespace {

const std::vector<int64_t> kOddBatch = {37, 101, 9, 64, 3};

std::vector<MaskSpec> masks() {
  MaskSpec full{.kind = MaskKind::full}, causal{.kind = MaskKind::causal};
  MaskSpec lambda{.kind = MaskKind::lambda, .sink_tokens = 3, .window_tokens = 7};
  MaskSpec shared{.kind = MaskKind::shared_question, .question_fraction = 0.25, .answers = 3};
  MaskSpec blockwise{.kind = MaskKind::causal_blockwise, .block_tokens = 8, .local_blocks = 1};
  return {full, causal, lambda, shared, blockwise};
}

CpLayoutRequest request(const std::string& layout, int32_t cp, MaskSpec mask = {}) {
  CpLayoutRequest r;
  r.layout = layout;
  r.cp = cp;
  r.seq_lengths = kOddBatch;
  r.mask = mask;
  r.heads_q = 16;
  r.heads_kv = 8;  // g = 2, both divisible by every cp below
  r.head_dim = 8;
  r.pad = true;
  return r;
}

double kv_bytes(const AttentionPlan& p, int64_t tokens) { return 2.0 * tokens * p.heads_kv * p.head_dim * 4; }
double q_bytes(const AttentionPlan& p, int64_t tokens) { return 1.0 * tokens * p.heads_q * p.head_dim * 4; }
double out_bytes(const AttentionPlan& p, int64_t tokens) { return 1.0 * tokens * p.heads_q * (p.head_dim + 1) * 4; }

int64_t home_tokens(const AttentionPlan& p, int32_t rank) {
  int64_t n = 0;
  for (const AttnSlice& s : p.home[rank]) n += s.tokens();
  return n;
}

// Allowed (q, k) pairs a rank computes, over all stages (one head's worth).
std::vector<int64_t> work_per_rank(const AttentionPlan& p) {
  std::vector<int64_t> w(p.ranks, 0);
  for (const AttnStage& st : p.stages) {
    for (int32_t r = 0; r < p.ranks; ++r) {
      for (const AttnTile& t : st.tiles[r]) {
        w[r] += mask_pairs_in_tile(p.mask, p.seq_lengths[t.q.seq], t.q.tok_begin, t.q.tok_end, t.kv.tok_begin,
                                   t.kv.tok_end);
      }
    }
  }
  return w;
}

TEST(CpLayouts, EveryLayoutMaskAndCpGivesAWellFormedPlan) {
  int plans = 0;
  for (const std::string& layout : cp_layout_names()) {
    for (int32_t cp : {1, 2, 4, 8}) {
      if (layout == "single" && cp != 1) continue;
      for (int32_t a2a_size : {0, 1, 2}) {
        if (layout != "a2a+p2p" && layout != "double_ring" && a2a_size != 0) continue;
        if (layout == "double_ring" && a2a_size == 0) continue;
        if (cp % std::max(1, a2a_size) != 0) continue;
        const int32_t ring = cp / std::max(1, a2a_size);
        for (int32_t window : {0, 1, 2, 4, 8})
        for (const MaskSpec& mask : masks()) {
          if ((layout == "double_ring") != (window > 0) || (window > 0 && ring % window != 0)) continue;
          CpLayoutRequest r = request(layout, cp, mask);
          r.a2a_size = a2a_size;
          r.window = window;
          Expected<AttentionPlan> p = plan_cp_layout(r);
          ASSERT_TRUE(p.ok()) << layout << " cp " << cp << ": " << p.error_str();
          EXPECT_EQ(check_attention_plan(*p), "")
              << layout << " cp " << cp << " a2a " << a2a_size << " window " << window << " mask "
              << mask_kind_name(mask.kind);
          EXPECT_EQ(p->ranks, cp);
          // The check is not vacuous: a plan missing any one of its tiles loses allowed pairs.
          AttentionPlan broken = *p;
          for (AttnStage& st : broken.stages) {
            auto busiest = std::max_element(st.tiles.begin(), st.tiles.end(),
                                            [](const auto& a, const auto& b) { return a.size() < b.size(); });
            if (!busiest->empty()) {
              busiest->pop_back();
              break;
            }
          }
          EXPECT_NE(check_attention_plan(broken).find("computed 0 times"), std::string::npos);
          // Both derived backwards, written out as a plan's explicit backward, pass its check.
          for (bool pipelined : {false, true}) {
            AttentionPlan e = *p;
            e.pipelined_backward = pipelined;
            e.backward = backward_phases(e);
            EXPECT_EQ(check_attention_plan(e), "") << layout << " cp " << cp << " a2a " << a2a_size << " window "
                                                   << window << " mask " << mask_kind_name(mask.kind) << " pipelined "
                                                   << pipelined;
          }
          ++plans;
        }
      }
    }
  }
  // double_ring: (a2a, windows) over cp 1, 2, 4, 8: 1, 2 + 1, 3 + 2, 4 + 3 combinations.
  EXPECT_EQ(plans, 5 * (1 + 4 * 4 + (4 + 4 + 3) + 16));
}

// The size bound attach_attention_plans checks before building: never below the plan it stands
// for (else a plan past the limit would be built), and not loose by more than a small factor on
// the layouts that grow with cp² · sequences (else a plan cpbench can hold would be refused).
TEST(CpLayouts, PlanEntriesBoundHoldsTheBuiltPlan) {
  for (const std::string& layout : cp_layout_names()) {
    for (int32_t cp : {1, 2, 4, 8}) {
      if (layout == "single" && cp != 1) continue;
      CpLayoutRequest r = request(layout, cp, MaskSpec{.kind = MaskKind::causal});
      r.seq_lengths.assign(40, 64);
      if (layout == "double_ring") {
        r.a2a_size = 1;
        r.window = cp >= 4 ? 2 : 1;
      }
      auto p = plan_cp_layout(r);
      ASSERT_TRUE(p) << layout << " cp " << cp << ": " << p.error_str();
      int64_t entries = static_cast<int64_t>(p->gather_out.size());
      for (const AttnStage& st : p->stages) {
        entries += static_cast<int64_t>(st.transfers.size());
        for (const auto& tiles : st.tiles) entries += static_cast<int64_t>(tiles.size());
      }
      // The request's heads (16 q, 8 kv) let a2a+p2p's automatic group reach every cp here.
      const int64_t bound = cp_layout_plan_entries(layout, cp, 40, layout == "a2a+p2p" ? cp : 1, r.window);
      EXPECT_GE(bound, entries) << layout << " cp " << cp;
      if ((layout == "zigzag" || layout == "all_gather") && cp >= 4) EXPECT_LE(bound, 4 * entries) << layout << " cp " << cp;
    }
  }
}

TEST(CpLayouts, PaddingFollowsEachLayoutsRule) {
  EXPECT_EQ(plan_cp_layout(request("ring", 4))->seq_lengths, (std::vector<int64_t>{40, 104, 12, 64, 4}));
  EXPECT_EQ(plan_cp_layout(request("a2a", 4))->seq_lengths, (std::vector<int64_t>{37, 101, 9, 64, 5}));  // 214 → 216
  EXPECT_EQ(plan_cp_layout(request("a2a+p2p", 4))->seq_lengths, (std::vector<int64_t>{40, 104, 16, 64, 8}));
  EXPECT_EQ(plan_cp_layout(request("zigzag", 4))->seq_lengths, (std::vector<int64_t>{40, 104, 16, 64, 8}));
  EXPECT_EQ(plan_cp_layout(request("single", 1))->seq_lengths, kOddBatch);
}

TEST(CpLayouts, RingAndZigzagForwardMoveCpMinusOneKvShards) {
  for (const std::string& layout : {"ring", "zigzag"}) {
    for (int32_t cp : {2, 4, 8}) {
      for (const MaskSpec& mask : masks()) {
        const AttentionPlan p = *plan_cp_layout(request(layout, cp, mask));
        const RankBytes b = plan_bytes(p, false);
        for (int32_t r = 0; r < cp; ++r) {
          const double shard = kv_bytes(p, home_tokens(p, r));
          EXPECT_DOUBLE_EQ(b.sent[r], (cp - 1) * shard) << layout << " cp " << cp << " rank " << r;
          EXPECT_DOUBLE_EQ(b.received[r], (cp - 1) * kv_bytes(p, home_tokens(p, (r + cp - 1) % cp)));
        }
      }
    }
  }
  // Backward of one sequence under a full mask reads every remote KV once and returns every dKV
  // partial, both ways it can run: from the homes (the executor's three phases) or round the ring
  // (pipelined: K/V and the running dK/dV travel to rank + 1 and dK/dV ends on its owner).
  CpLayoutRequest one = request("ring", 4, {.kind = MaskKind::full});
  one.seq_lengths = {216};
  AttentionPlan p = *plan_cp_layout(one);
  const BackwardTransfers bt = backward_transfers(p);
  EXPECT_TRUE(std::all_of(bt.inputs.begin(), bt.inputs.end(),
                          [](const AttnTransfer& t) { return t.tensor == AttnTensor::kv; }));
  const double shard = kv_bytes(p, 216 / 4);
  for (bool pipelined : {false, true}) {
    p.pipelined_backward = pipelined;
    const RankBytes fb = plan_bytes(p, true);
    for (int32_t r = 0; r < 4; ++r) EXPECT_DOUBLE_EQ(fb.sent[r], 3 * shard + 3 * shard + 3 * shard) << pipelined;
  }
  for (const AttnBackwardPhase& ph : backward_phases(p))
    for (const AttnTransfer& t : ph.transfers) EXPECT_EQ(t.dst, (t.src + 1) % 4) << attn_tensor_name(t.tensor);
}

TEST(CpLayouts, RingSkipsFullyMaskedTilesAndZigzagOffDiagonalTilesAreUnmasked) {
  CpLayoutRequest r = request("ring", 4, {.kind = MaskKind::causal});
  r.seq_lengths = {64};
  const AttentionPlan ring = *plan_cp_layout(r);
  for (int32_t rank = 0; rank < 4; ++rank) {
    size_t tiles = 0;
    for (const AttnStage& st : ring.stages) tiles += st.tiles[rank].size();
    EXPECT_EQ(tiles, static_cast<size_t>(rank + 1)) << "rank " << rank << " sees only its own and earlier KV";
  }
  r.layout = "zigzag";
  const AttentionPlan zz = *plan_cp_layout(r);
  for (size_t s = 1; s < zz.stages.size(); ++s) {
    for (const auto& tiles : zz.stages[s].tiles) {
      ASSERT_FALSE(tiles.empty());
      for (const AttnTile& t : tiles) {
        EXPECT_EQ(mask_pairs_in_tile(zz.mask, 64, t.q.tok_begin, t.q.tok_end, t.kv.tok_begin, t.kv.tok_end),
                  t.q.tokens() * t.kv.tokens());
      }
    }
  }
}

TEST(CpLayouts, AllGatherSendsEveryShardToEveryRank) {
  const AttentionPlan p = *plan_cp_layout(request("all_gather", 4, {.kind = MaskKind::causal}));
  ASSERT_EQ(p.stages.size(), 1u);
  const RankBytes b = plan_bytes(p, false);
  // Zigzag chunks: every sequence padded to a multiple of 2·cp = 8, each rank holds 1/4 of it.
  int64_t padded = 0;
  for (int64_t L : p.seq_lengths) {
    EXPECT_EQ(L % 8, 0);
    padded += L;
  }
  const double shard = kv_bytes(p, padded / 4);
  for (int32_t r = 0; r < 4; ++r) {
    EXPECT_DOUBLE_EQ(b.sent[r], 3 * shard);
    EXPECT_DOUBLE_EQ(b.received[r], 3 * shard);
    // Causal: a Q piece needs the KV pieces of its sequence that start at or before its end.
    size_t needed = 0;
    for (const AttnSlice& q : p.home[r]) {
      for (const auto& h : p.home) {
        needed += std::count_if(h.begin(), h.end(),
                                [&](const AttnSlice& k) { return k.seq == q.seq && k.tok_begin < q.tok_end; });
      }
    }
    EXPECT_EQ(p.stages[0].tiles[r].size(), needed);
  }
}

TEST(CpLayouts, UlyssesMovesCpMinusOneOverCpOfQkvAndOut) {
  for (int32_t cp : {2, 4, 8}) {
    const AttentionPlan p = *plan_cp_layout(request("a2a", cp, {.kind = MaskKind::causal}));
    const RankBytes b = plan_bytes(p, false);
    for (int32_t r = 0; r < cp; ++r) {
      const int64_t tokens = home_tokens(p, r);  // T / cp of the padded batch on every rank
      EXPECT_EQ(tokens * cp, cp == 2 ? 214 : 216);
      const double expected = (cp - 1.0) / cp * (q_bytes(p, tokens) + kv_bytes(p, tokens) + out_bytes(p, tokens));
      EXPECT_NEAR(b.sent[r], expected, 1e-6 * expected) << "cp " << cp;
      EXPECT_NEAR(b.received[r], expected, 1e-6 * expected);
    }
  }
}

TEST(CpLayouts, UspCombinesAnA2aGroupWithARing) {
  CpLayoutRequest r = request("a2a+p2p", 8, {.kind = MaskKind::causal});
  r.a2a_size = 2;  // ring of 4 groups
  const AttentionPlan p = *plan_cp_layout(r);
  EXPECT_EQ(p.stages.size(), 4u);
  const int64_t tokens = home_tokens(p, 0);  // the zigzag chunks: every rank holds as many
  EXPECT_EQ(tokens * 8, 256);                // each sequence padded to a multiple of 2·cp
  const double a2a = 0.5 * (q_bytes(p, tokens) + kv_bytes(p, tokens) + out_bytes(p, tokens));
  const double ring = 3 * kv_bytes(p, tokens);  // each member forwards its head half of 2·tokens
  const RankBytes b = plan_bytes(p, false);
  for (int32_t rank = 0; rank < 8; ++rank) {
    EXPECT_EQ(home_tokens(p, rank), tokens);
    EXPECT_NEAR(b.sent[rank], a2a + ring, 1e-6 * (a2a + ring));
  }
  r.a2a_size = 0;  // auto: the largest divisor of cp dividing both head counts
  EXPECT_EQ(plan_cp_layout(r)->stages.size(), 1u);
}

// LoongTrain's double ring: a window of 1 or the whole ring is a2a+p2p's single ring, transfer for
// transfer; a real window moves the same bytes per rank, but across windows only in pieces of
// 1/window of a group's KV per stage, every member of a window sending, where the single ring
// sends a whole group's KV over one window boundary per stage.
TEST(CpLayouts, DoubleRingIsTheRingWithItsKvCrossingWindowsInPieces) {
  CpLayoutRequest usp = request("a2a+p2p", 8, {.kind = MaskKind::causal});
  usp.seq_lengths = {256, 512, 128};  // zigzag chunks of 16, 32 and 8 tokens: four equal pieces each
  usp.a2a_size = 1;
  const AttentionPlan single = *plan_cp_layout(usp);
  CpLayoutRequest dr = usp;
  dr.layout = "double_ring";
  for (int32_t window : {1, 8}) {
    dr.window = window;
    const AttentionPlan p = *plan_cp_layout(dr);
    ASSERT_EQ(p.stages.size(), single.stages.size());
    for (size_t k = 0; k < p.stages.size(); ++k) {
      EXPECT_EQ(p.stages[k].transfers, single.stages[k].transfers) << "window " << window << " stage " << k;
      EXPECT_EQ(p.stages[k].tiles, single.stages[k].tiles) << "window " << window << " stage " << k;
    }
  }
  dr.window = 4;  // two windows of four ranks
  const AttentionPlan p = *plan_cp_layout(dr);
  EXPECT_EQ(check_attention_plan(p), "");
  const RankBytes a = plan_bytes(p, true), b = plan_bytes(single, true);
  for (int32_t r = 0; r < 8; ++r) {
    EXPECT_NEAR(a.received[r], b.received[r], 1e-9 * b.received[r]) << "rank " << r;
    EXPECT_NEAR(a.sent[r], b.sent[r], 1e-9 * b.sent[r]) << "rank " << r;
  }
  EXPECT_EQ(work_per_rank(p), work_per_rank(single));
  const auto window_of = [](int32_t rank) { return rank / 4; };
  const double group_kv = kv_bytes(single, home_tokens(single, 0));  // every rank's home: equal here
  for (size_t k = 0; k < p.stages.size(); ++k) {
    std::vector<double> across(8, 0.0), single_across(8, 0.0);
    for (const AttnTransfer& t : p.stages[k].transfers)
      if (window_of(t.src) != window_of(t.dst)) across[t.src] += transfer_bytes(p, t);
    for (const AttnTransfer& t : single.stages[k].transfers)
      if (window_of(t.src) != window_of(t.dst)) single_across[t.src] += transfer_bytes(single, t);
    // Stages 1-4 carry the outer step's four pieces, from every rank of both windows.
    const double piece = k >= 1 && k <= 4 ? group_kv / 4 : 0.0;
    for (int32_t r = 0; r < 8; ++r) EXPECT_NEAR(across[r], piece, 1e-9 * group_kv) << "stage " << k << " rank " << r;
    if (k >= 1) {  // the single ring: ranks 3 and 7 send a whole group's KV across, every stage
      EXPECT_NEAR(single_across[3], group_kv, 1e-9 * group_kv);
      EXPECT_NEAR(single_across[7], group_kv, 1e-9 * group_kv);
    }
  }
}

TEST(CpLayouts, ZigzagBalancesCausalWorkAndContiguousRingDoesNot) {
  CpLayoutRequest r = request("zigzag", 4, {.kind = MaskKind::causal});
  r.seq_lengths = {64, 128, 48};
  const AttentionPlan zz = *plan_cp_layout(r);
  const std::vector<int64_t> w = work_per_rank(zz);
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  int64_t expected_total = 0;
  for (int64_t L : r.seq_lengths) expected_total += mask_pairs(r.mask, L);
  EXPECT_EQ(total, expected_total);
  for (int64_t x : w) EXPECT_LE(std::abs(x - total / 4), 128.0) << "within one row of the longest sequence";

  r.layout = "ring";
  const std::vector<int64_t> wr = work_per_rank(*plan_cp_layout(r));
  // chunk r of each sequence (c = L/4 rows, seeing r·c + i + 1 keys): c·r·c + c(c+1)/2 summed
  EXPECT_EQ(wr, (std::vector<int64_t>{742, 2166, 3590, 5014}));
  EXPECT_GT(*std::max_element(wr.begin(), wr.end()) / (total / 4), 1.5);
}

TEST(CpLayouts, BadBatchesGiveTheStatedErrors) {
  CpLayoutRequest r = request("zigzag", 4);
  r.seq_lengths = {16, 8, 1001};
  r.pad = false;
  EXPECT_EQ(plan_cp_layout(r).error_str(),
            "zigzag needs every sequence length to be a multiple of 2·cp = 8: sequence 2 has 1001 tokens; pass pad = "
            "true to pad");
  r.layout = "ring";
  r.seq_lengths = {5, 6};
  EXPECT_EQ(
      plan_cp_layout(r).error_str(),
      "ring needs every sequence length to be a multiple of cp = 4: sequence 0 has 5 tokens; pass pad = true to pad");
  r.layout = "a2a";
  EXPECT_EQ(
      plan_cp_layout(r).error_str(),
      "a2a needs the packed batch's total tokens to be a multiple of cp = 4: the batch has 11 tokens; pass pad = "
      "true to pad the last sequence");
  r.layout = "a2a";
  r.seq_lengths = {8};
  r.heads_q = 6;
  r.heads_kv = 2;
  EXPECT_EQ(plan_cp_layout(r).error_str(),
            "a2a needs heads_q and heads_kv to be multiples of cp = 4: heads_q = 6, heads_kv = 2");
  r.layout = "a2a+p2p";
  r.a2a_size = 3;
  EXPECT_EQ(plan_cp_layout(r).error_str(), "a2a+p2p needs a2a_size to divide cp: a2a_size = 3, cp = 4");
  r.a2a_size = 4;
  EXPECT_EQ(plan_cp_layout(r).error_str(),
            "a2a+p2p needs heads_q and heads_kv to be multiples of a2a_size = 4: heads_q = 6, heads_kv = 2");
  EXPECT_EQ(plan_cp_layout(request("single", 2)).error_str(), "single needs cp = 1, got cp = 2");
  CpLayoutRequest empty = request("ring", 2);
  empty.seq_lengths = {4, 0};
  EXPECT_EQ(plan_cp_layout(empty).error_str(),
            "ring: sequence 1 has 0 tokens; every sequence needs at least one token");
  EXPECT_EQ(plan_cp_layout(request("ulysses", 2)).error_str(),
            "unknown CP layout \"ulysses\"; known layouts: single, ring, zigzag, all_gather, a2a, a2a+p2p, double_ring");
  CpLayoutRequest dr = request("double_ring", 8);
  dr.a2a_size = 2;
  dr.window = 3;
  EXPECT_EQ(plan_cp_layout(dr).error_str(),
            "double_ring needs a window dividing the ring of cp / a2a_size = 4 groups, got window = 3");
  dr.layout = "zigzag";
  dr.window = 2;
  EXPECT_EQ(plan_cp_layout(dr).error_str(), "zigzag has no ring window (window = 2); only double_ring takes one");
}


// The pipelined backward of a 3-rank ring under a full mask, phase by phase: K/V travel as in the
// forward (stage i's transfers in phase i, beside stage i − 1's tiles); rank 1's dK/dV partial of
// rank 0's shard leaves in phase 3, after its stage-1 tiles ran in phase 2, to rank 2, which it
// forwarded the shard to; rank 2 adds its own (stage 2, phase 3) and sends the sum home in phase 4.
TEST(CpLayouts, RingBackwardCarriesTheRunningGradientToItsOwner) {
  CpLayoutRequest r = request("ring", 3, {.kind = MaskKind::full});
  r.seq_lengths = {12};
  AttentionPlan p = *plan_cp_layout(r);
  p.pipelined_backward = true;
  const auto phases = backward_phases(p);
  ASSERT_EQ(phases.size(), 5u);
  const AttnSlice shard0 = p.home[0][0];
  auto phase_of = [&](int32_t src, int32_t dst, AttnTensor t) {
    for (size_t i = 0; i < phases.size(); ++i)
      for (const AttnTransfer& x : phases[i].transfers)
        if (x.src == src && x.dst == dst && x.tensor == t && x.slice == shard0) return static_cast<int>(i);
    return -1;
  };
  EXPECT_EQ(phase_of(0, 1, AttnTensor::kv), 1);
  EXPECT_EQ(phase_of(1, 2, AttnTensor::kv), 2);
  EXPECT_EQ(phase_of(1, 2, AttnTensor::dkv), 3);
  EXPECT_EQ(phase_of(2, 0, AttnTensor::dkv), 4);
  EXPECT_EQ(phase_of(1, 0, AttnTensor::dkv), -1);  // not home directly: round the ring
  for (size_t i = 0; i < phases.size(); ++i)  // phase i runs stage i − 1's tiles
    EXPECT_EQ(phases[i].tiles, i >= 1 && i <= 3 ? p.stages[i - 1].tiles : std::vector<std::vector<AttnTile>>{});
}


// An explicit backward is checked as the executor runs it: each way of breaking a ring's backward
// (written out from its derivation) is named.
TEST(CpLayouts, AnExplicitBackwardThatCannotRunIsRejected) {
  AttentionPlan p = *plan_cp_layout(request("ring", 4, MaskSpec{.kind = MaskKind::full}));
  p.pipelined_backward = true;
  p.backward = backward_phases(p);
  ASSERT_EQ(check_attention_plan(p), "");
  auto find = [&](const AttentionPlan& x, AttnTensor t) {
    for (size_t i = 0; i < x.backward.size(); ++i)
      for (size_t j = 0; j < x.backward[i].transfers.size(); ++j)
        if (x.backward[i].transfers[j].tensor == t) return std::make_pair(i, j);
    return std::make_pair(size_t{0}, size_t{0});
  };
  auto expect = [](const AttentionPlan& x, const std::string& what) {
    const std::string problems = check_attention_plan(x);
    EXPECT_NE(problems.find(what), std::string::npos) << "expected \"" << what << "\" in: \"" << problems << "\"";
  };
  {  // a tile moved to the phase its K/V arrives in
    AttentionPlan x = p;
    const AttnTile t = x.backward[2].tiles[1].back();
    x.backward[2].tiles[1].pop_back();
    x.backward[1].tiles[1].push_back(t);
    expect(x, "has not arrived before the phase");
  }
  {  // a gradient partial that never leaves
    AttentionPlan x = p;
    const auto [i, j] = find(x, AttnTensor::dkv);
    x.backward[i].transfers.erase(x.backward[i].transfers.begin() + static_cast<std::ptrdiff_t>(j));
    expect(x, "that it never sends towards its home");
  }
  {  // a partial sent in the phase its last tile runs
    AttentionPlan x = p;
    const auto [i, j] = find(x, AttnTensor::dkv);
    const AttnTransfer t = x.backward[i].transfers[j];
    x.backward[i].transfers.erase(x.backward[i].transfers.begin() + static_cast<std::ptrdiff_t>(j));
    x.backward[i - 1].transfers.push_back(t);
    expect(x, "a tile of it runs in phase");
  }
  {  // a partial sent twice
    AttentionPlan x = p;
    const auto [i, j] = find(x, AttnTensor::dkv);
    x.backward.back().transfers.push_back(x.backward[i].transfers[j]);
    expect(x, "twice");
  }
  {  // a partial sent to a rank that has no slot for it: partials go straight home here, and under
     // a causal mask rank 0 computes with no later rank's K/V, so it holds no dK/dV of them
    AttentionPlan x = *plan_cp_layout(request("ring", 4, MaskSpec{.kind = MaskKind::causal}));
    x.backward = backward_phases(x);
    ASSERT_EQ(check_attention_plan(x), "");
    bool redirected = false;
    for (AttnBackwardPhase& ph : x.backward)
      for (AttnTransfer& t : ph.transfers)
        if (!redirected && t.tensor == AttnTensor::dkv && t.src != 0 && home_of(x, t.slice) != 0) {
          t.dst = 0;
          redirected = true;
        }
    ASSERT_TRUE(redirected);
    expect(x, "which neither owns it nor sends it on");
  }
  {  // a tile whose backward never runs
    AttentionPlan x = p;
    x.backward[1].tiles[0].pop_back();
    expect(x, "computed 0 times");
  }
}

}  // namespace
}  // namespace cpbench

namespace cpbench {
namespace {

// Every row of the layout table plans a padded batch, and the plan keeps the row's rules: each
// sequence a multiple of cp_layout_sequence_multiple (contiguous rows: the total a multiple of
// cp), a TransformerEngine row maps back from its cp_comm_type, and the data loader's padding of
// that cp_comm_type is the row's THD chunks per rank.
TEST(CpLayoutTable, EveryRowPlansByItsRules) {
  ASSERT_EQ(cp_layout_names().size(), cp_layouts().size());
  for (const CpLayout& row : cp_layouts()) {
    SCOPED_TRACE(row.name);
    EXPECT_EQ(find_cp_layout(row.name), &row);
    for (int32_t cp : {1, 2, 4}) {
      if (row.one_rank && cp != 1) continue;
      CpLayoutRequest r;
      r.layout = row.name;
      r.cp = cp;
      r.seq_lengths = {37, 100, 5};
      r.heads_q = r.heads_kv = 4;
      r.head_dim = 8;
      r.pad = true;
      r.window = row.window ? 1 : 0;
      auto plan = plan_cp_layout(r);
      ASSERT_TRUE(plan.ok()) << "cp " << cp << ": " << plan.error_str();
      EXPECT_EQ(check_attention_plan(*plan), "");
      const int64_t m = cp_layout_sequence_multiple(row, cp);
      int64_t total = 0;
      for (int64_t L : plan->seq_lengths) {
        EXPECT_EQ(L % m, 0) << "cp " << cp;
        total += L;
      }
      EXPECT_EQ(total % cp, 0) << "cp " << cp;
      if (row.tokens == TokenSplit::contiguous) EXPECT_EQ(m, 1);
    }
    if (*row.te_comm_type) {
      EXPECT_EQ(cp_layout_for_comm_type(row.te_comm_type), row.name);
      ParallelConfig layout;
      layout.num_gpus = layout.cp = 4;
      layout.cp_comm_type = row.te_comm_type;
      EXPECT_EQ(static_cp_pad_multiple(layout), row.thd_chunks * 4);
      layout.tp = 2;
      layout.num_gpus = 8;
      layout.sequence_parallel = true;
      EXPECT_EQ(static_cp_pad_multiple(layout), row.thd_chunks * 8);
    }
  }
  EXPECT_EQ(find_cp_layout("dcp"), nullptr);
  EXPECT_EQ(cp_layout_for_comm_type("ring"), "");
  EXPECT_EQ(cp_layout_for_comm_type(""), "");
}

}  // namespace
}  // namespace cpbench
