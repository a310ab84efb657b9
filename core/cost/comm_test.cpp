// comm_test.cpp — point-to-point and collective costs: the nccl-tests ring formulas exactly with
// ideal constants, NCCL's tuning model's latency for rings across nodes, groups spanning nodes
// limited by their NICs, tree/LL win for small messages, bus bandwidth of the shipped presets
// against published nccl-tests figures, monotone in bytes.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/cost/cost_model.h"
#include "core/cost/cost_test_util.h"

namespace cpbench {
namespace {

constexpr double kBytes = 1 << 30;
constexpr double kNvlink_Bps = 100e9, kNetwork_Bps = 25e9;

TEST(P2p, IdealIsBytesOverTheLinkRate) {
  const CostModel model(test_cluster(), EfficiencyParams::ideal());
  EXPECT_DOUBLE_EQ(model.p2p_s(kBytes, Link::nvlink), kBytes / kNvlink_Bps);
  EXPECT_DOUBLE_EQ(model.p2p_s(kBytes, Link::network), kBytes / kNetwork_Bps);
  EXPECT_DOUBLE_EQ(model.p2p_s(kBytes, Link::pcie), kBytes / 32e9);
  EXPECT_EQ(model.p2p_s(0, Link::network), 0);
}

TEST(P2p, LatencyPlusBytesOverEfficientBandwidth) {
  const CostModel model = preset_model("a100_80gb_dgx");
  const EfficiencyParams& p = model.params();
  // Large: Simple protocol. Tiny: LL, whose latency is lower.
  EXPECT_DOUBLE_EQ(model.p2p_s(kBytes, Link::network),
                   p.network_step_latency_us * 1e-6 + kBytes / (25e9 * p.network_p2p_efficiency));
  EXPECT_DOUBLE_EQ(model.p2p_s(8, Link::nvlink),
                   p.nvlink_ll_step_latency_us * 1e-6 + 8 / (0.5 * 300e9 * p.nvlink_busbw_efficiency));
  EXPECT_DOUBLE_EQ(model.p2p_s(kBytes, Link::pcie),
                   p.pcie_latency_us * 1e-6 + kBytes / (32e9 * p.pcie_efficiency));
}

TEST(Collective, IdealRingFormulasOnOneNode) {
  const CostModel model(test_cluster(), EfficiencyParams::ideal());
  for (int64_t n : {2, 4, 8}) {
    const GroupPlacement g{n, 8};
    const double ring = double(n - 1) / n * kBytes / kNvlink_Bps;
    EXPECT_DOUBLE_EQ(model.collective_s(Collective::all_reduce, kBytes, g), 2 * ring) << n;
    EXPECT_DOUBLE_EQ(model.collective_s(Collective::all_gather, kBytes, g), ring) << n;
    EXPECT_DOUBLE_EQ(model.collective_s(Collective::reduce_scatter, kBytes, g), ring) << n;
    EXPECT_DOUBLE_EQ(model.collective_s(Collective::all_to_all, kBytes, g), ring) << n;
    EXPECT_DOUBLE_EQ(model.collective_s(Collective::broadcast, kBytes, g), kBytes / kNvlink_Bps);
  }
}

TEST(Collective, SizeOneIsFree) {
  const CostModel model = preset_model("a100_80gb_dgx");
  for (auto kind : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                    Collective::all_to_all, Collective::broadcast})
    EXPECT_EQ(model.collective_s(kind, kBytes, {1, 8}), 0);
}

TEST(Collective, IdealAcrossNodesTakesTheFastestAlgorithm) {
  const CostModel model(test_cluster(), EfficiencyParams::ideal());
  // 2 nodes × 8: NCCL's ring crosses each node boundary on 8 NICs (8 × 25 = 200 GB/s), so
  // NVLink (100 GB/s) stays the bottleneck: 2(n−1)/n·S / 100 GB/s.
  EXPECT_DOUBLE_EQ(model.collective_s(Collective::all_reduce, kBytes, {16, 8}),
                   2.0 * 15 / 16 * kBytes / kNvlink_Bps);
  // One rank per node: every hop is a 25 GB/s NIC.
  EXPECT_DOUBLE_EQ(model.collective_s(Collective::all_reduce, kBytes, {4, 1}),
                   2.0 * 3 / 4 * kBytes / kNetwork_Bps);
  EXPECT_DOUBLE_EQ(model.collective_s(Collective::all_gather, kBytes, {4, 1}),
                   3.0 / 4 * kBytes / kNetwork_Bps);
  // all-to-all: the off-node 12/16 of the buffer over this rank's own NIC dominates.
  EXPECT_DOUBLE_EQ(model.collective_s(Collective::all_to_all, kBytes, {16, 4}),
                   12.0 / 16 * kBytes / kNetwork_Bps);
}

// A send/recv's step latency is its protocol's, as NCCL picks it per operation: LL up to
// NCCL_P2P_LL_THRESHOLD (16 KiB; a zero-byte one too), Simple above.
TEST(PointToPoint, LatencyIsTheProtocolNcclPicksForTheMessage) {
  const CostModel model = preset_model("a100_80gb_p4de");
  const EfficiencyParams& p = model.params();
  for (double bytes : {0.0, 64.0, 16384.0}) {
    EXPECT_DOUBLE_EQ(model.p2p_latency_s(bytes, Link::network), p.network_ll_step_latency_us * 1e-6) << bytes;
    EXPECT_DOUBLE_EQ(model.p2p_latency_s(bytes, Link::nvlink), p.nvlink_ll_step_latency_us * 1e-6) << bytes;
  }
  for (double bytes : {16385.0, 4e6}) {
    EXPECT_DOUBLE_EQ(model.p2p_latency_s(bytes, Link::network), p.network_step_latency_us * 1e-6) << bytes;
    EXPECT_DOUBLE_EQ(model.p2p_latency_s(bytes, Link::nvlink), p.nvlink_step_latency_us * 1e-6) << bytes;
  }
  EXPECT_LT(model.p2p_latency_s(0, Link::network), model.p2p_latency_s(4e6, Link::network));
}

// A group that spans nodes crosses them on the NICs: 8 ranks per node put 8 NICs on each boundary,
// one rank per node one NIC, so the same 64 ranks are several times slower spread one per node;
// and a node's 8 GPUs on NVLink beat the same collective over two nodes.
TEST(Collective, GroupsSpanningNodesAreLimitedByTheirNics) {
  for (const char* name : {"a100_80gb_dgx", "h100_dgx", "a100_40gb_p4d"}) {
    const CostModel model = preset_model(name);
    const ClusterSpec& c = model.cluster();
    for (auto kind : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter}) {
      EXPECT_LT(model.collective_s(kind, kBytes, {64, 8}), 0.5 * model.collective_s(kind, kBytes, {64, 1})) << name;
      // Large messages: bus bandwidth per rank at most the node's NICs shared by its 8 ranks.
      const double steps = kind == Collective::all_reduce ? 2.0 * 63 / 64 : 63.0 / 64;
      const double busbw = steps * 4 * kBytes / model.collective_s(kind, 4 * kBytes, {64, 8});
      EXPECT_LE(busbw, c.network_bandwidth_GBps_per_node() * 1e9 * model.params().network_busbw_efficiency * 1.0001)
          << name << " " << int(kind);
    }
    EXPECT_LT(model.collective_s(Collective::all_reduce, kBytes, {8, 8}),
              model.collective_s(Collective::all_reduce, kBytes, {16, 8}));
  }
}

