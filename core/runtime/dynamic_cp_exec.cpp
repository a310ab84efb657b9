#include "core/runtime/dynamic_cp_exec.h"

#include <algorithm>
#include <limits>

#include "core/runtime/executor.h"
#include "core/runtime/cpu_attention_kernels.h"
#include "core/workload/mask.h"
#include "core/workload/rng.h"

namespace cpbench {
namespace {

Error round_error(const std::string& message) { return runtime_error("Dynamic-CP round: " + message); }

}  // namespace

OwnedInputs dyncp_group_inputs(const AttentionPlan& plan, const std::vector<int64_t>& seq_ids, uint64_t seed) {
  OwnedInputs all;
  for (size_t i = 0; i < seq_ids.size(); ++i) {
    // SplitMix64's state advances by the golden-ratio increment per draw, so starting it
    // id increments later makes its first output the (id + 1)-th output of SplitMix64(seed).
    SplitMix64 seeder(seed + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(seq_ids[i]));
    AttentionPlan one;
    one.seq_lengths = {plan.seq_lengths[i]};
    one.heads_q = plan.heads_q;
    one.heads_kv = plan.heads_kv;
    one.head_dim = plan.head_dim;
    OwnedInputs in = make_attention_inputs(one, seeder.next_u64());
    // Packed [T, H, d] row-major: a sequence's rows follow the previous sequence's.
    all.q.insert(all.q.end(), in.q.begin(), in.q.end());
    all.k.insert(all.k.end(), in.k.begin(), in.k.end());
    all.v.insert(all.v.end(), in.v.begin(), in.v.end());
    all.dout.insert(all.dout.end(), in.dout.begin(), in.dout.end());
  }
  return all;
}

Expected<DynCpRoundReport> execute_dyncp_round(Communicator& world, const DynCpRound& round,
                                           const std::vector<AttentionPlan>& plans, bool backward, uint64_t seed) {
  // Checked on every rank before any collective: a bad round must stop all ranks alike, not
  // leave the others waiting in split.
  if (plans.size() != round.groups.size())
    return round_error(std::to_string(plans.size()) + " plans for " + std::to_string(round.groups.size()) + " groups");
  int64_t sequences = 0;
  for (const DynCpGroup& g : round.groups)
    for (int64_t s : g.seq_ids) sequences = std::max(sequences, s + 1);
  if (std::string why = check_dyncp_round(round, world.size(), sequences); !why.empty()) return round_error(why);
  for (size_t i = 0; i < plans.size(); ++i)
    if (plans[i].ranks != round.groups[i].size || plans[i].seq_lengths.size() != round.groups[i].seq_ids.size())
      return round_error(dyncp_group_name(i, round.groups[i]) + ": its plan has " + std::to_string(plans[i].ranks) +
                         " ranks and " + std::to_string(plans[i].seq_lengths.size()) + " sequences");
  const int me = world.rank();
  DynCpRoundReport rep;
  for (size_t i = 0; i < round.groups.size(); ++i) {
    const DynCpGroup& g = round.groups[i];
    if (me >= g.first_rank && me < g.first_rank + g.size) rep.group = static_cast<int32_t>(i);
  }
  // Group colors are first ranks (< world.size()); idle ranks take colors above them, one each.
  const int color = rep.idle() ? world.size() + me : static_cast<int>(round.groups[rep.group].first_rank);
  auto sub = world.split(color, me);
  if (!sub) return sub.errors();
  if (rep.idle()) return rep;

  const DynCpGroup& g = round.groups[rep.group];
  const AttentionPlan& plan = plans[rep.group];
  Communicator& comm = **sub;
  rep.first_rank = g.first_rank;
  rep.group_size = g.size;
  rep.group_rank = comm.rank();
  rep.seq_ids = g.seq_ids;
  rep.padded_lengths = plan.seq_lengths;
  if (comm.size() != g.size || comm.rank() != me - g.first_rank)
    return runtime_error("Dynamic-CP round: rank " + std::to_string(me) + " of " + dyncp_group_name(rep.group, g) +
                         " became rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) +
                         " after the split");

  OwnedInputs in = dyncp_group_inputs(plan, g.seq_ids, seed);
  auto exec = execute_attention(plan, comm, in.view(), backward);
  if (!exec) {
    return runtime_error("Dynamic-CP round, rank " + std::to_string(me) + " in " + dyncp_group_name(rep.group, g) + ": " +
                         exec.error_str());
  }
  rep.compute_s = exec->compute_s;
  rep.wait_s = exec->wait_s;
  rep.bytes_sent = exec->bytes_sent;
  rep.bytes_received = exec->bytes_received;
  const RankBytes predicted = plan_bytes(plan, backward);
  rep.plan_bytes_sent = predicted.sent[rep.group_rank];
  rep.plan_bytes_received = predicted.received[rep.group_rank];

  // The reference of the group's sequences only: every rank of the group computes it (the
  // inputs are drawn from the seed), so no result has to travel to be checked.
  ReferenceAttention ref = reference_attention(plan, in, backward);
  rep.reference_kind = ref.kind;
  for (const auto& h : exec->home) {
    CheckResult c = check_home(plan, h, ref, backward);
    rep.check.max_abs_error = std::max(rep.check.max_abs_error, c.max_abs_error);
    if (c.worst > rep.check.worst) {
      rep.check.worst = c.worst;
      rep.check.where = c.where;
    }
  }
  return rep;
}

}  // namespace cpbench
