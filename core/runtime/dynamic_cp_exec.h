// dynamic_cp_exec.h — executes one Dynamic-CP round (one micro-batch) on the world's ranks: the
// world is split into the round's CP groups and each group runs its AttentionPlan (planned by the
// caller, e.g. baselines' plan_dyncp_round) with execute_attention, checked against the reference.
// Requires: every rank passes the same round, plans and seed (inputs are drawn from the seed on
// every rank). Note: the runtime decides nothing: the round and its plans come from above.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/common/expected.h"
#include "core/plan/attention_plan.h"
#include "core/runtime/attention_check.h"
#include "core/runtime/communicator.h"
#include "core/plan/dyncp_schedule.h"

namespace cpbench {

// The group's packed inputs: sequence seq_ids[i] (padded length plan.seq_lengths[i]) is drawn by
// make_attention_inputs with the (seq_ids[i] + 1)-th output of SplitMix64(seed) as its seed, so a
// sequence's data depends on its id and padded length, not on which group or round it lands in.
OwnedInputs dyncp_group_inputs(const AttentionPlan& plan, const std::vector<int64_t>& seq_ids, uint64_t seed);

// What one rank ran in a round, and how it compares with the plan and the reference.
struct DynCpRoundReport {
  int32_t group = -1;                   // index into round.groups; −1: idle in this round
  int64_t first_rank = 0, group_size = 0;
  int32_t group_rank = -1;              // this rank's rank inside the group (its CP rank)
  std::vector<int64_t> seq_ids;         // the group's sequences, indices into `lengths`
  std::vector<int64_t> padded_lengths;  // as executed, aligned with seq_ids
  std::string reference_kind;           // ReferenceAttention::kind
  double compute_s = 0, wait_s = 0;     // ExecutionReport's kernel and blocked-on-peer time
  double bytes_sent = 0, bytes_received = 0;            // counted by the group's communicator
  double plan_bytes_sent = 0, plan_bytes_received = 0;  // plan_bytes() for this group rank
  CheckResult check;                    // the worst of this rank's home slices (≤ 1 passes)

  bool idle() const { return group < 0; }
  bool bytes_match() const { return bytes_sent == plan_bytes_sent && bytes_received == plan_bytes_received; }
  bool results_match() const { return check.worst <= 1.0; }
  bool ok() const { return bytes_match() && results_match(); }
};

// Runs the round: checks it (check_dyncp_round over the world, one plan per group with the group's
// ranks and sequences; an Error there is returned by every rank before any communication), then
// world.split(color = the group's first_rank, or world.size() + rank for an
// idle rank; key = rank), then the rank's group executes its plan forward and, if `backward`,
// backward; each rank checks its home slices against the group's reference. Idle ranks return an
// idle report. An Error after the split is a runtime failure of this rank (a peer timed out...).
Expected<DynCpRoundReport> execute_dyncp_round(Communicator& world, const DynCpRound& round,
                                           const std::vector<AttentionPlan>& plans, bool backward, uint64_t seed);

}  // namespace cpbench
