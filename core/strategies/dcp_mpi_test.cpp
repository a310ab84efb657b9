// dcp_mpi_test.cpp — DCP's blockwise placement (mpirun -np 4: Zoltan needs MPI, and the plans are
// executed on the ranks): km1 of small hypergraphs by hand; the refinement pass enforces the
// balance Zoltan's single weight cannot; Zoltan's partition beats a blind one and is the same on
// every rank; every DCP plan is well formed, moves exactly its km1 in bytes, keeps memory
// balanced, and — executed for every mask, forward and backward — matches the single-device
// reference with each rank moving the bytes the plan says.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <set>
#include <tuple>

#include "core/experiment/registry.h"
#include "core/runtime/executor_test_util.h"
#include "core/runtime/mpi_test_environment.h"
#include "core/strategies/dcp.h"
#include "core/strategies/dcp_test_cases.h"
#include "core/strategies/hypergraph.h"
#include "core/strategies/strategy_test_util.h"
#include "core/strategies/packing.h"

namespace cpbench {
namespace {

[[maybe_unused]] auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new MpiEnvironment(std::chrono::seconds(120)));

MpiCommunicator& world() { return MpiEnvironment::world(); }


TEST(Hypergraph, Km1CountsEachNetsExtraParts) {
  Hypergraph h;
  h.memory = {1, 1, 1, 1};
  h.compute = {0, 0, 0, 0};
  h.add_net({0, 1, 2}, 5);
  h.add_net({2, 3}, 2);
  EXPECT_EQ(km1(h, {0, 0, 0, 0}), 0);
  EXPECT_EQ(km1(h, {0, 1, 1, 0}), 5 * 1 + 2 * 1);
  EXPECT_EQ(km1(h, {0, 1, 2, 2}), 5 * 2);
}

TEST(Hypergraph, RefinementEnforcesBothBalancesAndStopsWhenBalanced) {
  // 8 memory vertices and 8 compute vertices, all on part 0 of 4: both dimensions overloaded.
  Hypergraph h;
  for (int i = 0; i < 16; ++i) {
    h.memory.push_back(i < 8 ? 1 : 0);
    h.compute.push_back(i < 8 ? 0 : 1);
  }
  for (int i = 0; i < 8; ++i) h.add_net({i, 8 + i}, 1);
  std::vector<int32_t> part(16, 0);
  const BalanceLimits limits{4, 0.0, 0.0};
  ASSERT_FALSE(balanced(h, part, limits));
  EXPECT_GT(refine_balance(h, part, limits), 0);
  EXPECT_TRUE(balanced(h, part, limits));
  // Cheapest moves first: a memory vertex follows the compute vertex of its net when it can, so
  // the cut stays at most one per net and no worse than moving blindly.
  EXPECT_LE(km1(h, part), 8);
  EXPECT_EQ(refine_balance(h, part, limits), 0);  // nothing left to do
}

// A hypergraph shaped like DCP's: data vertices with memory, computation vertices with compute,
// nets joining each data vertex to the computations that read it.
Hypergraph block_like(int blocks) {
  Hypergraph h;
  for (int b = 0; b < blocks; ++b) {
    h.memory.push_back(1 + b % 3);
    h.compute.push_back(0);
  }
  std::vector<std::vector<int32_t>> readers(blocks);
  for (int q = 0; q < blocks; ++q)
    for (int k = std::max(0, q - 6); k <= q; ++k) {  // a causal band
      const int32_t v = static_cast<int32_t>(h.memory.size());
      h.memory.push_back(0);
      h.compute.push_back(k == q ? 0.5 : 1.0);
      readers[q].push_back(v);
      if (k != q) readers[k].push_back(v);
    }
  for (int b = 0; b < blocks; ++b) {
    std::vector<int32_t> pins{b};
    pins.insert(pins.end(), readers[b].begin(), readers[b].end());
    h.add_net(pins, 10);
  }
  return h;
}

TEST(Hypergraph, ZoltanPartitionIsBalancedBetterThanBlindAndTheSameOnEveryRank) {
  const Hypergraph h = block_like(64);
  const BalanceLimits limits{4, 0.2, 0.1};
  auto part = partition_hypergraph(h, limits);
  ASSERT_TRUE(part.ok()) << part.error_str();
  EXPECT_TRUE(balanced(h, *part, limits));
  std::vector<int32_t> blind(h.vertices());
  for (int32_t v = 0; v < h.vertices(); ++v) blind[v] = v % 4;
  EXPECT_LT(km1(h, *part), km1(h, blind) / 2);
  auto again = partition_hypergraph(h, limits);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *part);  // deterministic
  // The same placement on every rank: the element-wise max and min over the ranks are its own.
  std::vector<double> hi(part->begin(), part->end()), lo(hi.size());
  for (size_t i = 0; i < hi.size(); ++i) lo[i] = -hi[i];
  const std::vector<double> mine = hi;
  ASSERT_TRUE(world().all_reduce(std::span<double>(hi), ReduceOp::kMax).ok());
  ASSERT_TRUE(world().all_reduce(std::span<double>(lo), ReduceOp::kMax).ok());
  for (size_t i = 0; i < mine.size(); ++i) {
    ASSERT_EQ(hi[i], mine[i]) << "vertex " << i << ": ranks planned different placements";
    ASSERT_EQ(-lo[i], mine[i]) << "vertex " << i << ": ranks planned different placements";
  }
}

