// attention_sim_test.cpp — the lowering of AttentionPlans against hand-derived timelines (one
// rank: the sum of its tiles; a 2-rank ring: a + max(a, c) forward, plus c + 2b + c backward)
// and against properties: ring bounds, zero-cost links give the max per-rank compute, zigzag
// beats contiguous ring on causal masks, monotone in length, malformed plans are errors.
#include "core/sim/attention_sim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "core/layouts/cp_layouts.h"
#include "core/cost/cost_test_util.h"
#include "core/workload/mask.h"

namespace cpbench {
namespace {

const MaskSpec kCausal{.kind = MaskKind::causal};
const MaskSpec kFull{.kind = MaskKind::full};

AttentionPlan layout(const std::string& name, int32_t cp, std::vector<int64_t> lengths, MaskSpec mask = kCausal) {
  CpLayoutRequest r;
  r.layout = name;
  r.cp = cp;
  r.seq_lengths = std::move(lengths);
  r.mask = mask;
  r.heads_q = 32;
  r.heads_kv = 8;
  r.head_dim = 128;
  auto plan = plan_cp_layout(r);
  EXPECT_TRUE(plan.ok()) << plan.error_str();
  return plan.ok() ? *plan : AttentionPlan{};
}

// Textbook formulas (no latency, no overheads) on the round-number test cluster.
CostModel ideal_model(double nvlink_GBps = 100) {
  ClusterSpec c = test_cluster();
  c.gpu.nvlink_bandwidth_GBps = nvlink_GBps;
  return CostModel(c, EfficiencyParams::ideal());
}

AttentionSimResult sim(const AttentionPlan& plan, const CostModel& cost, bool backward, Link link = Link::nvlink) {
  auto r = simulate_attention_plan(plan, cost, backward, link);
  EXPECT_TRUE(r.ok()) << r.error_str();
  return r.ok() ? *r : AttentionSimResult{};
}

double max_of(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

TEST(AttentionSim, TileCostIsTheCostModelOnTheTilesGrid) {
  const AttentionPlan plan = layout("single", 1, {4096});
  const CostModel cost = ideal_model();  // 100 TFLOP/s on 100 SMs
  // An off-diagonal block of 1024 rows × 1024 keys below the diagonal, 32 heads: every pair
  // allowed. Forward, 8 query tiles × 32 heads = 256 CTAs of 128 × 1024 pairs; on 100 SMs that is
  // three waves (the last one partial), each CTA 4·d flops per pair on one SM.
  const AttnTile block{{0, 2048, 3072, 0, 32}, {0, 0, 1024, 0, 32}};
  const double cta = 128.0 * 1024 * 4 * 128 / (100e12 / 100);
  EXPECT_NEAR(attention_tile_s(plan, block, cost, false), 3 * cta, 1e-15);
  // Backward: 8 key tiles × 32 heads, the same 256 CTAs at 2.5× the flops.
  EXPECT_NEAR(attention_tile_s(plan, block, cost, true), 3 * 2.5 * cta, 1e-15);
  // A whole causal sequence: its query tiles see 128·i + 64.5 keys per row on average, unequal
  // CTAs; the call costs at least the pairs at the GPU's rate (the uniform model) and at most
  // that plus its longest CTA (greedy list scheduling).
  const AttnTile whole{{0, 0, 4096, 0, 32}, {0, 0, 4096, 0, 32}};
  const double uniform = cost.flash_attention_fwd_s(4096.0 * 4097 / 2, 32, 128, 4097);
  const double longest = cost.flash_attention_grid_s({128.0 * (3969 + 4096) / 2}, 128, 128, false);
  EXPECT_GE(attention_tile_s(plan, whole, cost, false), uniform);
  EXPECT_LE(attention_tile_s(plan, whole, cost, false), uniform + longest);
  EXPECT_GT(attention_tile_s(plan, whole, cost, false), uniform * 1.05);  // the tail is real here
  // Above the diagonal a causal tile is empty and costs nothing.
  const AttnTile masked{{0, 0, 1024, 0, 32}, {0, 2048, 3072, 0, 32}};
  EXPECT_EQ(attention_tile_s(plan, masked, cost, false), 0.0);
}

// A kernel lasts as long as its longest CTA: one query block whose rows see 16K keys beside
// blocks that see 1K is as slow as that block alone, however little the others add.
TEST(AttentionSim, AFusedCallLastsItsLongestQueryTile) {
  AttentionPlan plan = layout("single", 1, {32768});
  plan.mask = MaskSpec{.kind = MaskKind::full};
  const CostModel cost = ideal_model();
  const AttnTile lone{{0, 0, 128, 0, 1}, {0, 0, 16384, 0, 1}};
  std::vector<AttnTile> tiles{lone};
  for (int64_t b = 1; b < 50; ++b) tiles.push_back({{0, 128 * b, 128 * (b + 1), 0, 1}, {0, 0, 1024, 0, 1}});
  std::vector<const AttnTile*> all;
  for (const AttnTile& t : tiles) all.push_back(&t);
  EXPECT_NEAR(attention_tiles_s(plan, all, cost, false), attention_tile_s(plan, lone, cost, false), 1e-15);
  // Backward the CTAs are key tiles: the lone row block's 128 key tiles each see 128 rows, the
  // others' 8 key tiles 128 rows too; 128 + 49·8 = 520 equal CTAs, 6 waves on 100 SMs.
  const double key_cta = 128.0 * 128 * 2.5 * 4 * 128 / (100e12 / 100);
  EXPECT_NEAR(attention_tiles_s(plan, all, cost, true), 6 * key_cta, 1e-15);
}

// A static layout running a sparse mask computes its tiles' causal envelope (it cannot skip the
// masked pairs): priced exactly as the causal plan, while the plan's own mask prices far less.
TEST(AttentionSim, CausalEnvelopeWorkPricesASparseMaskAsCausal) {
  MaskSpec lambda{.kind = MaskKind::lambda};
  lambda.sink_tokens = 64;
  lambda.window_tokens = 512;
  const CostModel cost = ideal_model();
  const AttentionPlan causal = layout("zigzag", 4, {8192, 4096});
  AttentionPlan envelope = causal;
  envelope.mask = lambda;
  envelope.causal_envelope_work = true;
  AttentionPlan skipping = envelope;
  skipping.causal_envelope_work = false;
  ASSERT_EQ(check_attention_plan(envelope), "");
  for (bool backward : {false, true}) {
    EXPECT_DOUBLE_EQ(max_of(sim(envelope, cost, backward).compute_s), max_of(sim(causal, cost, backward).compute_s));
    EXPECT_LT(max_of(sim(skipping, cost, backward).compute_s), 0.6 * max_of(sim(causal, cost, backward).compute_s));
  }
  const AttnTile t = envelope.stages[0].tiles[0][0];
  EXPECT_EQ(tile_work_pairs(envelope, t), tile_work_pairs(causal, t));
  EXPECT_LT(tile_work_pairs(skipping, t), tile_work_pairs(causal, t));
}

// The merge moves, per tile, its partial output (value_bytes) and its fp32 accumulator twice, plus
// the fp32 LSE (forward); dQ, dK and dV the same way (backward), dK and dV of the KV heads only
// (32 query heads in 8 KV groups: a quarter of dQ's rows each). One kernel for a fused stage.
TEST(AttentionSim, MergeIsTheMemoryBoundTrafficOfThePartials) {
  AttentionPlan plan = layout("single", 1, {4096});
  plan.value_bytes = 2;
  const CostModel cost = ideal_model();
  const AttnTile a{{0, 0, 1024, 0, 32}, {0, 0, 1024, 0, 32}}, b{{0, 1024, 2048, 0, 32}, {0, 0, 2048, 0, 32}};
  const double q = 1024.0 * 32 * 128, lse = 1024.0 * 32;
  EXPECT_DOUBLE_EQ(attention_merge_s(plan, {&a}, cost, false), cost.memory_bound_s(q * 10 + lse * 12));
  EXPECT_DOUBLE_EQ(attention_merge_s(plan, {&a}, cost, true), cost.memory_bound_s((q + 2 * 1024.0 * 8 * 128) * 10));
  plan.heads_kv = 32;  // without GQA, dK and dV have as many rows as dQ
  EXPECT_DOUBLE_EQ(attention_merge_s(plan, {&a}, cost, true), cost.memory_bound_s(3 * q * 10));
  plan.heads_kv = 8;
  EXPECT_DOUBLE_EQ(attention_merge_s(plan, {&a, &b}, cost, false), cost.memory_bound_s(2 * (q * 10 + lse * 12)));
  EXPECT_EQ(attention_merge_s(plan, {}, cost, false), 0.0);
}

// A fused stage's kernel reads all the keys a query row attends to in that stage in one pass over
// the row: a row's tiles against K/V pieces cost what one tile against their union costs (same
// pairs, the row loaded, rescaled and written once), and its partial is merged once. So the
// all-to-all of a2a+p2p with a ring of one group is Ulysses' a2a, whatever the chunking.
TEST(AttentionSim, AFusedStageReadsEachQueryRowOnce) {
  AttentionPlan plan = layout("single", 1, {4096});
  const CostModel cost = preset_model("h100_dgx");
  const AttnTile whole{{0, 0, 1024, 0, 32}, {0, 0, 1024, 0, 32}};
  const AttnTile first{{0, 0, 1024, 0, 32}, {0, 0, 512, 0, 32}}, second{{0, 0, 1024, 0, 32}, {0, 512, 1024, 0, 32}};
  for (bool backward : {false, true}) {
    EXPECT_DOUBLE_EQ(attention_tiles_s(plan, {&first, &second}, cost, backward), attention_tiles_s(plan, {&whole}, cost, backward));
    const double merged = attention_merge_s(plan, {&first, &second}, cost, backward);
    EXPECT_LT(merged, 2 * attention_merge_s(plan, {&first}, cost, backward));
  }
  EXPECT_DOUBLE_EQ(attention_merge_s(plan, {&first, &second}, cost, false), attention_merge_s(plan, {&whole}, cost, false));
  // Whole layouts: 8 ranks, every sequence a multiple of 2·8 tokens.
  CpLayoutRequest r;
  r.cp = 8;
  r.seq_lengths = {4096, 1024, 16384, 512};
  r.mask = kCausal;
  r.heads_q = 32;
  r.heads_kv = 8;
  r.head_dim = 128;
  r.layout = "a2a";
  auto a2a = plan_cp_layout(r);
  r.layout = "a2a+p2p";
  r.a2a_size = 8;
  auto usp = plan_cp_layout(r);
  ASSERT_TRUE(a2a.ok() && usp.ok());
  for (AttentionPlan* p : {&*a2a, &*usp}) p->fused_stages = true;
  const AttentionSimResult x = sim(*a2a, cost, true), y = sim(*usp, cost, true);
  // The same pairs and rows; the grids differ where a2a+p2p's zigzag halves cut a sequence's
  // CTAs in two (about 1% here).
  EXPECT_NEAR(max_of(y.compute_s), max_of(x.compute_s), 0.02 * max_of(x.compute_s));
  EXPECT_NEAR(y.step_time_s, x.step_time_s, 0.02 * x.step_time_s);
}

TEST(AttentionSim, OneRankIsTheSumOfItsTiles) {
  const AttentionPlan plan = layout("single", 1, {3000, 1000, 517});
  const CostModel cost = preset_model("h100_dgx");
  double fwd = 0, bwd = 0;
  for (const auto& stage : plan.stages)
    for (const AttnTile& t : stage.tiles[0]) {
      // Each tile's kernel, then the merge of its partial result into the rank's accumulators.
      fwd += attention_tile_s(plan, t, cost, false) + attention_merge_s(plan, {&t}, cost, false);
      bwd += attention_tile_s(plan, t, cost, true) + attention_merge_s(plan, {&t}, cost, true);
    }
  ASSERT_GT(fwd, 0);
  const AttentionSimResult f = sim(plan, cost, false), fb = sim(plan, cost, true);
  EXPECT_DOUBLE_EQ(f.step_time_s, fwd);
  EXPECT_DOUBLE_EQ(fb.step_time_s, fwd + bwd);
  ASSERT_EQ(fb.compute_s.size(), 1u);
  EXPECT_DOUBLE_EQ(fb.compute_s[0], fwd + bwd);
  EXPECT_EQ(fb.wait_s, std::vector<double>{0.0});
  EXPECT_EQ(fb.bytes_sent, std::vector<double>{0.0});
}

// Ring on 2 ranks, full mask: every tile costs a (its kernel and its merge), every KV (and dKV)
// transfer c. Forward: stage 0
// tiles run while stage 1's KV is in flight, so a + max(a, c). Backward: KV of the other rank
// again (c), two tiles (2b), dKV home (c).
TEST(AttentionSim, TwoRankRingMatchesTheHandTimeline) {
  const AttentionPlan plan = layout("ring", 2, {8192}, kFull);
  // 100 GB/s: the transfer hides behind the tile (c < a); 1 GB/s: it does not (c > a).
  for (double nvlink_GBps : {100.0, 1.0}) {
    const CostModel cost = ideal_model(nvlink_GBps);
    const Link link = Link::nvlink;
    const AttnTile& tile = plan.stages[0].tiles[0][0];
    const double a = attention_tile_s(plan, tile, cost, false) + attention_merge_s(plan, {&tile}, cost, false);
    const double b = attention_tile_s(plan, tile, cost, true) + attention_merge_s(plan, {&tile}, cost, true);
    const AttnTransfer& kv = plan.stages[1].transfers[0];
    const double c = cost.p2p_s(transfer_bytes(plan, kv), link);
    ASSERT_GT(a, 0);
    ASSERT_GT(c, 0);
    const AttentionSimResult f = sim(plan, cost, false, link), fb = sim(plan, cost, true, link);
    const double fwd = a + std::max(a, c);
    EXPECT_NEAR(f.step_time_s, fwd, 1e-12 * fwd);
    EXPECT_NEAR(fb.step_time_s, fwd + 2 * c + 2 * b, 1e-12 * fwd);
    for (int r = 0; r < 2; ++r) {
      EXPECT_NEAR(f.compute_s[r], 2 * a, 1e-12 * a);
      EXPECT_NEAR(f.wait_s[r], std::max(0.0, c - a), 1e-12 * fwd);
      EXPECT_NEAR(fb.wait_s[r], std::max(0.0, c - a) + 2 * c, 1e-12 * fwd);
      EXPECT_DOUBLE_EQ(fb.bytes_sent[r], 3 * transfer_bytes(plan, kv));  // KV fwd, KV bwd, dKV
    }
  }
}

TEST(AttentionSim, RingIsBoundedByComputeAndByEachRanksLink) {
  const AttentionPlan plan = layout("ring", 4, {12288, 4096});
  const CostModel cost = preset_model("h100_dgx");
  for (Link link : {Link::nvlink, Link::network})
    for (bool backward : {false, true}) {
      const AttentionSimResult r = sim(plan, cost, backward, link);
      EXPECT_GE(r.step_time_s, max_of(r.compute_s));
      const RankBytes bytes = plan_bytes(plan, backward);
      EXPECT_EQ(r.bytes_sent, bytes.sent);
      std::vector<AttnTransfer> sends = forward_transfers(plan);
      if (backward) {
        const BackwardTransfers bt = backward_transfers(plan);
        sends.insert(sends.end(), bt.inputs.begin(), bt.inputs.end());
        sends.insert(sends.end(), bt.returns.begin(), bt.returns.end());
      }
      for (int32_t rank = 0; rank < plan.ranks; ++rank) {
        double link_s = 0;
        for (const AttnTransfer& t : sends)
          if (t.src == rank) link_s += cost.p2p_s(transfer_bytes(plan, t), link);
        EXPECT_GE(r.step_time_s, link_s) << "rank " << rank;
        // A rank is never idle outside a wait point, so it finishes at compute + wait; the last
        // rank to finish sets the step.
        EXPECT_GE(r.wait_s[rank], 0);
      }
      double last = 0;
      for (int32_t rank = 0; rank < plan.ranks; ++rank) last = std::max(last, r.compute_s[rank] + r.wait_s[rank]);
      EXPECT_NEAR(r.step_time_s, last, 1e-12 * last);
    }
}

TEST(AttentionSim, FreeTransfersLeaveTheBusiestRanksCompute) {
  const CostModel free_links = ideal_model(1e15);
  for (const char* name : {"ring", "zigzag"})
    for (const MaskSpec& mask : {kCausal, kFull})
      for (bool backward : {false, true}) {
        const AttentionPlan plan = layout(name, 4, {16384}, mask);
        const AttentionSimResult r = sim(plan, free_links, backward);
        EXPECT_NEAR(r.step_time_s, max_of(r.compute_s), 1e-9 * r.step_time_s) << name << " backward " << backward;
      }
}

TEST(AttentionSim, ZigzagBalancesCausalWorkAndBeatsContiguousRing) {
  const CostModel cost = preset_model("h100_dgx");
  for (bool backward : {false, true}) {
    const AttentionSimResult ring = sim(layout("ring", 4, {32768}), cost, backward);
    const AttentionSimResult zigzag = sim(layout("zigzag", 4, {32768}), cost, backward);
    EXPECT_LT(zigzag.step_time_s, ring.step_time_s);
    // Contiguous: the last rank does (2·cp − 1)/cp of the mean causal work, ~1.75× for cp = 4.
    const double mean_ring = (ring.compute_s[0] + ring.compute_s[1] + ring.compute_s[2] + ring.compute_s[3]) / 4;
    const double mean_zz = (zigzag.compute_s[0] + zigzag.compute_s[1] + zigzag.compute_s[2] + zigzag.compute_s[3]) / 4;
    EXPECT_GT(max_of(ring.compute_s) / mean_ring, 1.5);
    EXPECT_LT(max_of(zigzag.compute_s) / mean_zz, 1.05);
  }
}

TEST(AttentionSim, StepTimeGrowsWithSequenceLength) {
  const CostModel cost = preset_model("h100_dgx");
  for (const char* name : {"ring", "zigzag", "all_gather", "a2a"})
    for (bool backward : {false, true}) {
      double previous = 0;
      for (int64_t L : {2048, 4096, 8192, 16384, 32768}) {
        const double t = sim(layout(name, 4, {L}), cost, backward).step_time_s;
        EXPECT_GT(t, previous) << name << " L = " << L << " backward " << backward;
        previous = t;
      }
    }
}

TEST(AttentionSim, LoweringPutsTilesOnComputeAndSendsOnTheSendersLink) {
  const AttentionPlan plan = layout("ring", 4, {8192});
  auto g = lower_attention_plan(plan, ideal_model(), true);
  ASSERT_TRUE(g.ok()) << g.error_str();
  size_t sends = 0, tiles = 0;
  for (const TaskSpec& t : g->tasks()) {
    if (t.kind == 'm') {
      ++sends;
      EXPECT_EQ(t.stream, 1);
      EXPECT_EQ(t.link, t.device);
    } else if (t.kind == 'o') {  // a wait point's zero-length marker, off the compute stream
      EXPECT_EQ(t.duration_s, 0);
      EXPECT_EQ(t.stream, 2);
    } else {
      ++tiles;
      EXPECT_EQ(t.stream, 0);
      EXPECT_EQ(t.kind, 'c');
    }
  }
  const BackwardTransfers bt = backward_transfers(plan);
  EXPECT_EQ(sends, forward_transfers(plan).size() + bt.inputs.size() + bt.returns.size());
  size_t plan_tiles = 0;
  for (const auto& stage : plan.stages)
    for (const auto& rank_tiles : stage.tiles) plan_tiles += rank_tiles.size();
  EXPECT_EQ(tiles, 2 * plan_tiles);
  EXPECT_EQ(g->device_count(), 4);
}

TEST(AttentionSim, GpuModeBackwardRelaysRoundTheRingAndOverlaps) {
  // TransformerEngine's ring backward passes KV and the running dKV to the next rank step by step
  // under the kernels; the executor's three-phase backward fetches from the homes before and
  // returns after. The ring moves the whole forward again (K/V) plus as much dK/dV, to rank + 1.
  const AttentionPlan plan = layout("zigzag", 4, {16384});
  AttentionPlan gpu_plan = plan;  // as TransformerEngine runs it: fused stages, pipelined backward
  gpu_plan.fused_stages = true;
  gpu_plan.pipelined_backward = true;
  const CostModel cost = ideal_model(50);
  const BackwardTransfers bt = backward_transfers(plan);
  auto sends = [](const TaskGraph& g) {
    size_t n = 0;
    for (const TaskSpec& t : g.tasks()) n += t.kind == 'm';
    return n;
  };
  auto cpu = lower_attention_plan(plan, cost, true);
  auto gpu = lower_attention_plan(gpu_plan, cost, true, Link::nvlink);
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  EXPECT_EQ(sends(*cpu), forward_transfers(plan).size() + bt.inputs.size() + bt.returns.size());
  size_t relayed = 0;
  for (const AttnBackwardPhase& ph : backward_phases(gpu_plan))
    for (const AttnTransfer& t : ph.transfers) {
      EXPECT_EQ(t.dst, (t.src + 1) % 4);
      ++relayed;
    }
  // Fused stages send a phase's slices to one peer as one message: fewer messages, the same
  // bytes (no latency in the ideal model: the send time is the bytes).
  AttentionPlan per_slice = gpu_plan;
  per_slice.fused_stages = false;
  auto unfused = lower_attention_plan(per_slice, cost, true, Link::nvlink);
  ASSERT_TRUE(unfused.ok());
  EXPECT_EQ(sends(*unfused), forward_transfers(plan).size() + relayed);
  EXPECT_LT(sends(*gpu), sends(*unfused));
  auto send_time = [](const TaskGraph& g) {
    double s = 0;
    for (const TaskSpec& t : g.tasks()) s += t.kind == 'm' ? t.duration_s : 0;
    return s;
  };
  EXPECT_NEAR(send_time(*gpu), send_time(*unfused), 1e-12);
  const RankBytes fwd_bytes = plan_bytes(plan, false), all_bytes = plan_bytes(gpu_plan, true);
  for (int32_t r = 0; r < 4; ++r) EXPECT_DOUBLE_EQ(all_bytes.sent[r], 3 * fwd_bytes.sent[r]);
  auto fwd_cpu = simulate_attention_plan(plan, cost, false);
  auto bwd_cpu = simulate_attention_plan(plan, cost, true);
  auto fwd_gpu = simulate_attention_plan(gpu_plan, cost, false, Link::nvlink);
  auto bwd_gpu = simulate_attention_plan(gpu_plan, cost, true, Link::nvlink);
  ASSERT_TRUE(fwd_cpu.ok() && bwd_cpu.ok() && fwd_gpu.ok() && bwd_gpu.ok());
  // One sequence: the fused and per-tile kernels cost the same up to launch overheads, so the
  // difference in backward time is the overlap of the backward transfers.
  const double cpu_bwd = bwd_cpu->step_time_s - fwd_cpu->step_time_s;
  const double gpu_bwd = bwd_gpu->step_time_s - fwd_gpu->step_time_s;
  EXPECT_LT(gpu_bwd, 0.9 * cpu_bwd);
  // Still waits for something: the first step's inputs and the last step's returns stay exposed.
  EXPECT_GT(bwd_gpu->step_time_s - *std::max_element(bwd_gpu->compute_s.begin(), bwd_gpu->compute_s.end()), 0);
}

TEST(AttentionSim, WritesATraceWithOneProcessPerRank) {
  const auto path = std::filesystem::temp_directory_path() / "cpbench_attention_sim_trace.json";
  std::filesystem::remove(path);
  auto r = simulate_attention_plan(layout("ring", 2, {4096}), ideal_model(), true, Link::nvlink, path);
  ASSERT_TRUE(r.ok()) << r.error_str();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("\"rank 1\""), std::string::npos);
  EXPECT_NE(text.str().find("s1 kv 0->1"), std::string::npos);
  EXPECT_NE(text.str().find("bwd p3 dkv"), std::string::npos);  // the ring's dK/dV ends home after stage 1's tiles
  std::filesystem::remove(path);
}

// TransformerEngine's THD a2a+p2p reorders every sequence in a Python loop the GPU waits for
// (core/layouts/cp_layouts.h apply_te_a2a_sequence_loop): the backward's loops sit before its first phase
// and add exactly their host time; the forward's run beside the all-to-all, so they add at most
// theirs, and all of it once it outlasts the whole first phase.
TEST(AttentionSim, TheRuntimesPerSequenceHostWorkIsExposed) {
  AttentionPlan plan = layout("a2a+p2p", 8, {1024, 2048, 512, 4096});
  plan.fused_stages = true;
  plan.pipelined_backward = true;
  ClusterSpec c = test_cluster();
  EfficiencyParams e = EfficiencyParams::ideal();
  e.host_op_us = 5;
  const CostModel cost(c, e);
  const AttentionSimResult fwd0 = sim(plan, cost, false), both0 = sim(plan, cost, true);
  ParallelConfig fork;
  apply_te_a2a_sequence_loop(plan, fork);  // the switch off: nothing
  EXPECT_EQ(plan.host_ops_per_sequence_fwd, 0);
  fork.te_a2a_sequence_loop = true;
  apply_te_a2a_sequence_loop(plan, fork);
  EXPECT_EQ(plan.host_ops_per_sequence_fwd, 12);
  EXPECT_EQ(plan.host_ops_per_sequence_bwd, 20);
  const AttentionSimResult fwd = sim(plan, cost, false), both = sim(plan, cost, true);
  const double host_fwd = 4 * 12 * 5e-6, host_bwd = 4 * 20 * 5e-6;
  EXPECT_GT(fwd.step_time_s, fwd0.step_time_s);
  EXPECT_LE(fwd.step_time_s - fwd0.step_time_s, host_fwd + 1e-12);
  EXPECT_NEAR((both.step_time_s - fwd.step_time_s) - (both0.step_time_s - fwd0.step_time_s), host_bwd, 1e-12);
  // No kernel runs longer: the host work is waiting, not compute.
  EXPECT_DOUBLE_EQ(max_of(both.compute_s), max_of(both0.compute_s));
  // Host work longer than the first phase (the all-to-all) is exposed whole.
  e.host_op_us = 1e4;
  const CostModel slow_host(c, e);
  plan.host_ops_per_sequence_fwd = 0;
  const double base = sim(plan, slow_host, false).step_time_s;
  plan.host_ops_per_sequence_fwd = 12;
  const double phase0 = sim(plan, slow_host, false).step_time_s;
  EXPECT_GT(phase0 - base, 4 * 12 * 1e-2 * 0.99);
  EXPECT_LE(phase0 - base, 4 * 12 * 1e-2 + 1e-12);
  // Training's TE a2a+p2p plans carry it when the spec runs the fork (te_a2a_sequence_loop); the
  // ring layouts never.
  PlanMicroBatch mb;
  mb.cp = 8;
  mb.lengths = {1024, 2048};
  ModelShape m;
  m.hidden = 4096;
  m.heads = 32;
  m.kv_heads = 8;
  ParallelConfig pc;
  pc.cp = 8;
  pc.cp_comm_type = "a2a+p2p";
  auto upstream = plan_micro_batch_attention(mb, m, pc, kCausal);
  ASSERT_TRUE(upstream.ok()) << upstream.error_str();
  EXPECT_EQ(upstream->host_ops_per_sequence_fwd, 0);  // only with the fork's loop switched on
  pc.te_a2a_sequence_loop = true;
  auto te = plan_micro_batch_attention(mb, m, pc, kCausal);
  ASSERT_TRUE(te.ok()) << te.error_str();
  EXPECT_EQ(te->host_ops_per_sequence_fwd, 12);
  pc.cp_comm_type = "p2p";
  auto ring = plan_micro_batch_attention(mb, m, pc, kCausal);
  ASSERT_TRUE(ring.ok()) << ring.error_str();
  EXPECT_EQ(ring->host_ops_per_sequence_fwd, 0);
  EXPECT_EQ(ring->host_ops_per_sequence_bwd, 0);
}

TEST(AttentionSim, MalformedPlansAreErrors) {
  AttentionPlan plan = layout("ring", 2, {4096});
  plan.stages[1].transfers[0].dst = 5;
  auto r = simulate_attention_plan(plan, ideal_model(), false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_str().find("stage 1: transfer 0 -> 5 names a rank outside [0, 2)"), std::string::npos)
      << r.error_str();
  plan = layout("ring", 2, {4096});
  plan.stages[0].tiles[1][0].q.seq = 3;
  r = simulate_attention_plan(plan, ideal_model(), false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_str().find("stage 0 tile q: slice seq3"), std::string::npos) << r.error_str();
  // An explicit backward is read the same way.
  plan = layout("ring", 2, {4096});
  plan.backward = backward_phases(plan);
  ASSERT_TRUE(simulate_attention_plan(plan, ideal_model(), true).ok());
  plan.backward.back().transfers[0].src = -1;
  r = simulate_attention_plan(plan, ideal_model(), true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_str().find("backward phase " + std::to_string(plan.backward.size() - 1) + ": transfer -1 ->"),
            std::string::npos)
      << r.error_str();
}

// Topology: a transfer between two ranks of one node is priced on NVLink, across nodes on the
// network; a group split over two nodes costs between all-NVLink and all-network.
TEST(AttentionSim, EachTransferIsPricedByItsEndpointsNodes) {
  const AttentionPlan plan = layout("all_gather", 4, {8192});
  const CostModel cost = ideal_model(50);
  auto one_node = simulate_attention_plan(plan, cost, true, std::vector<int>{0, 0, 0, 0});
  auto two_nodes = simulate_attention_plan(plan, cost, true, std::vector<int>{0, 0, 1, 1});
  auto apart = simulate_attention_plan(plan, cost, true, std::vector<int>{0, 1, 2, 3});
  ASSERT_TRUE(one_node.ok() && two_nodes.ok() && apart.ok());
  EXPECT_LT(one_node->step_time_s, two_nodes->step_time_s);
  EXPECT_LE(two_nodes->step_time_s, apart->step_time_s);
  // The Link overloads are the uniform maps.
  auto nvlink = simulate_attention_plan(plan, cost, true, Link::nvlink);
  auto network = simulate_attention_plan(plan, cost, true, Link::network);
  EXPECT_EQ(nvlink->step_time_s, one_node->step_time_s);
  EXPECT_EQ(network->step_time_s, apart->step_time_s);
  // A node map of the wrong size is an error, not a guess.
  EXPECT_FALSE(simulate_attention_plan(plan, cost, true, std::vector<int>{0, 0}).ok());
}


// A plan of 4 ranks, each home to a quarter of one 4096-token sequence (8 heads, d 128, bf16),
// without stages: tests add the transfers they price.
AttentionPlan four_quarters() {
  AttentionPlan p;
  p.layout = "hand";
  p.ranks = 4;
  p.seq_lengths = {4096};
  p.heads_q = p.heads_kv = 8;
  p.head_dim = 128;
  p.value_bytes = 2;
  for (int32_t r = 0; r < 4; ++r) p.home.push_back({{0, r * 1024, (r + 1) * 1024, 0, 8}});
  return p;
}

// `p` with one stage of `transfers` and no tiles.
AttentionPlan with_one_stage(const AttentionPlan& p, std::vector<AttnTransfer> transfers) {
  AttentionPlan q = p;
  q.stages.push_back({std::move(transfers), std::vector<std::vector<AttnTile>>(p.ranks)});
  return q;
}

// Two GPUs of one node send across the network at once: with one NIC per node they queue on it,
// each at the NIC's whole rate; with a NIC each they run side by side; alone, one takes the NIC.
// A group on half a node's GPUs gets half its NICs.
TEST(AttentionSim, TheGpusOfANodeShareItsNics) {
  const AttentionPlan p = four_quarters();
  auto plan_with = [&](std::vector<AttnTransfer> transfers) { return with_one_stage(p, std::move(transfers)); };
  const AttnTransfer a{0, 2, AttnTensor::kv, p.home[0][0]}, b{1, 3, AttnTensor::kv, p.home[1][0]};
  const std::vector<int> nodes{0, 0, 1, 1};
  auto step = [&](int nics, const AttentionPlan& plan, int gpus_per_node = 2) {
    ClusterSpec c = test_cluster();
    c.gpus_per_node = gpus_per_node;
    c.nics_per_node = nics;
    c.nic_bandwidth_Gbps_per_gpu = c.nic_bandwidth_Gbps * nics / 2;
    auto r = simulate_attention_plan(plan, CostModel(c, EfficiencyParams::ideal()), false, nodes);
    EXPECT_TRUE(r.ok()) << r.error_str();
    return r.ok() ? r->step_time_s : 0.0;
  };
  const double t = CostModel(test_cluster(), EfficiencyParams::ideal()).nic_p2p_s(transfer_bytes(p, a));
  ASSERT_GT(t, 0);
  EXPECT_DOUBLE_EQ(step(1, plan_with({a})), t);  // alone: the whole NIC, not half of it
  EXPECT_DOUBLE_EQ(step(1, plan_with({a, b})), 2 * t);
  EXPECT_DOUBLE_EQ(step(2, plan_with({a, b})), t);
  // The group holds 2 of a node's 4 GPUs (a CP group's TP peers hold the others and mirror its
  // traffic): it gets half the node's NIC, so one transfer alone takes twice as long.
  const double half = CostModel(test_cluster(), EfficiencyParams::ideal()).nic_p2p_s(2 * transfer_bytes(p, a));
  EXPECT_DOUBLE_EQ(step(1, plan_with({a}), 4), half);
  EXPECT_DOUBLE_EQ(step(1, plan_with({a, b}), 4), 2 * half);
}

// One flow cannot fill an EFA NIC (network_p2p_efficiency below network_nic_efficiency): a
// transfer alone lasts its one-flow time; two GPUs' transfers on one NIC share it at the NIC's
// rate in sum, so together they take less than two one-flow times; and a rate per flow at the
// NIC's own changes nothing.
TEST(AttentionSim, OneFlowIsSlowerThanWhatItsNicCarries) {
  const AttentionPlan p = four_quarters();
  auto plan_with = [&](std::vector<AttnTransfer> transfers) { return with_one_stage(p, std::move(transfers)); };
  const AttnTransfer a{0, 2, AttnTensor::kv, p.home[0][0]}, b{1, 3, AttnTensor::kv, p.home[1][0]};
  ClusterSpec c = test_cluster();
  c.gpus_per_node = 2;
  c.nics_per_node = 1;
  c.nic_bandwidth_Gbps_per_gpu = c.nic_bandwidth_Gbps / 2;
  EfficiencyParams e = EfficiencyParams::ideal();
  e.network_p2p_efficiency = 0.4;
  e.network_nic_efficiency = 0.6;
  const CostModel cost(c, e);
  const double bytes = transfer_bytes(p, a);
  const double flow = cost.nic_flow_p2p_s(bytes), nic = cost.nic_p2p_s(bytes);
  EXPECT_NEAR(flow / nic, 0.6 / 0.4, 1e-9);
  auto step = [&](const AttentionPlan& plan) {
    auto r = simulate_attention_plan(plan, cost, false, std::vector<int>{0, 0, 1, 1});
    EXPECT_TRUE(r.ok()) << r.error_str();
    return r.ok() ? r->step_time_s : 0.0;
  };
  EXPECT_NEAR(step(plan_with({a})), flow, 1e-12);
  // The second holds the NIC after the first's NIC time and ends its own flow time later.
  EXPECT_NEAR(step(plan_with({a, b})), nic + flow, 1e-12);
  EXPECT_LT(step(plan_with({a, b})), 2 * flow);
  // Equal rates: no tail, both queue at the NIC's rate as before.
  e.network_p2p_efficiency = 0.6;
  const CostModel even(c, e);
  auto r = simulate_attention_plan(plan_with({a, b}), even, false, std::vector<int>{0, 0, 1, 1});
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->step_time_s, 2 * even.nic_p2p_s(bytes), 1e-12);
  // A flow is never faster than its NIC: a per-flow rate above the NIC's is the NIC's.
  e.network_p2p_efficiency = 0.9;
  EXPECT_DOUBLE_EQ(CostModel(c, e).nic_flow_p2p_s(bytes), CostModel(c, e).nic_p2p_s(bytes));
}

// Two-phase communication: a relay forwards what its sender receives in the same stage, so it
// starts when that transfer ends — a network hop, then an NVLink hop — not beside it.
TEST(AttentionSim, ARelayLeavesWhenWhatItForwardsHasArrived) {
  const AttentionPlan p = four_quarters();
  const AttnTransfer hop{0, 2, AttnTensor::kv, p.home[0][0]}, relay{2, 3, AttnTensor::kv, p.home[0][0], true};
  AttentionPlan plan = p;
  plan.stages.push_back({{hop, relay}, std::vector<std::vector<AttnTile>>(4)});
  // (No tiles: the checker's only complaints are the uncomputed pairs, none about the transfers.)
  const std::string ok = check_attention_plan(plan);
  EXPECT_EQ(ok.find("relays"), std::string::npos) << ok;
  EXPECT_EQ(ok.find("sends"), std::string::npos) << ok;
  const CostModel cost(test_cluster(), EfficiencyParams::ideal());
  auto r = simulate_attention_plan(plan, cost, false, std::vector<int>{0, 0, 1, 1});
  ASSERT_TRUE(r.ok()) << r.error_str();
  const double bytes = transfer_bytes(p, hop);
  EXPECT_NEAR(r->step_time_s, cost.nic_p2p_s(bytes) + cost.p2p_s(bytes, Link::nvlink), 1e-12);
  // The same two transfers without the relay flag run side by side (rank 2 forwarding what it
  // does not hold is then a plan error).
  AttentionPlan wrong = plan;
  wrong.stages[0].transfers[1].relay = false;
  EXPECT_NE(check_attention_plan(wrong).find("sends kv of"), std::string::npos);
  // A relay of something its sender does not receive in the stage is refused.
  AttentionPlan orphan = p;
  orphan.stages.push_back({{relay}, std::vector<std::vector<AttnTile>>(4)});
  EXPECT_NE(check_attention_plan(orphan).find("relays kv of"), std::string::npos);
}

// collective_exchange (DCP's executor: each exchange an NCCL all-to-all over every rank): a send
// between ranks 2 and 3 waits for rank 0, which posts it only after its long tile, and for the
// all-to-all's latency; as point-to-point sends it runs at once, beside that tile. The outputs'
// return is two all-to-alls (O in the value dtype, LSE in fp32), each on every rank.
TEST(AttentionSim, AnAllToAllExchangeWaitsForEveryRankAndItsLatency) {
  AttentionPlan plan = four_quarters();
  plan.seq_lengths = {16384};
  for (int32_t r = 0; r < 4; ++r) plan.home[r] = {{0, r * 4096, (r + 1) * 4096, 0, 8}};
  const AttnSlice own0 = plan.home[0][0], own2 = plan.home[2][0], own3 = plan.home[3][0];
  std::vector<std::vector<AttnTile>> stage0(4), stage2(4);
  stage0[0].assign(4, {own0, own0});                           // rank 0: long work first
  stage2[3] = {{{0, 3 * 4096, 3 * 4096 + 128, 0, 8}, own2}};  // rank 3: 128 rows on rank 2's keys
  plan.stages.push_back({{}, stage0});
  plan.stages.push_back({{}, std::vector<std::vector<AttnTile>>(4)});
  plan.stages.push_back({{{2, 3, AttnTensor::kv, own2}}, stage2});  // posted after stage 0's tiles
  EfficiencyParams e = EfficiencyParams::ideal();
  e.network_step_latency_us = 14;
  e.network_ll_step_latency_us = 2.7;
  e.nvlink_step_latency_us = 3.4;
  e.nvlink_ll_step_latency_us = 0.47;
  const CostModel cost(test_cluster(), e);
  const std::vector<int> nodes{0, 0, 1, 1};
  auto step = [&](const AttentionPlan& p) {
    auto r = simulate_attention_plan(p, cost, false, nodes);
    EXPECT_TRUE(r.ok()) << r.error_str();
    return r.ok() ? r->step_time_s : 0.0;
  };
  std::vector<const AttnTile*> work0;
  for (const AttnTile& t : plan.stages[0].tiles[0]) work0.push_back(&t);
  const double tile0 = attention_tiles_s(plan, work0, cost, false) + attention_merge_s(plan, work0, cost, false);
  AttentionPlan without_tile0 = plan;
  without_tile0.stages[0].tiles[0].clear();
  plan.fused_stages = without_tile0.fused_stages = true;
  const double chain = step(without_tile0);  // rank 3's transfer and tile alone
  ASSERT_GT(tile0, chain);
  EXPECT_NEAR(step(plan), tile0, 1e-12);  // point to point: beside rank 0's tile
  plan.collective_exchange = without_tile0.collective_exchange = true;
  // Ranks 2 and 3 pay a step per peer: Simple's on NVLink to each other (megabytes), the
  // network's LL to ranks 0 and 1 on the other node (nothing to send: a zero-byte send/recv,
  // which NCCL still runs).
  ASSERT_GT(transfer_bytes(plan, plan.stages[2].transfers[0]), CostModel::kP2pLLThresholdBytes);
  // The message then pays its wire time only: its own Simple step (3.4 µs, in `chain`) is the
  // all-to-all's step to rank 2.
  const double latency = 3.4e-6 + 2 * 2.7e-6;
  const double own_step = 3.4e-6;
  EXPECT_NEAR(step(without_tile0), chain - own_step + latency, 1e-12);
  EXPECT_NEAR(step(plan), tile0 + latency + chain - own_step, 1e-12);  // after rank 0 posted it
  // Every rank takes part in every all-to-all: one kv exchange, then O and its LSE. Rank 3 sends
  // rank 2 two partial O of 512 tokens × 8 heads in one message: 16 KiB of LSE each, 32 KiB
  // together, so the LSE all-to-all runs Simple between them (3.4 µs on NVLink), LL elsewhere.
  plan.gather_out = {{3, 2, AttnTensor::out, {0, 3 * 4096, 3 * 4096 + 512, 0, 8}},
                     {3, 2, AttnTensor::out, {0, 3 * 4096 + 512, 3 * 4096 + 1024, 0, 8}}};
  ASSERT_EQ(4.0 * 512 * 8, CostModel::kP2pLLThresholdBytes);
  auto graph = lower_attention_plan(plan, cost, false, Link::nvlink);
  ASSERT_TRUE(graph.ok()) << graph.error_str();
  int latencies = 0, lse = 0;
  for (const TaskSpec& t : graph->tasks())
    if (t.name.find("all-to-all") != std::string::npos) {
      ++latencies;
      lse += t.name.find("(4-byte") != std::string::npos;
      EXPECT_EQ(t.stream, 4);
      EXPECT_GE(t.collective, 0);
    }
  EXPECT_EQ(latencies, 3 * 4);
  EXPECT_EQ(lse, 4);
  auto lse_latency = [&](int rank) {
    auto g = lower_attention_plan(plan, cost, false, Link::nvlink);  // every rank on one node
    for (const TaskSpec& t : g->tasks())
      if (t.device == rank && t.name.find("gather all-to-all (4-byte") != std::string::npos) return t.duration_s;
    return -1.0;
  };
  EXPECT_NEAR(lse_latency(3), 3.4e-6 + 2 * 0.47e-6, 1e-15);
  EXPECT_NEAR(lse_latency(0), 3 * 0.47e-6, 1e-15);
}

// The EFA stack's small all-to-all against the published one: nccl-tests alltoall_perf on 2
// p4d.24xlarge (16 ranks) takes 100-117 µs from 1 KB to 64 KB per rank (bottlerocket-kernel-kit
// pull requests 313 and 424; experiments/stacks/fa2_efa_a100.json derives its network LL latency
// from it). One tiny exchange inside a node, as a 16-rank all-to-all on 2 nodes of 8.
TEST(AttentionSim, EfaSmallAllToAllIsThePublishedOne) {
  AttentionPlan plan;
  plan.layout = "hand";
  plan.ranks = 16;
  plan.seq_lengths = {16 * 64};
  plan.heads_q = plan.heads_kv = 1;
  plan.head_dim = 8;
  plan.value_bytes = 2;
  plan.fused_stages = true;
  plan.collective_exchange = true;
  for (int32_t r = 0; r < 16; ++r) plan.home.push_back({{0, r * 64, (r + 1) * 64, 0, 1}});
  plan.stages.push_back({{{0, 1, AttnTensor::kv, plan.home[0][0]}}, std::vector<std::vector<AttnTile>>(16)});
  ASSERT_LE(transfer_bytes(plan, plan.stages[0].transfers[0]), CostModel::kP2pLLThresholdBytes);
  std::vector<int> nodes(16);
  for (int32_t r = 0; r < 16; ++r) nodes[r] = r / 8;
  auto r = simulate_attention_plan(plan, preset_model("a100_40gb_p4d"), false, nodes);
  ASSERT_TRUE(r.ok()) << r.error_str();
  EXPECT_GE(r->step_time_s, 100e-6);
  EXPECT_LE(r->step_time_s, 117e-6);
}

// The same source at the sizes DCP's stages move (bottlerocket-kernel-kit pull requests 313 and
// 424: nccl-tests alltoall_perf, 2 p4d.24xlarge, 16 ranks, out of place): 128 KB per rank in
// 129-130 µs, 256 KB in 154-161, 512 KB in 204-213, 1 MB in 303. An all-to-all's messages pay
// their wire time after its per-peer steps, no latency of their own (CostModel::p2p_wire_s);
// each GPU's network messages queue on its NIC, two GPUs to a NIC, at the one-flow rate.
TEST(AttentionSim, EfaMediumAllToAllIsThePublishedOne) {
  const std::vector<std::pair<int64_t, std::vector<double>>> published = {
      {131072, {129.31e-6, 129.90e-6}}, {262144, {161.17e-6, 153.52e-6}},
      {524288, {212.76e-6, 203.60e-6}}, {1048576, {303.15e-6}}};
  for (const auto& [per_rank, times] : published) {
    const int64_t tokens = per_rank / 16 / 32;  // 32 bytes per K/V token: head dim 8, 1 KV head, K and V, bf16
    AttentionPlan plan;
    plan.layout = "hand";
    plan.ranks = 16;
    plan.seq_lengths = {16 * 16 * tokens};
    plan.heads_q = plan.heads_kv = 1;
    plan.head_dim = 8;
    plan.value_bytes = 2;
    plan.fused_stages = true;
    plan.collective_exchange = true;
    std::vector<AttnTransfer> sends;
    for (int32_t r = 0; r < 16; ++r) {
      plan.home.push_back({{0, r * 16 * tokens, (r + 1) * 16 * tokens, 0, 1}});
      for (int32_t p = 0; p < 16; ++p)
        if (p != r) sends.push_back({r, p, AttnTensor::kv, {0, (r * 16 + p) * tokens, (r * 16 + p + 1) * tokens, 0, 1}});
    }
    ASSERT_EQ(transfer_bytes(plan, sends[0]), per_rank / 16.0);
    plan.stages.push_back({sends, std::vector<std::vector<AttnTile>>(16)});
    std::vector<int> nodes(16);
    for (int32_t r = 0; r < 16; ++r) nodes[r] = r / 8;
    auto res = simulate_attention_plan(plan, preset_model("a100_40gb_p4d"), false, nodes);
    ASSERT_TRUE(res.ok()) << res.error_str();
    for (double t : times) EXPECT_NEAR(res->step_time_s, t, 0.12 * t) << per_rank << " bytes per rank";
  }
}

}  // namespace
}  // namespace cpbench
