#include "core/runtime/plan_exec.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "core/runtime/executor.h"
#include "core/workload/rng.h"

namespace cpbench {
namespace {

std::string group_name(size_t k, const PlanGroup& g) {
  return "round " + std::to_string(k) + "'s group on ranks [" + std::to_string(g.first_rank) + ", " +
         std::to_string(g.first_rank + g.cp) + ")";
}

}  // namespace

size_t plan_rounds(const Plan& plan) { return plan.micro_batches.empty() ? 0 : plan.micro_batches.front().size(); }

Expected<std::vector<PlanGroup>> plan_round_groups(const Plan& plan, size_t k) {
  const int64_t ranks = static_cast<int64_t>(plan.micro_batches.size());
  auto bad = [k](const std::string& why) { return runtime_error("plan round " + std::to_string(k) + ": " + why); };
  std::map<int64_t, PlanGroup> groups;
  for (int64_t r = 0; r < ranks; ++r) {
    const auto& list = plan.micro_batches[static_cast<size_t>(r)];
    if (k >= list.size())
      return bad("DP×CP rank " + std::to_string(r) + " has " + std::to_string(list.size()) + " micro-batches");
    const PlanMicroBatch& mb = list[k];
    if (!mb.attention) continue;  // cp = 1 in training plans: no CP attention to run
    if (mb.first_rank < 0 || r < mb.first_rank || r >= mb.first_rank + mb.cp || mb.first_rank + mb.cp > ranks)
      return bad("DP×CP rank " + std::to_string(r) + " holds a micro-batch of the group on ranks [" +
                 std::to_string(mb.first_rank) + ", " + std::to_string(mb.first_rank + mb.cp) + ") of " +
                 std::to_string(ranks));
    const PlanGroup g{mb.first_rank, mb.cp, mb.attention.get()};
    auto [it, fresh] = groups.emplace(mb.first_rank, g);
    if (!fresh && (it->second.cp != g.cp || it->second.attention != g.attention))
      return bad("the members of " + group_name(k, it->second) + " hold different plans (DP×CP rank " +
                 std::to_string(r) + ")");
  }
  std::vector<PlanGroup> out;
  int64_t next_free = 0;
  for (const auto& [first, g] : groups) {
    if (first < next_free) return bad(group_name(k, g) + " overlaps the group before it");
    if (g.attention->ranks != g.cp)
      return bad(group_name(k, g) + " runs a plan of " + std::to_string(g.attention->ranks) + " ranks");
    for (int64_t r = first; r < first + g.cp; ++r) {
      const PlanMicroBatch& mb = plan.micro_batches[static_cast<size_t>(r)][k];
      if (mb.first_rank != first || mb.attention.get() != g.attention)
        return bad("DP×CP rank " + std::to_string(r) + " is in " + group_name(k, g) + " but does not hold its micro-batch");
    }
    next_free = first + g.cp;
    out.push_back(g);
  }
  return out;
}

Expected<GroupRun> run_attention_group(const AttentionPlan& plan, Communicator& group, AttentionKernels& kernels,
                                       const OwnedInputs& inputs, const GroupRunOptions& options) {
  if (group.size() != plan.ranks)
    return runtime_error("a plan of " + std::to_string(plan.ranks) + " ranks on a group of " + std::to_string(group.size()));
  GroupRun run;
  if (auto s = group.barrier(); !s) return s.errors();
  const auto t0 = std::chrono::steady_clock::now();
  auto rep = execute_attention(plan, group, kernels, inputs.view(), options.backward);
  if (!rep) return rep.errors();
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.compute_s = rep->compute_s;
  run.wait_s = rep->wait_s;
  run.bytes_sent = rep->bytes_sent;
  run.bytes_received = rep->bytes_received;
  const RankBytes predicted = plan_bytes(plan, options.backward);
  run.plan_bytes_sent = predicted.sent[static_cast<size_t>(group.rank())];
  run.plan_bytes_received = predicted.received[static_cast<size_t>(group.rank())];
  if (!options.check) return run;
  // This member's sequences only: each member checks its own home slices.
  const std::vector<char> mine = home_sequences(plan, group.rank());
  const ReferenceAttention ref = reference_attention(plan, inputs, options.backward, &mine);
  run.reference_kind = ref.kind;
  for (const HomeResult& h : rep->home) {
    const CheckResult c = check_home(plan, h, ref, options.backward);
    run.check.wrong += c.wrong;
    run.check.checked += c.checked;
    run.check.max_abs_error = std::max(run.check.max_abs_error, c.max_abs_error);
    if (c.worst > run.check.worst || run.check.where.empty()) {
      run.check.worst = c.worst;
      run.check.where = c.where;
    }
  }
  return run;
}

uint64_t group_seed(uint64_t seed, size_t k, int64_t first_rank) {
  // SplitMix64 decorrelates nearby (round, rank) pairs; the pair is packed into one 64-bit offset.
  SplitMix64 mix(seed ^ (static_cast<uint64_t>(k) << 32 | static_cast<uint64_t>(first_rank)));
  return mix.next_u64();
}

Expected<RoundSeat> take_round_seat(const Plan& plan, size_t k, Communicator& world, uint64_t seed, RoundSplits* splits) {
  // Checked on every rank before any collective: a bad round stops every rank alike.
  if (static_cast<int64_t>(plan.micro_batches.size()) > world.size())
    return runtime_error("the plan has " + std::to_string(plan.micro_batches.size()) + " DP×CP ranks; the job has " +
                         std::to_string(world.size()));
  auto groups = plan_round_groups(plan, k);
  if (!groups) return groups.errors();
  const int me = world.rank();
  RoundSeat seat;
  seat.round = k;
  RoundRun& out = seat.place;
  for (size_t i = 0; i < groups->size(); ++i) {
    const PlanGroup& g = (*groups)[i];
    if (me >= g.first_rank && me < g.first_rank + g.cp) {
      out.group = static_cast<int32_t>(i);
      out.where = g;
    }
  }
  std::vector<std::pair<int64_t, int64_t>> key;
  for (const PlanGroup& g : *groups) key.emplace_back(g.first_rank, g.cp);
  const std::shared_ptr<Communicator>* known = nullptr;
  if (splits)
    if (auto it = splits->by_groups.find(key); it != splits->by_groups.end()) known = &it->second;
  if (known) {  // split as before: no collective on any rank
    if (out.idle()) return seat;
    seat.group = *known;
  } else {
    // Group colors are first ranks (< world.size()); idle ranks take colors above them, one each.
    const int color = out.idle() ? world.size() + me : static_cast<int>(out.where.first_rank);
    auto sub = world.split(color, me);
    if (!sub) return sub.errors();
    std::shared_ptr<Communicator> group = out.idle() ? nullptr : std::shared_ptr<Communicator>(std::move(*sub));
    if (splits) splits->by_groups.emplace(key, group);
    if (out.idle()) return seat;
    seat.group = std::move(group);
  }
  out.group_rank = seat.group->rank();
  if (seat.group->size() != out.where.cp || seat.group->rank() != me - out.where.first_rank)
    return runtime_error("rank " + std::to_string(me) + " of " + group_name(k, out.where) + " became rank " +
                         std::to_string(seat.group->rank()) + " of " + std::to_string(seat.group->size()) +
                         " after the split");
  seat.inputs = make_attention_inputs(*out.where.attention, group_seed(seed, k, out.where.first_rank));
  return seat;
}

Expected<RoundRun> run_round_seat(const RoundSeat& seat, AttentionKernels& kernels, const GroupRunOptions& options) {
  RoundRun out = seat.place;
  if (seat.idle()) return out;
  auto run = run_attention_group(*out.where.attention, *seat.group, kernels, seat.inputs, options);
  if (!run)
    return runtime_error("rank " + std::to_string(out.where.first_rank + out.group_rank) + " in " +
                         group_name(seat.round, out.where) + ": " + run.error_str());
  out.run = std::move(*run);
  return out;
}

Expected<RoundRun> execute_plan_round(const Plan& plan, size_t k, Communicator& world, AttentionKernels& kernels,
                                      uint64_t seed, const GroupRunOptions& options) {
  auto seat = take_round_seat(plan, k, world, seed);
  if (!seat) return seat.errors();
  return run_round_seat(*seat, kernels, options);
}

}  // namespace cpbench