TEST(Dcp, PlansAreWellFormedMoveTheirKm1AndBalanceMemory) {
  const CostModel cost = ideal_cost();
  for (const DcpCase& c : dcp_cases())
    for (auto [ranks, gpn, divisions] : {std::tuple{4, 2, 4}, std::tuple{4, 4, 1}, std::tuple{8, 4, 3}}) {
      const DcpRequest r = dcp_request(c, ranks, gpn, divisions);
      auto d = plan_dcp(r, cost);
      ASSERT_TRUE(d.ok()) << c.name << ": " << d.error_str();
      ASSERT_EQ(check_attention_plan(d->plan), "") << c.name << " ranks " << ranks;
      EXPECT_EQ(d->plan.stages.size(), static_cast<size_t>(divisions) + 1);  // a local stage 0 in front
      // Stage 0 needs no transfer: its blocks read only what is home.
      EXPECT_TRUE(d->plan.stages[0].transfers.empty()) << c.name;
      // The placement's km1 is the bytes the plan moves, forward and backward.
      const RankBytes b = plan_bytes(d->plan, true);
      const double sent = std::accumulate(b.sent.begin(), b.sent.end(), 0.0);
      EXPECT_NEAR(sent, d->km1_bytes, 1e-6 * d->km1_bytes + 1) << c.name << " ranks " << ranks;
      // Memory (home tokens, counted in whole-head units: a head block holds its share of a
      // token) within the tolerance, or the mean plus one block.
      int64_t total = 0;
      for (int64_t L : c.lengths) total += L;
      for (const auto& home : d->plan.home) {
        double tokens = 0;
        for (const AttnSlice& s : home) tokens += static_cast<double>(s.tokens()) * s.heads() / r.heads_q;
        EXPECT_LE(tokens, std::max((1 + r.eps_mem) * total / ranks, static_cast<double>(total) / ranks + r.block_tokens))
            << c.name << " ranks " << ranks;
      }
    }
}

// Blocks too coarse to balance (three token blocks of 8192, all heads in one block, on 4 GPUs in
// 2 nodes: one GPU holds nothing, and the longer sequence's full off-diagonal tile alone is 1.6× the
// mean compute): the plan is still made and well formed, moves its km1, and reports how far from
// the mean its fullest GPU is; with fine blocks the same batch meets the tolerances.
TEST(Dcp, CoarseBlocksStillPlanAndSayHowBalancedTheyAre) {
  const CostModel cost = ideal_cost();
  DcpCase c{"causal", MaskSpec{MaskKind::causal}, {16384, 8192}};
  DcpRequest r = dcp_request(c, 4, 2, 3);
  r.block_tokens = 8192;
  r.head_blocks = 1;
  auto coarse = plan_dcp(r, cost);
  ASSERT_TRUE(coarse.ok()) << coarse.error_str();
  EXPECT_EQ(check_attention_plan(coarse->plan), "");
  const RankBytes b = plan_bytes(coarse->plan, true);
  EXPECT_NEAR(std::accumulate(b.sent.begin(), b.sent.end(), 0.0), coarse->km1_bytes, 1e-6 * coarse->km1_bytes + 1);
  const double compute_bound = (1 + 4 * r.eps_comp) * (1 + r.eps_comp);
  EXPECT_NEAR(coarse->memory_over_mean, 4.0 / 3, 1e-9);  // three equal blocks on four GPUs
  EXPECT_GT(coarse->compute_over_mean, compute_bound);
  r.block_tokens = 512;
  r.head_blocks = 0;
  auto fine = plan_dcp(r, cost);
  ASSERT_TRUE(fine.ok());
  EXPECT_LE(fine->memory_over_mean, 1 + r.eps_mem + 1e-9);
  EXPECT_LE(fine->compute_over_mean, compute_bound + 1e-9);
  EXPECT_LT(fine->compute_over_mean, coarse->compute_over_mean);
}

