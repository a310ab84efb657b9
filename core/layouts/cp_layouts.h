// cp_layouts.h — the static context-parallel layouts of the field as AttentionPlans: single rank,
// ring P2P on per-sequence chunks, zigzag ring, all-gather (Llama 3), a2a (Ulysses), a2a+p2p (USP).
// Requires: core/plan/attention_plan.h. Sequences are packed THD-style (no attention across them);
// a batch that breaks a layout's divisibility rule is an Error unless `pad` pads it.
// Note: facts from references/context_parallel.md and zhuzilin/ring-flash-attention (varlen ring,
// zigzag and llama3 variants); tile and transfer shapes are chosen here and documented per layout.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/common/expected.h"
#include "core/plan/attention_plan.h"
#include "core/model/model.h"
#include "core/plan/parallel_config.h"
#include "core/plan/plan.h"
#include "core/workload/mask.h"

namespace cpbench {

// A static layout is a row of one table (cp_layouts()): how it splits the tokens and the heads
// over the CP ranks, and how the ranks exchange K/V. plan_cp_layout, the padding rules, the plan
// size bound and the names the CLI and specs accept all read the rows; a new layout is a row (and
// a builder, if it exchanges K/V in a way no row does yet).
enum class TokenSplit {
  contiguous,    // the packed batch in cp equal parts (T % cp == 0; padding grows the last sequence)
  per_sequence,  // every sequence in cp chunks, rank r owns chunk r (L % cp == 0)
  zigzag,        // every sequence in 2·cp chunks, rank r owns r and 2cp−1−r (L % 2cp == 0)
};
enum class HeadSplit {
  none,    // every rank computes all heads of its tokens
  all,     // Ulysses: an all-to-all over the cp ranks trades tokens for heads (cp divides the heads)
  groups,  // USP: Ulysses inside groups of a2a_size ranks (a2a_size divides cp and the heads)
};
enum class KvExchange {
  ring_of_groups,  // groups pass K/V round a ring, stage by stage (a group of one: the plain ring)
  all_gather,      // one stage: every rank's K/V to every other rank
};
struct CpLayout {
  const char* name;
  TokenSplit tokens;
  HeadSplit heads;
  KvExchange exchange;
  bool one_rank = false;  // runs on cp = 1 only
  bool window = false;    // takes LoongTrain's ring window (an inner and an outer ring)
  // TransformerEngine's cp_comm_type that runs this layout, "" for none; and the chunks per rank
  // its THD format needs every sequence to split into under static CP (the data loader pads to
  // thd_chunks·cp): 2 for p2p, all_gather and a2a+p2p, 1 for a2a.
  const char* te_comm_type = "";
  int thd_chunks = 0;
};
const std::vector<CpLayout>& cp_layouts();
const CpLayout* find_cp_layout(const std::string& name);  // null when unknown

// The multiple every sequence is padded to for `layout` on cp ranks: 2·cp (zigzag chunks), cp
// (per-sequence chunks), 1 (contiguous: only the batch's total must divide, by padding the last
// sequence by fewer than cp tokens).
int64_t cp_layout_sequence_multiple(const CpLayout& layout, int64_t cp);

// The AttentionShape of `lengths` under `mask` on one TP rank of `layout` (heads and KV heads ÷ tp).
AttentionShape tp_rank_attention(const std::vector<int64_t>& lengths, const MaskSpec& mask, const ModelShape& model,
                                 const ParallelConfig& layout);

// The shape (seq_lengths, mask, heads_q, heads_kv, head_dim), and how to lay it out.
struct CpLayoutRequest : AttentionShape {
  std::string layout;    // "single" | "ring" | "zigzag" | "all_gather" | "a2a" | "a2a+p2p" | "double_ring"
  int32_t cp = 1;        // ranks
  int32_t a2a_size = 0;  // a2a+p2p, double_ring: the inner all-to-all group size (divides cp); 0 = auto
  int32_t window = 0;    // double_ring: groups per inner ring (divides cp / a2a_size)
  bool pad = false;  // pad sequences to the layout's rule instead of rejecting them
};

// The plan of `r.layout` on r.cp ranks, built from its row. The rows (T = total tokens, L = one
// sequence's length):
//   single      cp = 1; one tile per sequence.
//   ring        every sequence in cp equal chunks, rank r owns chunk r of each
//               (ring-flash-attention's varlen ring); needs L % cp == 0 for every sequence (pad:
//               each grows). Stage 0 computes local
//               Q × local KV without transfers; in stage i ≥ 1 every rank sends the KV it used in
//               stage i−1 (its own in stage 1) to rank+1 and computes local Q × the KV of rank
//               r−i. cp stages; (cp−1)·|KV shard| per rank. Fully masked tiles are left out.
//   zigzag      every sequence in 2·cp equal chunks, rank r owns chunks r and 2cp−1−r; needs
//               L % (2·cp) == 0 for every sequence (pad: each grows). Ring as above.
//   all_gather  zigzag chunks (2·cp per sequence, rank r owns r and 2cp−1−r: TransformerEngine's
//               all-gather CP keeps two Q chunks per rank for causal balance), same length rule;
//               one stage: every rank's home KV goes to every other rank, then each of the rank's
//               Q pieces attends every KV piece it may see.
//   a2a         contiguous as ring; needs heads_q % cp == 0 and heads_kv % cp == 0. Stage 0:
//               each rank sends every rank j the Q and KV of its tokens for j's head range;
//               rank j computes whole sequences for its heads; gather_out returns O to owners.
//   a2a+p2p     cp = a2a_size × ring_size; zigzag homes over all cp ranks (TransformerEngine
//               splits every sequence into 2·cp chunks under static CP; same length rule); ranks
//               [g·a, (g+1)·a) form Ulysses group g over their home chunks, and the groups form a
//               ring: rank (g, i) passes the KV of head range i to (g+1, i). Auto a2a_size: the
//               largest divisor of cp that divides heads_q and heads_kv.
//   double_ring LoongTrain's head-parallel × double ring: a2a+p2p whose ring of groups is split
//               into windows of `window` consecutive groups: an inner ring inside each window and
//               an outer ring across windows whose KV moves in `window` pieces, one under each
//               inner step (window 1 or the whole ring: a2a+p2p's single ring).
// Every rank's tiles are (q piece × kv piece) of one sequence where the mask allows a pair.
Expected<AttentionPlan> plan_cp_layout(const CpLayoutRequest& r);

// The head-parallel (all-to-all) group size of an a2a+p2p or double_ring layout when none is given:
// the largest divisor of cp that divides both head counts (1 when none does).
int32_t auto_a2a_size(int32_t cp, int32_t heads_q, int32_t heads_kv);

// The layout that runs TransformerEngine's `cp_comm_type` (references/context_parallel.md): p2p is
// the ring with causal load balancing (zigzag), the others by name. Unknown: an empty string.
std::string cp_layout_for_comm_type(const std::string& cp_comm_type);

// The multiple every sequence of a static-CP micro-batch is padded to under `layout`: the chunk
// rule of its cp_comm_type's layout (2·cp chunks for p2p, all_gather and a2a+p2p, cp for a2a; 1
// without CP), times tp with sequence parallelism (the sequence is split over the TP ranks too).
int64_t static_cp_pad_multiple(const ParallelConfig& layout);

// TransformerEngine's THD a2a+p2p on GPUs, as the fork DCP's artifact installs runs it
// (github.com/chenyu-jiang/TransformerEngine, branch stable, transformer_engine/pytorch/attention.py,
// read in session 15): around its all-to-alls, reorder_seq_chunks_for_a2a_varlen loops over the
// sequences in Python, 4 torch calls per sequence and tensor (a slice, a reshape or view, an
// index_select, a view). A host synchronization precedes the loops the GPU then waits for: the
// forward's q, k and v (after `.cpu()` of cu_seqlens; the ring starts after slicing k and v by
// cu_seqlens[-1]), the backward's out and dout (after `dq[cu_seqlens[-1]:]`) and dq, dk and dv
// (after `dkv_[:, :cu_seqlens[-1]]`). The output's loop after the forward ring runs while the GPU
// computes; the loops' CPU scalar ops are not counted. On an a2a+p2p plan with
// parallel.te_a2a_sequence_loop, sets host_ops_per_sequence_fwd = 3 · 4 and _bwd = 5 · 4; any
// other plan is left as it is. The one rule for every strategy that builds a2a+p2p plans.
inline constexpr int32_t kTeThdA2aCallsPerSequence = 4;
void apply_te_a2a_sequence_loop(AttentionPlan& plan, const ParallelConfig& parallel);

// The AttentionPlan of one packed micro-batch on its CP group, per TP rank: the layout of the
// layout's cp_comm_type (single when mb.cp = 1), causal, the model's heads and KV heads over tp,
// the micro-batch's padded lengths (padded further if the layout needs it), 16-bit values on the
// wire for bf16/fp16 layouts (value_bytes 2; LSE stays fp32), run as TransformerEngine runs it
// (fused_stages, pipelined_backward). The simulator prices
// this plan (core/sim/cp_attention.h); the executors run plans built the same way.
// A mask sparser than causal (lambda, shared_question, causal_blockwise) runs on the causal tiles
// with causal_envelope_work; full runs on full tiles.
Expected<AttentionPlan> plan_micro_batch_attention(const PlanMicroBatch& mb, const ModelShape& model,
                                                   const ParallelConfig& layout, const MaskSpec& mask = MaskSpec{});

// Tiles plus transfers (forward) an upper bound for plan_cp_layout's plan of `sequences`
// sequences on `cp` ranks (a2a+p2p: in groups of `a2a_size`), computed without building it. A
// plan lists per-sequence pieces, so zigzag and all_gather, where every rank holds two chunks of
// every sequence, grow with cp² · sequences (a2a+p2p with a2a_size · cp² · sequences: a group's
// tiles pair its 2·a2a_size pieces of a sequence); ring with cp² · sequences; the contiguous
// layouts with cp · (sequences + cp).
int64_t cp_layout_plan_entries(const std::string& layout, int64_t cp, int64_t sequences, int64_t a2a_size = 1,
                               int64_t window = 1);

// The largest plan cpbench builds: about 64 bytes an entry, with its derived backward, ~4 GiB.
// Beyond it (a Dynamic-CP group of 257 ranks over 2048 sequences would need 811M entries) the
// plan is a limit of cpbench's per-sequence plan form, not of the configuration.
constexpr int64_t kMaxAttentionPlanEntries = 30'000'000;

// Why a micro-batch's attention cannot be planned: the configuration cannot run (infeasible), or
// its plan is beyond what cpbench can hold (beyond_cpbench: the point is an error, not a verdict).
struct AttachProblem {
  std::string why;
  bool beyond_cpbench = false;
};

// Gives every micro-batch of `plan` with cp > 1 its AttentionPlan (plan_micro_batch_attention
// under plan->layout, with plan->mask); equal micro-batches (same padded lengths and group size) share one plan
// object, so the simulator's symmetry still sees them equal. Nothing, or why a micro-batch has none.
std::optional<AttachProblem> attach_attention_plans(Plan* plan, const ModelShape& model);

// The layout names plan_cp_layout accepts, in the order above.
std::vector<std::string> cp_layout_names();

}  // namespace cpbench
