// comm.cpp — CostModel::p2p_s, nic_p2p_s and collective_s: α-β costs of NCCL's algorithms.
// n = group size, r = ranks per node, N = nodes; S = bytes per rank (nccl-tests convention).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cost/cost_model.h"

namespace cpbench {

namespace {

// NCCL's protocols. Simple moves data at the link's bus bandwidth with the highest latency;
// LL packs 4 bytes of data with a 4-byte flag in each 8-byte store, so it carries half the
// bandwidth at the lowest latency (NCCL docs, NCCL_PROTO; src/device/prims_ll.h).
enum class Protocol { simple, ll };
constexpr double kLLBandwidthFraction = 0.5;

// One phase of an algorithm: `steps` sequential steps on `link`, each waiting one step latency,
// and `wire_bytes` per rank through a bottleneck of `bandwidth_Bps` (already scaled by the
// Simple-protocol bus efficiency).
struct Phase {
  double steps;
  double wire_bytes;
  double bandwidth_Bps;
  double latency_s;  // per step, of the protocol in use
};

double phases_s(const std::vector<Phase>& phases, Protocol proto) {
  const double fraction = proto == Protocol::ll ? kLLBandwidthFraction : 1.0;
  double t = 0;
  for (const Phase& p : phases) t += p.steps * p.latency_s + p.wire_bytes / (p.bandwidth_Bps * fraction);
  return t;
}

}  // namespace

double CostModel::p2p_s(double bytes, Link link) const {
  if (bytes <= 0) return 0;
  switch (link) {
    case Link::pcie: return step_latency_s(link, false) + bytes / p2p_bandwidth_Bps(link);
    case Link::nvlink:
    case Link::network: {
      const double bw = p2p_bandwidth_Bps(link);
      return std::min(phases_s({{1, bytes, bw, step_latency_s(link, false)}}, Protocol::simple),
                      phases_s({{1, bytes, bw, step_latency_s(link, true)}}, Protocol::ll));
    }
  }
  return 0;
}

double CostModel::network_p2p_s(double bytes, double bw) const {
  if (bytes <= 0) return 0;
  return std::min(phases_s({{1, bytes, bw, step_latency_s(Link::network, false)}}, Protocol::simple),
                  phases_s({{1, bytes, bw, step_latency_s(Link::network, true)}}, Protocol::ll));
}

double CostModel::nic_p2p_s(double bytes) const { return network_p2p_s(bytes, nic_bandwidth_Bps(false)); }

double CostModel::nic_flow_p2p_s(double bytes) const { return network_p2p_s(bytes, nic_bandwidth_Bps(true)); }

// NCCL's tuning model (src/graph/tuning.cc, ncclTopoTuneModel) for the ring and the tree: a ring
// of n ranks takes nsteps steps, nInter of them across nodes at the network's latency and the rest
// inside nodes, where a multi-node ring waits at least the network post overhead (×3 under Simple)
// however fast NVLink is; the tree (all-reduce across nodes) pays 2·((r−1) intra-node + log2 N
// network) steps. NCCL has no hierarchical all-gather or reduce-scatter: a group spanning nodes
// runs them as one ring through every rank.
double CostModel::collective_s(Collective kind, double bytes, const GroupPlacement& group) const {
  const double n = double(std::max<int64_t>(1, group.size));
  if (n <= 1 || bytes <= 0) return 0;
  const double r = double(std::clamp<int64_t>(group.ranks_per_node, 1, group.size));
  const double nodes = std::ceil(n / r);
  const EfficiencyParams& e = params_;
  const double nv_bw = cluster_.nvlink_bandwidth_GBps() * 1e9 * e.nvlink_busbw_efficiency;
  const double net_bw =
      cluster_.network_bandwidth_GBps_per_gpu() * 1e9 * e.network_busbw_efficiency;
  const double S = bytes;

  double best = std::numeric_limits<double>::infinity();
  for (Protocol proto : {Protocol::simple, Protocol::ll}) {
    const bool ll = proto == Protocol::ll;
    const double net_lat = (ll ? e.network_ll_step_latency_us : e.network_step_latency_us) * 1e-6;
    const double nv_lat = (ll ? e.nvlink_ll_step_latency_us : e.nvlink_step_latency_us) * 1e-6;
    const double intra_lat = nodes > 1 ? std::max(nv_lat, (ll ? 1 : 3) * e.network_post_overhead_us * 1e-6) : nv_lat;
    // Once per ring or tree collective (NCCL's baseLatencies; the tree's own, which differ by
    // NCCL version by up to 8.4 µs, are taken as the ring's).
    const Phase base{1, 0, 1, (ll ? e.nccl_ll_base_latency_us : e.nccl_base_latency_us) * 1e-6};
    // The ring through all n ranks. Across nodes it runs one channel per NIC, so a node boundary
    // carries r NICs' worth; the slowest hop sets the bandwidth.
    const double ring_bw = nodes > 1 ? std::min(nv_bw, r * net_bw) : nv_bw;
    auto ring = [&](double steps, double inter_steps) {
      return std::vector<Phase>{base, {steps - inter_steps, 0, ring_bw, intra_lat},
                                {inter_steps, steps / n * S, ring_bw, net_lat}};
    };
    std::vector<std::vector<Phase>> algorithms;
    switch (kind) {
      case Collective::all_reduce:
        // Ring: reduce-scatter then all-gather, 2(n−1) steps of S/n.
        algorithms.push_back(ring(2 * (n - 1), nodes > 1 ? 2 * (nodes - 1) : 0));
        if (nodes > 1) {
          // NCCL's double binary tree over nodes, a chain inside each node: log-depth latency,
          // about 2·S through each node's links (reduce up, broadcast down). The chain waits
          // NVLink's latency only: NCCL adds the network post overhead to the ring's intra-node
          // steps, not the tree's (tuning.cc).
          const double depth = std::floor(std::log2(nodes));
          algorithms.push_back({base, {2 * depth, 0, ring_bw, net_lat}, {2 * (r - 1), 2 * S, ring_bw, nv_lat}});
        }
        break;
      case Collective::all_gather:
      case Collective::reduce_scatter:
        algorithms.push_back(ring(n - 1, nodes - 1));
        break;
      case Collective::broadcast:
        // Pipelined ring (chain): S crosses every link once, n−1 hops of latency.
        algorithms.push_back({base, {n - 1, S, ring_bw, nodes > 1 ? net_lat : nv_lat}});
        break;
      case Collective::all_to_all: {
        // S/n to every peer, all at once: the on-node part over NVLink and the off-node part
        // over this rank's NIC proceed concurrently; n−1 sends each pay a step latency.
        const double nv_s = (r - 1) / n * S / nv_bw;
        const double net_s = nodes > 1 ? (n - r) / n * S / net_bw : 0;
        const double fraction = ll ? kLLBandwidthFraction : 1.0;
        best = std::min(best, (n - 1) * (nodes > 1 ? net_lat : nv_lat) + std::max(nv_s, net_s) / fraction);
        break;
      }
    }
    for (const auto& phases : algorithms) best = std::min(best, phases_s(phases, proto));
  }
  return best;
}

double CostModel::step_latency_s(Link link, bool ll) const {
  const EfficiencyParams& e = params_;
  switch (link) {
    case Link::nvlink: return (ll ? e.nvlink_ll_step_latency_us : e.nvlink_step_latency_us) * 1e-6;
    case Link::network: return (ll ? e.network_ll_step_latency_us : e.network_step_latency_us) * 1e-6;
    case Link::pcie: return e.pcie_latency_us * 1e-6;
  }
  return 0;
}

double CostModel::p2p_bandwidth_Bps(Link link) const {
  switch (link) {
    case Link::nvlink: return cluster_.nvlink_bandwidth_GBps() * 1e9 * params_.nvlink_busbw_efficiency;
    case Link::network: return cluster_.network_bandwidth_GBps_per_gpu() * 1e9 * params_.network_p2p_efficiency;
    case Link::pcie: return cluster_.pcie_bandwidth_GBps() * 1e9 * params_.pcie_efficiency;
  }
  return 0;
}

double CostModel::nic_bandwidth_Bps(bool one_flow) const {
  const double nic = params_.network_nic_efficiency;
  return cluster_.nic_bandwidth_Gbps / 8 * 1e9 * (one_flow ? std::min(params_.network_p2p_efficiency, nic) : nic);
}

double CostModel::p2p_wire_s(double bytes, Link link) const { return bytes <= 0 ? 0 : bytes / p2p_bandwidth_Bps(link); }

double CostModel::nic_wire_s(double bytes) const { return bytes <= 0 ? 0 : bytes / nic_bandwidth_Bps(false); }

double CostModel::nic_flow_wire_s(double bytes) const { return bytes <= 0 ? 0 : bytes / nic_bandwidth_Bps(true); }

double CostModel::p2p_latency_s(double bytes, Link link) const {
  return step_latency_s(link, bytes <= kP2pLLThresholdBytes);
}

}  // namespace cpbench