TEST(Dcp, HeadBlocksSplitEveryTokenBlockByKvGroups) {
  const CostModel cost = ideal_cost();
  DcpRequest r = dcp_request(dcp_cases()[1], 4, 2, 3);  // causal; 8 query heads, 4 K/V groups
  for (auto [head_blocks, per_block] : {std::pair{1, 8}, std::pair{2, 4}, std::pair{0, 2}}) {
    r.head_blocks = head_blocks;
    auto d = plan_dcp(r, cost);
    ASSERT_TRUE(d.ok()) << d.error_str();
    int64_t token_blocks = 0;
    for (int64_t L : r.seq_lengths) token_blocks += (L + r.block_tokens - 1) / r.block_tokens;
    EXPECT_EQ(d->data_blocks, token_blocks * 8 / per_block) << head_blocks;
    for (const auto& home : d->plan.home)
      for (const AttnSlice& s : home) EXPECT_EQ(s.heads(), per_block) << head_blocks;
  }
  r.head_blocks = 3;  // does not divide 4 K/V groups
  EXPECT_NE(plan_dcp(r, cost).error_str().find("head_blocks = 3 must divide heads_kv = 4"), std::string::npos);
}

// Two-phase communication as DCP's pipeline generator does it: an input that several GPUs of a
// node fetch from one sender in a stage crosses the network once (to one of them, which relays it)
// or is copied from a GPU of the node that received it earlier; every relay forwards what its
// sender receives in the same stage. Prefetch: spare budget brings inputs of a rank's later blocks
// early, and every input a rank receives is read by one of its blocks then or later.
TEST(Dcp, InputsCrossIntoANodeOncePerSenderAndStageAndArePrefetched) {
  const CostModel cost = ideal_cost();
  int64_t relays = 0, prefetched = 0;
  for (const DcpCase& c : dcp_cases())
    for (auto [ranks, gpn] : {std::pair{4, 2}, std::pair{8, 4}})
      for (int divisions : {1, 4})
        for (int head_blocks : {1, 0}) {
          DcpRequest r = dcp_request(c, ranks, gpn, divisions);
          r.head_blocks = head_blocks;
          auto d = plan_dcp(r, cost);
          ASSERT_TRUE(d.ok()) << d.error_str();
          const AttentionPlan& p = d->plan;
          EXPECT_EQ(check_attention_plan(p), "") << c.name;
          for (size_t s = 0; s < p.stages.size(); ++s) {
            const AttnStage& st = p.stages[s];
            // (slice, tensor, sender, dst node)
            std::set<std::tuple<int32_t, int64_t, int32_t, AttnTensor, int32_t, int32_t>> crossings;
            for (const AttnTransfer& t : st.transfers) {
              if (t.tensor != AttnTensor::q && t.tensor != AttnTensor::kv) continue;
              const int32_t from = t.src / gpn, to = t.dst / gpn;
              if (t.relay) {
                ++relays;
                EXPECT_EQ(from, to) << c.name << ": a relay stays inside its node";
              }
              auto reads = [&](size_t k) {
                return std::any_of(p.stages[k].tiles[t.dst].begin(), p.stages[k].tiles[t.dst].end(), [&](const AttnTile& x) {
                  return (t.tensor == AttnTensor::q ? x.q : x.kv) == t.slice;
                });
              };
              bool later = false;
              for (size_t k = s; k < p.stages.size(); ++k) later = later || reads(k);
              EXPECT_TRUE(later) << c.name << ": rank " << t.dst << " receives " << attn_tensor_name(t.tensor)
                                 << " in stage " << s << " that none of its blocks reads";
              prefetched += !reads(s);
              if (from == to) continue;
              EXPECT_TRUE(
                  crossings.insert({t.slice.seq, t.slice.tok_begin, t.slice.head_begin, t.tensor, t.src, to}).second)
                  << c.name << ": " << attn_tensor_name(t.tensor) << " crosses from rank " << t.src << " into node "
                  << to << " twice in a stage";
            }
          }
        }
  EXPECT_GT(relays, 0);
  EXPECT_GT(prefetched, 0) << "no input was fetched ahead of the stage that reads it";
}

