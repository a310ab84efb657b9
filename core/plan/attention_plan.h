// attention_plan.h — the attention part of a Plan: which tokens and heads each rank holds, which
// (Q slice × KV slice) tiles each rank computes, and which slices move between ranks, in stages.
// Requires: core/workload (masks). The runtime executes exactly this (core/runtime/executor.h);
// the byte counts below are what it must move (tests compare them with the Communicator's).
// Note: forward is described explicitly; backward is either explicit (AttentionPlan::backward, a
// planner's own schedule on the forward's placement) or derived mechanically from the forward
// (backward_phases): the forward's inputs are brought to the computing ranks again, gradient
// partials end at home.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/workload/mask.h"

namespace cpbench {

// Tokens [tok_begin, tok_end) of sequence `seq` (positions inside the sequence), query heads
// [head_begin, head_end). For K/V the KV heads are [head_begin / g, head_end / g) with
// g = heads_q / heads_kv, so a slice that splits heads starts and ends on multiples of g.
struct AttnSlice {
  int32_t seq = 0;
  int64_t tok_begin = 0, tok_end = 0;
  int32_t head_begin = 0, head_end = 0;

  int64_t tokens() const { return tok_end - tok_begin; }
  int32_t heads() const { return head_end - head_begin; }
  bool contains(const AttnSlice& s) const;
  bool operator==(const AttnSlice&) const = default;
};

// What a transfer carries for its slice (values of plan.value_bytes each, LSE always fp32):
//   q: Q rows; kv: K and V rows of the slice's KV heads; out: O and LSE (a partial forward, or
//   the final one brought for backward); dout: dO; dq: a partial dQ; dkv: partial dK and dV.
enum class AttnTensor : uint8_t { q, kv, out, dout, dq, dkv };
const char* attn_tensor_name(AttnTensor t);

struct AttnTransfer {
  int32_t src = 0, dst = 0;
  AttnTensor tensor = AttnTensor::kv;
  AttnSlice slice;
  // A relay forwards a q or kv slice that its src receives (not by a relay) in the same stage, and
  // leaves once that receive is done: DCP's two-phase communication, a block crossing the network
  // once to one GPU of a node and copied from there to the node's other GPUs that need it.
  bool relay = false;
  bool operator==(const AttnTransfer&) const = default;
};

// One unit of attention work: the rows of `q` attend to the keys of `kv` (same sequence and
// heads), under the plan's mask; its partial (O, LSE) merges into the rank's result for `q`.
struct AttnTile {
  AttnSlice q, kv;
  bool operator==(const AttnTile&) const = default;
};

// A stage's transfers are posted before the previous stage's tiles run (a relay once what it
// forwards has arrived), so communication of stage i+1 overlaps compute of stage i (ring
// attention's double buffering). They carry inputs
// (q, kv) and, in stage s, final partial outputs (out) of rows their sender computed in stages
// before s − 1 and computes no more of: DCP's reductions inside the divisions.
struct AttnStage {
  std::vector<AttnTransfer> transfers;
  std::vector<std::vector<AttnTile>> tiles;  // [rank]
  bool operator==(const AttnStage&) const = default;
};

// One phase of the backward (backward_phases says how backends run it).
struct AttnBackwardPhase {
  std::vector<AttnTransfer> transfers;
  std::vector<std::vector<AttnTile>> tiles;  // [rank]; may be shorter than the ranks (none)
  bool operator==(const AttnBackwardPhase&) const = default;
};

// The attention of one micro-batch on one TP rank: its sequences, the mask, the heads and head dim
// the rank holds. Every plan builder's request carries it (CpLayoutRequest, DcpRequest) and every
// AttentionPlan starts from it, so the header is set in one assignment.
struct AttentionShape {
  std::vector<int64_t> seq_lengths;  // the micro-batch's sequences, in tokens (padded lengths)
  MaskSpec mask;
  int32_t heads_q = 1, heads_kv = 1, head_dim = 1;
  bool operator==(const AttentionShape&) const = default;
};

struct AttentionPlan : AttentionShape {
  std::string layout;                  // a cp_layouts name ("zigzag", "double_ring", …) or "dcp"
  int32_t ranks = 1;
  // Bytes of one value on the wire: 4 (fp32) or 2 (bf16/fp16 training). LSE rows stay fp32, as
  // FlashAttention and TransformerEngine keep them. The executor sends exactly this.
  int32_t value_bytes = 4;
  // Bytes of a gradient partial's value (dq, dkv) on the wire; 0: value_bytes. ring-flash-attention
  // and LoongTrain pass their fp32 dK/dV accumulators on the backward ring (4 under bf16).
  int32_t grad_bytes = 0;
  // What one value of tensor t costs on the wire.
  int32_t wire_bytes(AttnTensor t) const {
    return (t == AttnTensor::dq || t == AttnTensor::dkv) && grad_bytes > 0 ? grad_bytes : value_bytes;
  }
  // How the plan runs, the same for every backend (the simulator prices it, the executors run it):
  //   fused_stages: a rank's tiles of one stage are one varlen kernel call, and what it sends one
  //     peer of one tensor in a phase is one message (TransformerEngine runs a CP step's THD pack
  //     in one call and sends its K/V as one buffer); false: one call per tile, one message per
  //     slice. (The CPU executor sends per slice either way: the same bytes.)
  //   pipelined_backward: the backward runs the forward's paths again, stage by stage under the
  //     kernels: inputs travel as in the forward, and a gradient partial travels on with its slice
  //     where the forward relayed it (TransformerEngine's and ring-flash-attention's ring
  //     backward: K/V and the running dK/dV go to the next rank, dK/dV ends on its owner); false:
  //     inputs fetched from the homes before all backward tiles, partials sent home after
  //     (backward_phases).
  //   causal_envelope_work: the kernel computes every pair of a tile that the causal mask allows
  //     and applies the plan's (sparser) mask inside, as TransformerEngine's static CP runs a
  //     sliding-window or block-sparse mask — it cannot skip the masked work. The result is the
  //     plan's mask's; the work priced is the causal envelope's. False: only allowed pairs cost.
  bool fused_stages = false;
  bool pipelined_backward = false;
  bool causal_envelope_work = false;
  // Host work the runtime does per sequence of the micro-batch while the GPU waits for it: torch
  // calls, each at the stack's host_op_us, before a pass's first transfer or kernel (the forward's;
  // the backward's). It is exposed because a host synchronization precedes it. TransformerEngine's
  // THD a2a+p2p: apply_te_a2a_sequence_loop (core/layouts/cp_layouts.h). 0: none.
  int32_t host_ops_per_sequence_fwd = 0, host_ops_per_sequence_bwd = 0;
  // collective_exchange: every phase's transfers run as NCCL all-to-alls over all the plan's
  // ranks, as DCP's executor runs them (dcp/runtime/flash_attention/executor.py: per stage one
  // dist.all_to_all_single per dtype of what moves, the relays of two-phase communication in a
  // second round of them, the outputs in a last one). Every rank takes part in each, whether or
  // not it sends, and they follow one another on the communicator's stream: an all-to-all
  // completes nowhere before every rank has posted it, and each costs its latency
  // (a send/recv step per peer, CostModel::p2p_latency_s) besides the bytes. False: point-to-point sends, each
  // waiting only for its two ends (ring attention's send/recv pairs). The CPU executor runs the
  // all-to-alls as NCCL does, a send to and a receive from every peer per round (the fp32 LSE of
  // an O inside its message rather than in a round of its own): the same bytes.
  bool collective_exchange = false;
  // [rank] the slices a rank owns (all heads, or a head range on multiples of g: DCP's head
  // blocks): its Q, K, V and dO on entry, its O, LSE, dQ, dK and dV on exit. Every (token, head)
  // of every sequence has exactly one home.
  std::vector<std::vector<AttnSlice>> home;
  std::vector<AttnStage> stages;
  // After the last stage: partial or final (O, LSE) of slices computed away from home, sent home
  // and merged there (Ulysses' all-to-all back; a split of one row's keys over ranks).
  std::vector<AttnTransfer> gather_out;
  // The backward as its planner scheduled it (empty: derived from the forward, backward_phases).
  // Phase i posts its transfers, runs the backward of its tiles, then waits; a tile's inputs (its
  // q slice with dO and the final O and LSE, its kv slice) are home or arrived in an earlier phase,
  // and every gradient partial computed away from home is sent on (to home, or to a rank that sends
  // it on) after the sender's last tile on it. check_attention_plan checks all of it.
  std::vector<AttnBackwardPhase> backward;