// NCCL's tuning model for a ring across N nodes of r ranks: its base latency, then of its steps the inter-node ones
// (N − 1 for all-gather and reduce-scatter) wait the network latency and the others the larger of
// NVLink's and the network post overhead (×3 under Simple). So a small all-gather's time grows
// with the ranks, not only the nodes: 1024 ranks pay 1023 steps where a hierarchical scheme would
// pay about N + r. Exact with the H100 stack's constants at 8 bytes (LL) and 1 GiB (Simple).
TEST(Collective, RingAcrossNodesPaysNcclsStepLatencies) {
  const CostModel model = preset_model("h100_dgx");
  const EfficiencyParams& p = model.params();
  for (double nodes : {2.0, 16.0, 128.0}) {
    const double n = 8 * nodes;
    const GroupPlacement g{static_cast<int64_t>(n), 8};
    const double ll_intra = std::max(p.nvlink_ll_step_latency_us, p.network_post_overhead_us) * 1e-6;
    const double simple_intra = std::max(p.nvlink_step_latency_us, 3 * p.network_post_overhead_us) * 1e-6;
    // Each collective also pays NCCL's base latency once.
    const double ll_latency = p.nccl_ll_base_latency_us * 1e-6 + (n - nodes) * ll_intra +
                              (nodes - 1) * p.network_ll_step_latency_us * 1e-6;
    const double simple_latency = p.nccl_base_latency_us * 1e-6 + (n - nodes) * simple_intra +
                                  (nodes - 1) * p.network_step_latency_us * 1e-6;
    const double ring_bw = std::min(model.cluster().nvlink_bandwidth_GBps() * 1e9 * p.nvlink_busbw_efficiency,
                                    8 * model.cluster().network_bandwidth_GBps_per_gpu() * 1e9 * p.network_busbw_efficiency);
    // NCCL takes the faster protocol: LL at half the bandwidth, Simple at the higher latency.
    for (double bytes : {8.0, kBytes}) {
      const double ll = ll_latency + (n - 1) / n * bytes / (0.5 * ring_bw);
      const double simple = simple_latency + (n - 1) / n * bytes / ring_bw;
      EXPECT_NEAR(model.collective_s(Collective::all_gather, bytes, g), std::min(ll, simple), 1e-12) << nodes << " " << bytes;
    }
  }
  // Latency grows with the ranks: at 128 nodes the small all-gather costs over 1000 intra-node steps.
  EXPECT_GT(model.collective_s(Collective::all_gather, 8, {1024, 8}), 1000 * p.nvlink_ll_step_latency_us * 1e-6);
}

