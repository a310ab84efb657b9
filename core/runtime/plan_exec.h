// plan_exec.h — the plan walker: executes a Plan's context-parallel attention on real ranks, as
// every executing command and backend does (`cpbench exec`, `cpbench validate`, `run --backend cpu`).
// A Plan's micro-batch k of every DP×CP rank is its round k. The micro-batches of a round with
// cp > 1 are CP groups on disjoint ranks, each running its AttentionPlan: a static layout has one
// group per DP replica, a Dynamic-CP round groups of several sizes beside idle ranks, an attention
// micro-benchmark one group of every rank. Each group's run is checked against the single-device
// reference and its bytes against plan_bytes.
// Requires: every rank passes the same Plan (made by the same strategy from the same point); the
// inputs are drawn from a seed on every rank. Note: the runtime decides nothing: the strategy did.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/common/expected.h"
#include "core/plan/attention_plan.h"
#include "core/plan/plan.h"
#include "core/runtime/attention_check.h"
#include "core/runtime/attention_kernels.h"
#include "core/runtime/communicator.h"

namespace cpbench {

// A CP group of one round: DP×CP ranks [first_rank, first_rank + cp) running `attention`.
struct PlanGroup {
  int64_t first_rank = 0, cp = 1;
  const AttentionPlan* attention = nullptr;
};

// Rounds in the plan: the micro-batches per DP×CP rank.
size_t plan_rounds(const Plan& plan);

// The CP groups of round k, by first rank; or why the round cannot run: a member that holds
// another group's micro-batch or another plan, a group past the plan's ranks, a plan whose rank
// count is not its group's. Groups are the micro-batches with an AttentionPlan (cp > 1 in training
// plans; an attention micro-benchmark's group of one rank has one too); a round without any has
// no groups.
Expected<std::vector<PlanGroup>> plan_round_groups(const Plan& plan, size_t k);

struct GroupRunOptions {
  bool backward = true;
  bool check = true;  // compare every home slice with the reference (validate's timed runs do not)
};

// One member's run of its group's plan, and how it compares with the plan and the reference.
struct GroupRun {
  double seconds = 0;                // from the group's barrier to this member's end
  double compute_s = 0, wait_s = 0;  // ExecutionReport's kernel and blocked-on-peer time
  double bytes_sent = 0, bytes_received = 0;            // counted by the group's communicator
  double plan_bytes_sent = 0, plan_bytes_received = 0;  // plan_bytes() for this member
  CheckResult check;           // the worst of the member's home slices (≤ 1 passes); wrong summed
  std::string reference_kind;  // ReferenceAttention::kind; "" when not checked

  bool bytes_match() const { return bytes_sent == plan_bytes_sent && bytes_received == plan_bytes_received; }
  bool results_match() const { return check.worst <= 1.0; }
  bool ok() const { return bytes_match() && results_match(); }
};

// Runs `plan` on `group` (plan.ranks ranks, every member calling it) over `inputs` (the whole
// batch, make_attention_inputs, the same on every member): a barrier, the plan forward and, with
// options.backward, backward on `kernels`, then the check; every member computes the reference
// itself, so no result travels.
Expected<GroupRun> run_attention_group(const AttentionPlan& plan, Communicator& group, AttentionKernels& kernels,
                                       const OwnedInputs& inputs, const GroupRunOptions& options);

// What one rank did in a round.
struct RoundRun {
  int32_t group = -1;  // index into plan_round_groups(plan, k); −1: idle in this round
  PlanGroup where;
  int32_t group_rank = -1;  // this rank's rank inside the group (its CP rank)
  GroupRun run;
  bool idle() const { return group < 0; }
};

// The seed of round k's group at first_rank: a group's inputs depend on the run's seed and where
// the plan put it, so every rank of the group draws the same and two groups draw different data.
uint64_t group_seed(uint64_t seed, size_t k, int64_t first_rank);

// This rank's seat in round k: its group, the group's communicator and inputs (none when idle).
struct RoundSeat {
  size_t round = 0;
  RoundRun place;  // group, where, group_rank; its run empty
  std::shared_ptr<Communicator> group;  // shared with the seats of rounds split alike (RoundSplits)
  OwnedInputs inputs;  // drawn from group_seed(seed, round, first rank)
  bool idle() const { return place.idle(); }
};

// Group communicators kept for reuse by seats held together (validate holds every round's): a
// round whose groups split the ranks as an earlier round's did — Megatron main's Dynamic-CP runs a
// round's sequences as micro-batches on the same groups, hundreds of them — takes that round's
// communicator instead of splitting the world again. Keyed by the round's groups (first rank,
// size), which every rank reads from the same plan, so every rank splits or reuses alike.
struct RoundSplits {
  std::map<std::vector<std::pair<int64_t, int64_t>>, std::shared_ptr<Communicator>> by_groups;
};

// Takes this rank's seat in round k of `world` (every rank calls it; world rank r is DP×CP rank r,
// ranks beyond the plan's are idle): the round's groups are checked first (an Error there is
// returned by every rank before any communication, as is a world smaller than the plan), then
// world.split by group, and the group's inputs drawn. A seat runs its round as often as asked
// (validate times runs without the split and the drawing). With `splits`, a round split like one
// before reuses its communicator.
Expected<RoundSeat> take_round_seat(const Plan& plan, size_t k, Communicator& world, uint64_t seed,
                                    RoundSplits* splits = nullptr);

// Runs the seat's group's plan on its inputs (run_attention_group); an idle seat returns its idle
// place. An Error is a runtime failure of this rank (a peer timed out, ...).
Expected<RoundRun> run_round_seat(const RoundSeat& seat, AttentionKernels& kernels, const GroupRunOptions& options);

// take_round_seat, then run_round_seat once.
Expected<RoundRun> execute_plan_round(const Plan& plan, size_t k, Communicator& world, AttentionKernels& kernels,
                                      uint64_t seed, const GroupRunOptions& options);

}  // namespace cpbench
