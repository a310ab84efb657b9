// attention_sim.h — prices an AttentionPlan: lowers it to a task graph that mirrors what the
// executor (core/runtime/executor.cpp) does on each rank, then runs the discrete-event engine.
// Requires: a well-formed plan (check_attention_plan; only out-of-range ranks and sequences are
// rejected here) and a CostModel. Decides nothing: the plan's tiles and transfers are priced as is.
// Note: per rank and stage i the executor posts stage i's transfers, runs stage i−1's tiles, then
// waits for all of its stage-i sends and receives; a transfer starts once both ends have posted
// it (a rendezvous, as MPI and NCCL send/recv of large messages). Then gather_out; backward: the
// plan's backward_phases. The plan's fused_stages and pipelined_backward say how it runs; the
// simulator prices that, as the executor runs it.
#pragma once

#include <filesystem>
#include <vector>

#include "core/common/expected.h"
#include "core/cost/cost_model.h"
#include "core/plan/attention_plan.h"
#include "core/sim/engine.h"

namespace cpbench {

struct AttentionSimResult {
  double step_time_s = 0;                 // makespan, forward (+ backward when asked)
  // Per rank: kernel time (stretched by contention with send kernels), time blocked on transfers.
  std::vector<double> compute_s, wait_s;
  std::vector<double> bytes_sent;         // per rank (from the plan: plan_bytes)
  double last_kernel_end_s = 0;           // when the last tile kernel (or merge) of any rank ends
  LinkBytes link_bytes;                   // all ranks' transfers it ran (attention_link_bytes)

  // Every rank's kernels one after the other: what checking the plan against a single-device
  // reference costs on one rank (the executors' correctness check).
  double serial_kernel_s() const {
    double s = 0;
    for (double c : compute_s) s += c;
    return s;
  }
};

// The bytes of the plan's forward transfers (its stages' and gather_out) and of `backward`'s, all
// ranks together, by link: NVLink when both ranks are on one node (node_of), else the network.
LinkBytes attention_link_bytes(const AttentionPlan& plan, const std::vector<AttnBackwardPhase>& backward,
                               const std::vector<int>& node_of);

// The seconds of one forward tile (backward: flash_attention_bwd_s) of `plan`: its allowed pairs
// per head (mask_pairs_in_tile), the tile's query heads, and mean_len = 2·pairs / query rows, so
// that the cost model's rows = pairs / (mean_len / 2) are the tile's query rows.
double attention_tile_s(const AttentionPlan& plan, const AttnTile& tile, const CostModel& cost, bool backward);

// The seconds of `tiles` run as one varlen kernel call (TransformerEngine runs a CP step's THD
// pack in one call): summed pairs, one launch, one grid, and each query row once however many
// tiles it is in (the call reads all the keys a row attends to in one pass over the row).
double attention_tiles_s(const AttentionPlan& plan, const std::vector<const AttnTile*>& tiles, const CostModel& cost,
                         bool backward);

// The seconds of merging `tiles`' partial results into the rank's accumulators, one memory-bound
// kernel over all of them (TransformerEngine's per-step output/LSE correction; the CPU executor's
// merge_out and spread): forward, each distinct query slice's partial O (plan.value_bytes) and LSE
// (fp32) read and its fp32 accumulators read and written; backward, its partial dQ and each
// distinct K/V slice's dK, dV the same way. One tile: that tile's.
double attention_merge_s(const AttentionPlan& plan, const std::vector<const AttnTile*>& tiles, const CostModel& cost,
                         bool backward);

// Ranks on one node, or each on a node of its own: `link` nvlink or network for every transfer.
std::vector<int> uniform_nodes(int32_t ranks, Link link);

// The task graph of the plan, one device per rank: stream 0 the tiles (kind 'c'; one task per
// stage and rank with plan.fused_stages; each task's kernels followed by their merge), stream 1 the rank's sends (kind 'm',
// cost.p2p_s(transfer_bytes, link), on link = the sender's rank: a rank's sends serialize, its
// receives do not occupy its own link).
Expected<TaskGraph> lower_attention_plan(const AttentionPlan& plan, const CostModel& cost, bool backward,
                                         Link link = Link::nvlink);

// Simulates the plan. wait_s is measured as the executor measures it: the time a rank spends in a
// wait point after its own tiles of the stage are done, i.e. for its transfers and for a partner
// that has not posted yet. With `trace` non-empty, writes the timeline there (write_chrome_trace,
// one process per rank). Errors: a malformed plan (a rank, sequence or stage out of range), an
// unwritable trace file.
Expected<AttentionSimResult> simulate_attention_plan(const AttentionPlan& plan, const CostModel& cost, bool backward,
                                                     Link link = Link::nvlink,
                                                     const std::filesystem::path& trace = {});

// The same with the ranks' nodes: each transfer is priced on NVLink when its two ranks share a
// node (node_of[src] == node_of[dst]) and on the network otherwise. Error: node_of.size() is not
// plan.ranks.
Expected<AttentionSimResult> simulate_attention_plan(const AttentionPlan& plan, const CostModel& cost, bool backward,
                                                     const std::vector<int>& node_of,
                                                     const std::filesystem::path& trace = {});

}  // namespace cpbench