  int32_t group() const { return heads_q / heads_kv; }
  bool operator==(const AttentionPlan&) const = default;
};

// The (query, key) pairs a tile's kernel computes: the plan's mask's, or with causal_envelope_work
// the causal mask's (for every mask here a superset of the plan's).
int64_t tile_work_pairs(const AttentionPlan& plan, const AttnTile& tile);
// That mask itself: the one tile_work_pairs counts.
MaskSpec tile_work_mask(const AttentionPlan& plan);

// Payload bytes of one transfer: values at plan.value_bytes, LSE at 4 bytes.
double transfer_bytes(const AttentionPlan& plan, const AttnTransfer& t);

// Every transfer of the forward pass, in order: stages, then gather_out.
std::vector<AttnTransfer> forward_transfers(const AttentionPlan& plan);

// The backward pass, derived from the forward tiles, in three phases:
//   inputs:   for every slice a rank's tiles read that the rank does not own — q (with dout and
//             the final out) from the q slice's home, kv from the kv slice's home;
//   compute:  the same tiles, backward, accumulating dQ, dK, dV partials;
//   returns:  dq partials to the q slice's home, dkv partials to the kv slice's home.
struct BackwardTransfers {
  std::vector<AttnTransfer> inputs, returns;
};
BackwardTransfers backward_transfers(const AttentionPlan& plan);

// The backward pass as every backend runs it, phase by phase: post `transfers`, run the backward
// of `tiles` ([rank]), then wait for the rank's transfers; a received gradient partial is added to
// the receiver's partial of that slice (its home's, or the one it passes on). The plan's explicit
// `backward` when it has one; else derived from the forward: without pipelined_backward,
// [backward_transfers inputs], one phase per stage with its tiles, [returns]. With it, phase i
// (0 … stages + 1, more if a relay runs late) runs stage i − 1's tiles and posts forward stage
// i's transfers again (a Q slice with its dO and final O); a
// rank's partial of a slice it received goes to the one rank it forwarded the slice to, or else
// home, in the phase after its last tile on the slice and after the partial it merges arrived.
// A relaying layout moves more that way (every relayed slice, as the ring runs); a plan that
// sends each slice from its home straight to its readers (DCP) moves the same transfers.
std::vector<AttnBackwardPhase> backward_phases(const AttentionPlan& plan);

// The most tokens one rank's homes hold, a home of some of the query heads counted as that share
// of its tokens (a home of half the heads of 100 tokens holds 50): the rows of the fullest rank's
// linear layers. Static layouts split every (padded) sequence evenly, DCP's blocks within its
// memory tolerance.
int64_t fullest_home_tokens(const AttentionPlan& plan);

// [rank] payload bytes a rank sends and receives over forward + backward.
struct RankBytes {
  std::vector<double> sent, received;
};
RankBytes plan_bytes(const AttentionPlan& plan, bool with_backward);
// The same with the backward given as its phases (backward_phases(plan), or none).
RankBytes plan_bytes(const AttentionPlan& plan, const std::vector<AttnBackwardPhase>& backward);

// The home rank of a slice (the rank whose home slices contain it), or −1.
int32_t home_of(const AttentionPlan& plan, const AttnSlice& s);

// "" when the plan is well formed: every token has one home; every tile's q and kv are slices of
// one sequence with equal heads, its q slice is held (home or received in this or an earlier
// stage) and so is its kv slice; every allowed (query, key, head) of the mask is computed by
// exactly one tile. Otherwise what is wrong.
std::string check_attention_plan(const AttentionPlan& plan);

}  // namespace cpbench
