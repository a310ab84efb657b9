// cost_model.h — seconds for the ops of a training iteration on one hardware preset: GEMM,
// flash attention, memory-bound kernels, point-to-point transfers and NCCL-like collectives.
// Requires: a ClusterSpec whose "efficiency" object parses (efficiency.h); build with
// CostModel::create (errors name file and pointer) or the constructor and check status().
// Note: one model per preset serves every experiment (DESIGN.md contract 1). Mechanisms, not
// fitted curves: roofline, tile/wave quantization, SFU exponentials, α-β rings with NCCL's
// LL/Simple protocols, hierarchical and tree algorithms; the constants are the preset's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/common/expected.h"
#include "core/cost/efficiency.h"
#include "core/hardware/hardware.h"

namespace cpbench {

enum class Collective { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast };
enum class Link { nvlink, network, pcie };

// Where a communicator's ranks sit: `size` ranks, `ranks_per_node` of them on each node they use
// (size <= ranks_per_node means one node). All ranks of every node communicate at the same time
// in Megatron's layouts, so a rank's share of the network is the node's NIC bandwidth / GPUs per
// node (ClusterSpec::network_bandwidth_GBps_per_gpu()).
struct GroupPlacement {
  int64_t size = 1;
  int64_t ranks_per_node = 1;
};

// Bytes one GPU sends, by the link they cross.
struct LinkBytes {
  double nvlink = 0, network = 0;
  LinkBytes& operator+=(const LinkBytes& o) {
    nvlink += o.nvlink;
    network += o.network;
    return *this;
  }
  LinkBytes operator*(double k) const { return {nvlink * k, network * k}; }
};

// What one rank sends in a collective of `bytes` (collective_s's convention), as a ring moves it:
// 2(n−1)/n of the buffer for all-reduce, (n−1)/n for all-gather, reduce-scatter, all-to-all and
// broadcast; of a ring over N nodes, N of its n links cross nodes, so N/n of the volume is counted
// on the network. NCCL's tree and hierarchical algorithms move the same volume split differently.
LinkBytes collective_sent_bytes(Collective kind, double bytes, const GroupPlacement& group);

// FlashAttention-2 backward does 5 matmuls per tile (recompute S = QKᵀ, dV, dP, dQ, dK) against
// the forward's 2: 2.5× the forward matmul FLOPs (Dao 2023, FlashAttention-2, §3.1.2).
inline constexpr double kAttentionBwdFlopsPerFwd = 2.5;

// FlashAttention-2's CTA tiles at head dim 128 on sm80/sm90: a forward CTA takes 128 query rows
// (Flash_fwd_kernel_traits<128, 128, 64, 4>: kBlockM = 128), a backward CTA 128 keys
// (Flash_bwd_kernel_traits<128, 64, 128, 8, ...>: kBlockN = 128): run_mha_fwd_hdim128 and
// run_mha_bwd_hdim128 in flash-attention's csrc/flash_attn/src/flash_{fwd,bwd}_launch_template.h,
// the same in the fork DCP builds its kernels from. One CTA per tile and head.
inline constexpr int64_t kFlashCtaRows = 128, kFlashCtaKeys = 128;

class CostModel {
 public:
  // Parses cluster.efficiency; on bad input status() holds the errors (file = `file`, or
  // "hardware preset <name>" when empty) and the parse's best-effort values are used.
  explicit CostModel(const ClusterSpec& cluster, const std::string& file = "");
  CostModel(const ClusterSpec& cluster, EfficiencyParams params);
  // The checked way: errors instead of a model with bad constants.
  static Expected<CostModel> create(const ClusterSpec& cluster, const std::string& file = "");

  const ClusterSpec& cluster() const { return cluster_; }
  const EfficiencyParams& params() const { return params_; }
  const Status& status() const { return status_; }

  // Dense 16-bit GEMM C[m,n] = A[m,k]·B[k,n], `batch` independent ones in one batched kernel:
  // kernel overhead + max(compute, HBM traffic). Compute picks the fastest tile (as cuBLAS's
  // heuristic does) among 256×128 … 64×64 and split-K 1…16, one CTA per SM, a partial last wave
  // costs a whole wave.
  double gemm_s(int64_t m, int64_t n, int64_t k, int64_t batch = 1) const;

  // Flash-style fused attention: `pairs` allowed (query,key) pairs per head summed over the
  // batch's sequences (causal: L(L+1)/2 per sequence), `heads`, `head_dim`, `mean_len` the mean
  // sequence length. Matmuls at attention_*_peak_fraction, one exponential per pair on the SFUs
  // (not overlapped in FA2), per-row overhead amortized over the mean L/2 keys a causal row sees.
  double flash_attention_fwd_s(double pairs, int64_t heads, int64_t head_dim,
                               double mean_len) const;
  double flash_attention_bwd_s(double pairs, int64_t heads, int64_t head_dim,
                               double mean_len) const;

