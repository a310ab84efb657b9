#include "core/runtime/dynamic_cp_exec.h"

#include <algorithm>
#include <limits>

#include "baselines/cp_layouts.h"
#include "core/runtime/executor.h"
#include "core/workload/mask.h"
#include "core/workload/rng.h"

namespace cpbench {
namespace {

std::string ranks_str(const DcpGroup& g) {
  return "ranks [" + std::to_string(g.first_rank) + ", " + std::to_string(g.first_rank + g.size) + ")";
}

std::string group_str(size_t i, const DcpGroup& g) { return "group " + std::to_string(i) + " (" + ranks_str(g) + ")"; }

Error round_error(const std::string& message) { return runtime_error("Dynamic-CP round: " + message); }

// Heads and head_dim become the layout request's int32 fields: out-of-range values are an Error
// rather than a silent narrowing.
std::string check_dim(const char* what, int64_t value) {
  if (value < 1 || value > std::numeric_limits<int32_t>::max())
    return std::string(what) + " = " + std::to_string(value) + " is not in [1, 2^31)";
  return "";
}

}  // namespace

std::string check_dcp_round(const DcpRound& round, int64_t world_ranks, int64_t sequences) {
  if (round.groups.empty()) return "the round has no groups";
  std::vector<int64_t> owner(static_cast<size_t>(std::max<int64_t>(world_ranks, 0)), -1);
  std::vector<int64_t> seq_group(static_cast<size_t>(std::max<int64_t>(sequences, 0)), -1);
  for (size_t i = 0; i < round.groups.size(); ++i) {
    const DcpGroup& g = round.groups[i];
    if (g.size < 1) return group_str(i, g) + " has size " + std::to_string(g.size) + "; a group needs ≥ 1 rank";
    if (g.first_rank < 0 || g.first_rank + g.size > world_ranks)
      return group_str(i, g) + " exceeds the world of " + std::to_string(world_ranks) + " ranks";
    for (int64_t r = g.first_rank; r < g.first_rank + g.size; ++r) {
      int64_t& o = owner[static_cast<size_t>(r)];
      if (o >= 0)
        return group_str(i, g) + " overlaps " + group_str(static_cast<size_t>(o), round.groups[o]) + " at rank " +
               std::to_string(r);
      o = static_cast<int64_t>(i);
    }
    if (g.seq_ids.empty()) return group_str(i, g) + " has no sequences";
    for (int64_t s : g.seq_ids) {
      if (s < 0 || s >= sequences)
        return group_str(i, g) + " names sequence " + std::to_string(s) + " of a batch of " +
               std::to_string(sequences);
      int64_t& sg = seq_group[static_cast<size_t>(s)];
      if (sg >= 0)
        return "sequence " + std::to_string(s) + " is in " + group_str(static_cast<size_t>(sg), round.groups[sg]) +
               " and " + group_str(i, g);
      sg = static_cast<int64_t>(i);
    }
  }
  return "";
}

Expected<std::vector<AttentionPlan>> plan_dcp_round(const DcpRound& round, const std::vector<int64_t>& lengths,
                                                    int64_t world_ranks, const std::string& layout,
                                                    const std::string& mask, int64_t heads, int64_t kv_heads,
                                                    int64_t head_dim) {
  if (std::string why = check_dcp_round(round, world_ranks, static_cast<int64_t>(lengths.size())); !why.empty())
    return round_error(why);
  for (const std::string& why : {check_dim("heads", heads), check_dim("kv_heads", kv_heads), check_dim("head_dim", head_dim)})
    if (!why.empty()) return round_error(why);
  auto mask_spec = mask_from_name(mask);
  if (!mask_spec) return mask_spec.errors();
  std::vector<AttentionPlan> plans;
  for (size_t i = 0; i < round.groups.size(); ++i) {
    const DcpGroup& g = round.groups[i];
    CpLayoutRequest req;
    req.layout = layout;
    req.cp = static_cast<int32_t>(g.size);
    for (int64_t s : g.seq_ids) req.seq_lengths.push_back(lengths[static_cast<size_t>(s)]);
    req.mask = *mask_spec;
    req.heads_q = static_cast<int32_t>(heads);
    req.heads_kv = static_cast<int32_t>(kv_heads);
    req.head_dim = static_cast<int32_t>(head_dim);
    req.pad = true;  // Megatron pads each sequence of a CP group to a multiple of 2·cp as well
    auto plan = plan_cp_layout(req);
    if (!plan) return round_error(group_str(i, g) + ": " + plan.error_str());
    plans.push_back(std::move(*plan));
  }
  return plans;
}

OwnedInputs dcp_group_inputs(const AttentionPlan& plan, const std::vector<int64_t>& seq_ids, uint64_t seed) {
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

Expected<DcpRoundReport> execute_dcp_round(Communicator& world, const DcpRound& round,
                                           const std::vector<int64_t>& lengths, const std::string& layout,
                                           const std::string& mask, int64_t heads, int64_t kv_heads,
                                           int64_t head_dim, bool backward, uint64_t seed) {
  // Every group is planned on every rank before any collective: a group its layout rejects must
  // stop all ranks alike, not leave the others waiting in split.
  auto plans = plan_dcp_round(round, lengths, world.size(), layout, mask, heads, kv_heads, head_dim);
  if (!plans) return plans.errors();
  const int me = world.rank();
  DcpRoundReport rep;
  for (size_t i = 0; i < round.groups.size(); ++i) {
    const DcpGroup& g = round.groups[i];
    if (me >= g.first_rank && me < g.first_rank + g.size) rep.group = static_cast<int32_t>(i);
  }
  // Group colors are first ranks (< world.size()); idle ranks take colors above them, one each.
  const int color = rep.idle() ? world.size() + me : static_cast<int>(round.groups[rep.group].first_rank);
  auto sub = world.split(color, me);
  if (!sub) return sub.errors();
  if (rep.idle()) return rep;

  const DcpGroup& g = round.groups[rep.group];
  const AttentionPlan& plan = (*plans)[rep.group];
  Communicator& comm = **sub;
  rep.first_rank = g.first_rank;
  rep.group_size = g.size;
  rep.group_rank = comm.rank();
  rep.seq_ids = g.seq_ids;
  rep.padded_lengths = plan.seq_lengths;
  if (comm.size() != g.size || comm.rank() != me - g.first_rank)
    return runtime_error("Dynamic-CP round: rank " + std::to_string(me) + " of " + group_str(rep.group, g) +
                         " became rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) +
                         " after the split");

  OwnedInputs in = dcp_group_inputs(plan, g.seq_ids, seed);
  auto exec = execute_attention(plan, comm, in.view(), backward);
  if (!exec) {
    return runtime_error("Dynamic-CP round, rank " + std::to_string(me) + " in " + group_str(rep.group, g) + ": " +
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