// The backward keeps the forward's placement and is scheduled on its own (references/dcp.md,
// step 6): every rank runs the backward of exactly its forward tiles, the divisions are chosen
// with the backward's inputs (Q with dO, O and LSE weigh three times Q), and each rank's gradient
// partials of blocks away from home go straight home once: after the last stage (DCP's executor),
// or with early_outputs as soon as the rank's last tile on the block has run.
TEST(Dcp, TheBackwardIsScheduledOnTheForwardsPlacementWithItsOwnBudgets) {
  const CostModel cost = ideal_cost();
  int64_t plans = 0, rescheduled = 0, early_gradients = 0;
  for (const DcpCase& c : dcp_cases())
    for (auto [ranks, gpn] : {std::pair{4, 2}, std::pair{8, 4}})
      for (int divisions : {1, 4})
      for (int head_blocks : {1, 0})
      for (bool early : {false, true}) {
        DcpRequest r = dcp_request(c, ranks, gpn, divisions);
        r.head_blocks = head_blocks;
        r.early_outputs = early;
        auto d = plan_dcp(r, cost);
        ASSERT_TRUE(d.ok()) << d.error_str();
        const AttentionPlan& p = d->plan;
        ASSERT_FALSE(p.backward.empty());
        ASSERT_EQ(check_attention_plan(p), "") << c.name;
        auto sorted_tiles = [&](const std::vector<std::vector<std::vector<AttnTile>>>& stages) {
          std::vector<std::vector<std::tuple<int32_t, int64_t, int64_t, int32_t>>> out(p.ranks);
          for (const auto& tiles : stages)
            for (size_t rank = 0; rank < tiles.size(); ++rank)
              for (const AttnTile& t : tiles[rank]) out[rank].emplace_back(t.q.seq, t.q.tok_begin, t.kv.tok_begin, t.q.head_begin);
          for (auto& v : out) std::sort(v.begin(), v.end());
          return out;
        };
        std::vector<std::vector<std::vector<AttnTile>>> fwd, bwd;
        for (const AttnStage& st : p.stages) fwd.push_back(st.tiles);
        for (const AttnBackwardPhase& ph : p.backward)
          if (!ph.tiles.empty()) bwd.push_back(ph.tiles);
        EXPECT_EQ(sorted_tiles(bwd), sorted_tiles(fwd)) << c.name << ": the backward keeps the placement";
        rescheduled += bwd != fwd;
        std::set<std::tuple<int32_t, int32_t, int64_t, int32_t, AttnTensor>> sent;  // (rank, slice, tensor)
        for (size_t i = 0; i < p.backward.size(); ++i)
          for (const AttnTransfer& t : p.backward[i].transfers) {
            if (t.tensor != AttnTensor::dq && t.tensor != AttnTensor::dkv) continue;
            if (!early) EXPECT_EQ(i + 1, p.backward.size()) << c.name << ": gradients leave after the last stage";
            early_gradients += i + 1 < p.backward.size();
            EXPECT_EQ(home_of(p, t.slice), t.dst) << c.name << ": a partial goes straight home";
            EXPECT_TRUE(sent.insert({t.src, t.slice.seq, t.slice.tok_begin, t.slice.head_begin, t.tensor}).second)
                << c.name << ": rank " << t.src << " sends a " << attn_tensor_name(t.tensor) << " partial twice";
          }
        ++plans;
      }
  EXPECT_GT(rescheduled, 0) << "no backward differs from the forward's divisions of " << plans << " plans";
  EXPECT_GT(early_gradients, 0) << "early_outputs sent no gradient partial before the last stage";
}