  // One FlashAttention-2 call priced from its grid. `cta_pairs`: per CTA, in launch order, the
  // (query, key) pairs of one head it computes — forward, a 128-row query tile against every key
  // its rows attend to (FA2's grid (query tiles, sequences, heads)); backward, a 128-key tile
  // against every query row that attends to it (grid (key tiles, sequences, heads)).
  // `row_heads`: the call's query rows × heads. The block scheduler hands CTAs to SMs in launch
  // order as SMs free up (greedy list scheduling, each CTA at one SM's share of the full-GPU
  // rate), so a call lasts at least as long as its longest CTA and a partial last wave costs a
  // whole CTA. Per-pair rate, per-row overhead, HBM floor and launch overhead as
  // flash_attention_*_s, which a grid of many equal CTAs approaches (to within one CTA).
  double flash_attention_grid_s(const std::vector<double>& cta_pairs, double row_heads, int64_t head_dim,
                                bool backward) const;

  // Element-wise work moving `bytes` through HBM (norms, activations, softmax, dropout, residual
  // adds, optimizer step): kernel overhead + bytes / (hbm bandwidth · hbm_efficiency).
  double memory_bound_s(double bytes) const;

  // One transfer of `bytes` over a link: latency + bytes / (bandwidth · efficiency), the faster
  // of NCCL's LL and Simple protocols on NVLink and network; a copy engine on PCIe.
  double p2p_s(double bytes, Link link) const;

  // One transfer of `bytes` across the network through one whole NIC (nic_bandwidth_Gbps, not a
  // GPU's share of the node's NICs). Two rates: nic_flow_p2p_s is what the transfer takes when it
  // is the only one on its NIC (one flow, network_p2p_efficiency); nic_p2p_s is the time it holds
  // the NIC, at what the NIC carries in sum over several flows (network_nic_efficiency). A
  // simulation that shares NICs queues the transfers of a NIC for their nic_p2p_s, one after the
  // other, and each ends no sooner than its nic_flow_p2p_s after it started.
  double nic_p2p_s(double bytes) const;
  double nic_flow_p2p_s(double bytes) const;

  // NCCL-like collective; `bytes` is the full buffer per rank (nccl-tests convention: the output
  // of all-gather, the input of reduce-scatter). One node: ring on NVLink. Several: the fastest
  // of NCCL's node-crossing ring, a hierarchical scheme (intra-node reduce-scatter, inter-node
  // ring over ranks_per_node NICs in parallel, intra-node all-gather) and, for all-reduce, NCCL's
  // tree; each with the faster protocol. size 1 → 0.
  double collective_s(Collective kind, double bytes, const GroupPlacement& group) const;

  // NCCL's NCCL_P2P_LL_THRESHOLD default (src/enqueue.cc, NCCL_PARAM P2pLLThreshold = 16384):
  // a send/recv of at most this many bytes runs the LL protocol, a larger one Simple.
  static constexpr double kP2pLLThresholdBytes = 16384;

  // The step latency of one NCCL send/recv of `bytes` over `link` (NVLink or network): LL's for
  // a message of at most kP2pLLThresholdBytes (a zero-byte one included), Simple's above, as
  // NCCL picks a p2p operation's protocol. An all-to-all run as grouped send/recv (NCCL's
  // all-to-all; AttentionPlan::collective_exchange) pays one per peer.
  double p2p_latency_s(double bytes, Link link) const;

  // The wire time of one message of such an all-to-all, whose latency its step per peer already
  // paid (p2p_latency_s): `bytes` at the link's point-to-point rate — NVLink at
  // nvlink_busbw_efficiency, the network through one whole NIC at network_p2p_efficiency (as
  // nic_p2p_s) — with no latency of its own and no LL halving: nccl-tests' all-to-all on 2 p4d
  // nodes (the source of network_ll_step_latency_us, 128 KB-1 MB per rank) is the per-peer steps
  // plus its bytes at these rates (AttentionSim.EfaMediumAllToAllIsThePublishedOne).
  double p2p_wire_s(double bytes, Link link) const;
  double nic_wire_s(double bytes) const;       // the NIC's time, as nic_p2p_s
  double nic_flow_wire_s(double bytes) const;  // one flow's, as nic_flow_p2p_s

 private:
  // One NCCL step's latency over an NVLink or network hop under LL (ll) or Simple; PCIe's copy
  // latency for a PCIe hop.
  double step_latency_s(Link link, bool ll) const;
  // A point-to-point transfer's rate over a link (Simple protocol); one whole NIC's over several
  // flows (one_flow false) or for one flow alone (never above the former).
  double p2p_bandwidth_Bps(Link link) const;
  double nic_bandwidth_Bps(bool one_flow) const;
  // A transfer of `bytes` at `bw`: the faster of LL and Simple, each with its network step latency.
  double network_p2p_s(double bytes, double bw) const;

  ClusterSpec cluster_;
  EfficiencyParams params_;
  Status status_ = ok_status();
};

// Loads a hardware preset file with its default stack and builds their model; errors name the
// file (the stack's, for an efficiency constant) and the JSON pointer.
Expected<CostModel> load_cost_model(const std::filesystem::path& preset_file);

}  // namespace cpbench