// Large messages against published nccl-tests bus bandwidths. DGX A100 (8 × HDR 200 Gb/s; the SC'21
// stack): Azure NDmv4, the same node, NCCL 2.17.1 (microsoft/mscclpp docs/performance-ndmv4.md):
// all_reduce 1 GiB on one node 231.45 GB/s; on two nodes all_gather 4 GiB 186.01 and all_reduce
// 4 GiB 188.18. DGX H100 (8 × NDR 400 Gb/s; the H100 stack): NVIDIA's 46–48 GB/s per NIC
// (nccl-tests issue #290), 368–384 GB/s per node, on two nodes; beyond, the ring's latency steps
// grow with the ranks and the bus bandwidth falls with the node count, as users report it
// (NVIDIA/nccl #1229: reduce_scatter about 360, 345, 320, 300, 280, 260 GB/s at 4–128 nodes, the
// size not given; cpbench at 4 GiB: 356, 351, 343, 327, 299, 256; docs/simulator.md).
TEST(Collective, PresetBusBandwidthMatchesPublishedNcclTests) {
  const CostModel dgx = preset_model("a100_80gb_dgx");
  auto busbw = [](const CostModel& m, Collective kind, double bytes, const GroupPlacement& g) {
    const double n = double(g.size), steps = kind == Collective::all_reduce ? 2 * (n - 1) / n : (n - 1) / n;
    return bytes / m.collective_s(kind, bytes, g) * steps / 1e9;
  };
  EXPECT_NEAR(busbw(dgx, Collective::all_reduce, kBytes, {8, 8}), 231.45, 0.05 * 231.45);
  EXPECT_NEAR(busbw(dgx, Collective::all_gather, 4 * kBytes, {16, 8}), 186.01, 0.05 * 186.01);
  EXPECT_NEAR(busbw(dgx, Collective::all_reduce, 4 * kBytes, {16, 8}), 188.18, 0.05 * 188.18);
  const CostModel h100 = preset_model("h100_dgx");
  const double two_nodes = busbw(h100, Collective::all_gather, 4 * kBytes, {16, 8});
  EXPECT_GT(two_nodes, 0.97 * 368);
  EXPECT_LT(two_nodes, 1.03 * 384);
  double fewer = two_nodes;
  for (int64_t nodes : {4, 8, 16, 32, 64, 128}) {
    const double bw = busbw(h100, Collective::reduce_scatter, 4 * kBytes, {8 * nodes, 8});
    EXPECT_LT(bw, fewer) << nodes;
    fewer = bw;
  }
  // Bus bandwidth falls at small sizes (latency-bound), rising with size.
  double previous = 0;
  for (double bytes = 1024; bytes <= 4 * kBytes; bytes *= 4) {
    const double b = busbw(dgx, Collective::all_reduce, bytes, {8, 8});
    EXPECT_GT(b, previous) << bytes;
    previous = b;
  }
  EXPECT_LT(busbw(dgx, Collective::all_reduce, 1 << 20, {8, 8}), 0.7 * 230);
}