// DCP end to end (§7.2's layout: TP 4 inside 8-GPU nodes, CP 16 across): the packing's micro-batch
// keeps its sequences, unpadded, and its CP group's attention is DCP's plan for one TP rank's heads
// with two group members per node; the fullest rank's tokens (its linear layers) stay within the
// memory tolerance; on a batch of short sequences DCP keeps them near home and moves fewer bytes
// over the network than TransformerEngine's a2a+p2p, and the iteration is no slower.
TEST(Dcp, TrainingIterationsPlaceEachGroupsAttentionWithDcp) {
  const auto dir = default_experiments_dir();
  const ClusterSpec cluster = *load_hardware(dir / "hardware" / "a100_80gb_p4de.json");
  const ModelShape model = *load_model(dir / "models" / "llama3_8b_dcp.json");
  ParallelConfig layout;
  layout.num_gpus = 64;
  layout.tp = 4;
  layout.cp = 16;
  layout.cp_comm_type = "a2a+p2p";
  layout.max_seqlen_per_dp_cp_rank = 1024;
  layout.recompute = "full";
  layout.distributed_optimizer = true;
  layout.dcp_block_tokens = 512;
  GlobalBatch batch;
  batch.lengths = {3000, 2500, 2000, 1700, 1500, 1200, 1000, 900, 700, 500, 400, 300, 200, 100};
  batch.mask = MaskSpec{MaskKind::causal};
  const StrategyInput in{cluster, model, layout, batch};
  const int64_t tokens = std::accumulate(in.batch.lengths.begin(), in.batch.lengths.end(), int64_t{0});

  const PlanOutcome dcp = plan_dcp_training(in);
  ASSERT_EQ(dcp.status, "ok") << dcp.reason;
  ASSERT_EQ(dcp.plan.micro_batches.size(), 16u);
  const PlanMicroBatch& mb = dcp.plan.micro_batches[0][0];
  EXPECT_EQ(mb.lengths, in.batch.lengths);
  EXPECT_EQ(mb.pad_to, 1);
  ASSERT_TRUE(mb.attention);
  EXPECT_EQ(mb.attention->layout, "dcp");
  EXPECT_EQ(mb.attention->ranks, 16);
  EXPECT_EQ(mb.attention->heads_q, 8);
  EXPECT_EQ(mb.attention->heads_kv, 2);
  EXPECT_EQ(check_attention_plan(*mb.attention), "");
  for (const auto& rank : dcp.plan.micro_batches) EXPECT_EQ(rank[0].attention, mb.attention);
  const double mean = static_cast<double>(tokens) / 16;
  EXPECT_GE(mb.rank_tokens(), static_cast<int64_t>(std::ceil(mean)));
  EXPECT_LE(mb.rank_tokens(), std::max(1.2 * mean, mean + 512) + 1);

  const Evaluation d = plan_and_evaluate(plan_dcp_training, in, "megatron");
  const Evaluation te = plan_and_evaluate(plan_packing, in, "megatron");
  ASSERT_EQ(d.status, "ok") << d.reason;
  ASSERT_EQ(te.status, "ok") << te.reason;
  EXPECT_LT(d.metrics.at("cp_comm_bytes_network"), 0.5 * te.metrics.at("cp_comm_bytes_network"));
  EXPECT_LE(d.metrics.at("step_time_s"), te.metrics.at("step_time_s"));
}

TEST(Dcp, BlockSizeHeuristicHalvesUntilBlocksBalance) {
  // One 4096-token sequence on 4 ranks: 4096 does not split; 1024-token blocks balance exactly.
  EXPECT_EQ(dcp_block_size({4096}, 4, 0.2), 1024);
  // Many equal short sequences balance at the first size.
  EXPECT_EQ(dcp_block_size(std::vector<int64_t>(16, 300), 4, 0.2), 512);
  EXPECT_EQ(dcp_block_size({100}, 8, 0.2), 256);  // never below 256
}

// On 2, 4 and 8 ranks (as many as the job has; sub-communicators of the world), each group two
// simulated nodes: every mask, 1 and 4 divisions, 1, 2 and 4 head blocks; the exchange as DCP's
// executor runs it (all-to-alls: a message to and from every peer per round, relays in a round of
// their own) and, with two head blocks, as point-to-point sends.
TEST(Dcp, ExecutedPlansMatchTheReferenceAndMoveThePlannedBytes) {
  MpiCommunicator& w = world();
  ASSERT_TRUE(w.size() == 4 || w.size() == 8) << "run under mpirun -np 4 or -np 8";
  const CostModel cost = ideal_cost();
  int64_t early_outputs = 0, relays = 0, collective = 0, point_to_point = 0;
  for (int32_t ranks : {2, 4, 8}) {
    if (ranks > w.size()) continue;
    auto sub = w.split(w.rank() / ranks, w.rank());
    ASSERT_TRUE(sub.ok()) << sub.error_str();
    Communicator& comm = **sub;
    ASSERT_EQ(comm.size(), ranks);
    for_each_executed_dcp_request(ranks, [&](const DcpRequest& r, const std::string& label) {
      auto d = plan_dcp(r, cost);
      ASSERT_TRUE(d.ok()) << d.error_str();
      ASSERT_EQ(d->plan.collective_exchange, r.all_to_all);
      (r.all_to_all ? collective : point_to_point) += 1;
      for (const AttnStage& st : d->plan.stages)
        for (const AttnTransfer& t : st.transfers) {
          early_outputs += t.tensor == AttnTensor::out;
          relays += t.relay;
        }
      expect_runs_as_planned(d->plan, comm, 7, label);
    });
  }
  EXPECT_GT(early_outputs, 0) << "no plan sent a partial output inside the stages";
  EXPECT_GT(relays, 0) << "no plan relayed an input inside a node (two-phase communication)";
  EXPECT_GT(collective, 0);
  EXPECT_GT(point_to_point, 0);
}

}  // namespace
}  // namespace cpbench