TEST(Collective, SmallMessagesUseLowLatencyProtocolAndTree) {
  const CostModel dgx = preset_model("a100_80gb_dgx");
  const EfficiencyParams& p = dgx.params();
  // 8 ranks, 1 KiB: 14 ring steps at the LL latency, well under 14 Simple steps.
  const double t = dgx.collective_s(Collective::all_reduce, 1024, {8, 8});
  EXPECT_LT(t, 14 * p.nvlink_step_latency_us * 1e-6);
  EXPECT_GE(t, 14 * p.nvlink_ll_step_latency_us * 1e-6);
  // 1024 ranks on 128 nodes: a ring pays 2·1023 steps; the tree pays 2·log2(128) network steps.
  const double big = dgx.collective_s(Collective::all_reduce, 1024, {1024, 8});
  EXPECT_LT(big, 0.2 * 2 * 1023 * p.network_ll_step_latency_us * 1e-6);
}

// NCCL's tree chain inside a node waits NVLink's latency alone: the network post overhead is the
// ring's (tuning.cc adds it to the ring's intra-node steps only). A small all-reduce across 128
// nodes, where the tree wins, costs the same whatever the post overhead, and at least its
// latencies: the base, 2·log2(N) network steps and 2·(r − 1) NVLink steps under LL.
TEST(Collective, TreeChainInsideANodeWaitsNvlinkOnly) {
  const CostModel h100 = preset_model("h100_dgx");
  EfficiencyParams slow_post = h100.params();
  slow_post.network_post_overhead_us = 20;
  const CostModel slow(h100.cluster(), slow_post);
  const GroupPlacement g{1024, 8};
  const double t = h100.collective_s(Collective::all_reduce, 1024, g);
  EXPECT_DOUBLE_EQ(slow.collective_s(Collective::all_reduce, 1024, g), t);
  const EfficiencyParams& p = h100.params();
  const double latencies = (p.nccl_ll_base_latency_us + 2 * 7 * p.network_ll_step_latency_us + 2 * 7 * p.nvlink_ll_step_latency_us) * 1e-6;
  EXPECT_GE(t, latencies);
  EXPECT_LT(t, latencies + 5e-6);
  // The ring's intra-node steps do wait it: an all-gather over those nodes (no tree) slows.
  EXPECT_GT(slow.collective_s(Collective::all_gather, 1024, g), h100.collective_s(Collective::all_gather, 1024, g));
}

TEST(Collective, MonotoneInBytes) {
  const CostModel model = preset_model("h800_kwai");
  for (auto kind : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                    Collective::all_to_all, Collective::broadcast}) {
    for (GroupPlacement g : {GroupPlacement{2, 8}, GroupPlacement{8, 8}, GroupPlacement{32, 8},
                             GroupPlacement{32, 2}, GroupPlacement{256, 1}}) {
      double previous = 0;
      for (double bytes = 1; bytes < 1e11; bytes *= 1.9) {
        const double t = model.collective_s(kind, bytes, g);
        EXPECT_GT(t, previous) << int(kind) << " " << g.size << " " << bytes;
        previous = t;
      }
    }
  }
  for (Link link : {Link::nvlink, Link::network, Link::pcie}) {
    double previous = 0;
    for (double bytes = 1; bytes < 1e11; bytes *= 1.9) {
      EXPECT_GT(model.p2p_s(bytes, link), previous);
      previous = model.p2p_s(bytes, link);
    }
  }
}

}  // namespace
}  // namespace cpbench
