// dynamic_cp.cpp — Megatron main's BalancedCPScheduler as references/context_parallel.md
// describes it, written from that description (and checked against Megatron-LM's
// get_groups_and_subsamples / next_hdp_group behaviour; no code is copied).
//
// Choices where the reference text is ambiguous, each marked [Cn] below:
// [C1] No cap on a group's tokens: a sample joins any group of its CP size, as in Megatron main,
//      which runs a group's samples one by one (its executor: one sequence per micro-batch,
//      plan_from_dynamic_cp_schedule), so a rank holds one sample's L / size ≤
//      max_seqlen_per_dp_cp_rank tokens at a time. (Until session 36, when cpbench packed a
//      group's samples into one micro-batch, a sample joined only while Σ L / size stayed within
//      the cap.)
// [C2] Buckets: k = number of distinct cp_min among the samples still pending, target = total
//      work / k; a bucket closes before the next sample when it is non-empty and either the sample
//      would take it past 1.1 · target, or only as many samples remain as buckets still to open.
// [C3] Placement scans the buckets in order and takes the first head that can be placed (an
//      existing group of exactly its size, or enough free ranks); a new group is
//      preferred whenever free ranks suffice (its load, 0, is below any existing group's, as in
//      Megatron); otherwise the least-loaded group of that size (ties: the earliest opened).
// [C4] "Sizes start shrinking" = a sample needs a smaller CP size than the round's first sample;
//      from then on the round stops as soon as max − min ≤ 5% of max over all ranks (idle ranks
//      count as 0, so a round with idle ranks never stops early).
// [C5] Trim: while max − min > 5% of max and no rank is idle, remove the last-placed sample of the
//      most-loaded group (ties: earliest opened) when the group keeps ≥ 1 sample and the slack
//      strictly drops. Trimmed and unplaced samples go back, re-sorted by length descending
//      (ties by id), so every round starts from a sorted list.
// [C6] Idle ranks: repeatedly double a group of the smallest size that fits in the idle ranks
//      (ties: the most-loaded, since halving it helps balance most; Megatron takes the first) while
//      2·size ≤ the largest power of two ≤ ranks. Idle ranks left over (possible only when ranks
//      is not a power of two) stay idle.
// [C7] Rank layout: Megatron shifts groups to make room when it doubles one; here ranks are
//      assigned once the round is final: groups sorted by size descending (ties: opening order)
//      and laid contiguously from rank 0. Every offset is then a sum of powers of two ≥ the
//      current size, so every group is an aligned slice; the groups fit because Σ size ≤ ranks.
#include "core/strategies/dynamic_cp.h"

#include "core/strategies/varlen.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace cpbench {
namespace {

constexpr double kBalanceSlack = 0.05;  // "max − min ≤ 5% of max" (context_parallel.md)
constexpr double kBucketSlack = 0.10;   // "k equal-work buckets (10% slack)"

using OpenGroup = DynamicCpOpenGroup;
double sq(int64_t length) { return squared_length(length); }

class RoundBuilder {
 public:
  RoundBuilder(const std::vector<int64_t>& lengths, const std::vector<int64_t>& cp_min, int64_t ranks,
               int64_t largest_pow2)
      : lengths_(lengths), cp_min_(cp_min), ranks_(ranks), largest_pow2_(largest_pow2) {}

  // Builds one round from `pending` (sorted); returns the samples left for later rounds, sorted.
  std::vector<int64_t> build(const std::vector<int64_t>& pending, DynamicCpRound* round) {
    groups_.clear();
    free_ranks_ = ranks_;
    std::vector<std::vector<int64_t>> buckets = make_buckets(pending);
    std::vector<size_t> heads(buckets.size(), 0);
    size_t remaining = pending.size();
    const int64_t first_needed = cp_min_[pending.front()];
    bool check_balance = false;
    while (remaining > 0) {
      size_t b = 0;
      int64_t group = -1;
      for (; b < buckets.size(); ++b) {
        if (heads[b] == buckets[b].size()) continue;
        group = find_group(buckets[b][heads[b]]);
        if (group != kNone) break;
      }
      if (b == buckets.size()) break;  // nothing left fits this round
      const int64_t id = buckets[b][heads[b]++];
      --remaining;
      place(id, group);
      if (cp_min_[id] < first_needed) check_balance = true;  // [C4]
      if (check_balance && remaining > 0 && balanced()) break;
    }
    std::vector<int64_t> left;
    for (size_t b = 0; b < buckets.size(); ++b) left.insert(left.end(), buckets[b].begin() + heads[b], buckets[b].end());
    trim(&left);
    fill_idle_ranks();
    lay_out(round);
    // left ⊆ pending, which is sorted: keep pending's order (sort_pending on every round cost
    // O(n log n) per round, 1.8 s for 100k sequences over 431 rounds; bench/planner_bench.cpp).
    std::vector<char> kept(lengths_.size(), 0);
    for (int64_t id : left) kept[static_cast<size_t>(id)] = 1;
    left.clear();
    for (int64_t id : pending)
      if (kept[static_cast<size_t>(id)]) left.push_back(id);
    return left;
  }

  void sort_pending(std::vector<int64_t>* ids) const {
    std::sort(ids->begin(), ids->end(), [&](int64_t a, int64_t b) {
      return lengths_[a] != lengths_[b] ? lengths_[a] > lengths_[b] : a < b;
    });
  }

 private:
  static constexpr int64_t kNone = -2;
  static constexpr int64_t kNewGroup = -1;

  double work(int64_t id) const { return sq(lengths_[id]) / static_cast<double>(cp_min_[id]); }

  // [C2]
  std::vector<std::vector<int64_t>> make_buckets(const std::vector<int64_t>& pending) const {
    std::vector<int64_t> sizes;
    double total = 0;
    for (int64_t id : pending) {
      sizes.push_back(cp_min_[id]);
      total += work(id);
    }
    std::sort(sizes.begin(), sizes.end());
    const size_t k = static_cast<size_t>(std::unique(sizes.begin(), sizes.end()) - sizes.begin());
    const double target = total / static_cast<double>(k);
    std::vector<std::vector<int64_t>> buckets(1);
    double current = 0;
    for (size_t i = 0; i < pending.size(); ++i) {
      const double w = work(pending[i]);
      const size_t to_open_after = k > buckets.size() ? k - buckets.size() : 0;
      if (!buckets.back().empty() &&
          (current + w > (1 + kBucketSlack) * target || pending.size() - i <= to_open_after)) {
        buckets.emplace_back();
        current = 0;
      }
      buckets.back().push_back(pending[i]);
      current += w;
    }
    return buckets;
  }

  // [C3] Where sample `id` would go: kNewGroup, an open group's index, or kNone.
  int64_t find_group(int64_t id) const {
    const int64_t need = cp_min_[id];
    if (free_ranks_ >= need) return kNewGroup;
    int64_t best = kNone;
    for (size_t g = 0; g < groups_.size(); ++g) {
      const OpenGroup& og = groups_[g];
      if (og.size != need) continue;
      if (best == kNone || og.work < groups_[best].work) best = static_cast<int64_t>(g);
    }
    return best;
  }

  void place(int64_t id, int64_t group) {
    if (group == kNewGroup) {
      groups_.push_back(OpenGroup{cp_min_[id], {}, 0, 0});
      free_ranks_ -= cp_min_[id];
      group = static_cast<int64_t>(groups_.size()) - 1;
    }
    OpenGroup& og = groups_[group];
    og.seq_ids.push_back(id);
    og.tokens += lengths_[id];
    og.work += sq(lengths_[id]) / static_cast<double>(og.size);
  }

  // Max and min per-rank work over all ranks; idle ranks count as 0.
  std::pair<double, double> extremes() const {
    double hi = 0, lo = free_ranks_ > 0 ? 0 : groups_.front().work;
    for (const OpenGroup& g : groups_) {
      hi = std::max(hi, g.work);
      lo = std::min(lo, g.work);
    }
    return {hi, lo};
  }

  bool balanced() const {
    auto [hi, lo] = extremes();
    return hi - lo <= kBalanceSlack * hi;
  }

  // [C5]
  void trim(std::vector<int64_t>* left) {
    while (free_ranks_ == 0) {
      auto [hi, lo] = extremes();
      if (hi - lo <= kBalanceSlack * hi) return;
      size_t g = 0;
      while (groups_[g].work != hi) ++g;
      OpenGroup& og = groups_[g];
      if (og.seq_ids.size() <= 1) return;
      const int64_t id = og.seq_ids.back();
      const double saved = og.work;
      og.work -= sq(lengths_[id]) / static_cast<double>(og.size);
      auto [new_hi, new_lo] = extremes();
      if (new_hi - new_lo >= hi - lo) {
        og.work = saved;
        return;
      }
      og.seq_ids.pop_back();
      og.tokens -= lengths_[id];
      left->push_back(id);
    }
  }

  // [C6]
  void fill_idle_ranks() {
    for (;;) {
      int64_t best = -1;
      for (size_t g = 0; g < groups_.size(); ++g) {
        const OpenGroup& og = groups_[g];
        if (og.size > free_ranks_ || 2 * og.size > largest_pow2_) continue;
        if (best < 0 || og.size < groups_[best].size ||
            (og.size == groups_[best].size && og.work > groups_[best].work)) {
          best = static_cast<int64_t>(g);
        }
      }
      if (best < 0) return;
      OpenGroup& og = groups_[best];
      free_ranks_ -= og.size;
      og.size *= 2;
      og.work /= 2;
    }
  }

  // [C7]
  void lay_out(DynamicCpRound* round) const { lay_out_open_groups(groups_, round); }

  const std::vector<int64_t>& lengths_;
  const std::vector<int64_t>& cp_min_;
  int64_t ranks_, largest_pow2_;
  std::vector<OpenGroup> groups_;
  int64_t free_ranks_ = 0;
};

}  // namespace

int64_t dynamic_cp_min_cp_size(int64_t length, int64_t max_seqlen_per_dp_cp_rank) {
  const int64_t ranks_needed = (length + max_seqlen_per_dp_cp_rank - 1) / max_seqlen_per_dp_cp_rank;
  int64_t cp = 1;
  while (cp < ranks_needed) cp *= 2;
  return cp;
}

void lay_out_open_groups(const std::vector<DynamicCpOpenGroup>& open, DynamicCpRound* round) {
  std::vector<DynamicCpGroup> groups;
  for (const DynamicCpOpenGroup& og : open) groups.push_back(DynamicCpGroup{0, og.size, og.seq_ids, og.work});
  lay_out_aligned(std::move(groups), round);
}

void lay_out_aligned(std::vector<DynamicCpGroup> groups, DynamicCpRound* round) {
  std::stable_sort(groups.begin(), groups.end(), [](const DynamicCpGroup& a, const DynamicCpGroup& b) { return a.size > b.size; });
  int64_t next_rank = 0;
  for (DynamicCpGroup& g : groups) {
    g.first_rank = next_rank;
    next_rank += g.size;
    round->groups.push_back(std::move(g));
  }
}

Expected<DynamicCpMinSizes> dynamic_cp_min_cp_sizes(const std::vector<int64_t>& lengths, int64_t ranks,
                                        int64_t max_seqlen_per_dp_cp_rank) {
  if (ranks < 1) return Error{"", "", "ranks (dp·cp) must be ≥ 1, got " + std::to_string(ranks)};
  if (max_seqlen_per_dp_cp_rank < 1) {
    return Error{"", "", "max_seqlen_per_dp_cp_rank must be ≥ 1, got " + std::to_string(max_seqlen_per_dp_cp_rank)};
  }
  int64_t largest_pow2 = 1;
  while (2 * largest_pow2 <= ranks) largest_pow2 *= 2;
  std::vector<int64_t> cp_min(lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1) {
      return Error{"", "", "sequence " + std::to_string(i) + " has " + std::to_string(lengths[i]) +
                               " tokens; lengths must be ≥ 1"};
    }
    cp_min[i] = dynamic_cp_min_cp_size(lengths[i], max_seqlen_per_dp_cp_rank);
    if (cp_min[i] > largest_pow2) {
      return Error{"", "", "sequence " + std::to_string(i) + " has " + std::to_string(lengths[i]) +
                               " tokens and needs CP size " + std::to_string(cp_min[i]) +
                               " at max_seqlen_per_dp_cp_rank " + std::to_string(max_seqlen_per_dp_cp_rank) +
                               ", but the largest power-of-two group of " + std::to_string(ranks) +
                               " ranks has " + std::to_string(largest_pow2)};
    }
  }
  return DynamicCpMinSizes{std::move(cp_min), largest_pow2};
}

Expected<DynamicCpSchedule> schedule_dynamic_cp_main(const std::vector<int64_t>& lengths, int64_t ranks,
                                               int64_t max_seqlen_per_dp_cp_rank) {
  auto sizes = dynamic_cp_min_cp_sizes(lengths, ranks, max_seqlen_per_dp_cp_rank);
  if (!sizes) return sizes.errors();
  const std::vector<int64_t>& cp_min = sizes->cp_min;
  const int64_t largest_pow2 = sizes->largest_pow2;
  RoundBuilder builder(lengths, cp_min, ranks, largest_pow2);
  std::vector<int64_t> pending(lengths.size());
  std::iota(pending.begin(), pending.end(), int64_t{0});
  builder.sort_pending(&pending);
  return build_rounds(builder, std::move(pending));
}

namespace {

// Megatron main's hybrid CP does host work outside the model that the device waits for (every
// piece ends in a synchronization or a collective), counted in Megatron-LM at d98e8a64: every
// tensor op, device copy and collective call once, CPU-only tensor ops left out (they cost the host
// less than a launch), so the counts are approximate (±20%).
//   Per sequence, before and around its forward: hybrid_cp_schedule.py _get_new_data_iterator (the
//   partner CP size to the device, its TP broadcast, .item()); pretrain_gpt.py get_batch (each key to
//   the device); core/utils.py get_batch_on_this_tp_rank under hybrid CP (the sequence length, tokens,
//   labels, loss mask, positions, cu_seqlens with its size, padded cu_seqlens with its size,
//   max_seqlen and local_cp_size, each a TP broadcast); get_batch_on_this_cp_rank
//   (local_cp_size.item() twice, the per-sequence split's index ops); loss_func with the rerun state
//   machine's NaN check; num_tokens.item() after it. About 44 ops and 4 synchronizations.
constexpr FrameworkHostWork kHybridCpPerSequence{44, 4};
//   Per step, once the gradient buffer is zeroed (the data iterator is read inside
//   forward_backward_func), HybridCPDataLoaderWrapper.__next__ (core/datasets/data_schedule.py): the
//   sub-sample lengths to the device and their nonzero filter (3 ops, 1 sync);
//   data_schedule_utils.py _get_global_seqlens_and_ids, two all-gathers over DP into a buffer per
//   DP rank each (2·dp + 9 ops, 3 syncs); reroute_samples_to_hdp_ranks, which tests
//   `gid in global_ids_this_rank` — a device tensor: ==, any and .item(), 3 ops and a sync — for every
//   sub-sample the rank's DP peers (the ranks of its CP index) hold, twice (the send ids, the send
//   lengths), copies each of those it holds itself to the device per key (tokens, labels,
//   loss_mask, position_ids: the DP peers' sub-samples spread over its dp ranks) and per key
//   concatenates, allocates and runs all_to_all_single (3 ops); then
//   hybrid_cp_schedule.py _broadcast_num_samples_this_group (a barrier, two broadcasts, .item(),
//   .cpu(): 6 ops, 3 syncs). The all-to-alls join every rank: the step waits for the rank that
//   tests the most.
constexpr int64_t kHybridCpKeys = 4;

void set_hybrid_cp_host_work(const ParallelConfig& layout, Plan* plan) {
  const int64_t cp = std::max<int64_t>(1, layout.cp), dp = std::max<int64_t>(1, layout.dp());
  const int64_t pool = static_cast<int64_t>(plan->micro_batches.size());
  std::vector<int64_t> held(static_cast<size_t>(cp), 0);  // sub-samples held by the ranks of a CP index
  for (int64_t r = 0; r < pool; ++r)
    for (const PlanMicroBatch& mb : plan->micro_batches[r])
      if (!mb.lengths.empty()) ++held[static_cast<size_t>(r % cp)];
  const double most = static_cast<double>(*std::max_element(held.begin(), held.end()));
  const double tests = 2 * most, sent = std::ceil(most / static_cast<double>(dp)), keys = static_cast<double>(kHybridCpKeys);
  const FrameworkHostWork parts[] = {
      {3, 1},                                      // the lengths to the device, filtered
      {2 * static_cast<double>(dp) + 9, 3},        // _get_global_seqlens_and_ids
      {3 * tests, tests},                          // the membership tests
      {keys * (sent + 3), 0},                      // each key: its copies, concatenation, allocation, all-to-all
      {6, 3}};                                     // _broadcast_num_samples_this_group
  plan->host_per_step = {};
  for (const FrameworkHostWork& w : parts) {
    plan->host_per_step.ops += w.ops;
    plan->host_per_step.syncs += w.syncs;
  }
  plan->host_per_micro_batch = kHybridCpPerSequence;
}

}  // namespace

Expected<Plan> plan_from_dynamic_cp_schedule(const DynamicCpSchedule& schedule, const std::vector<int64_t>& lengths,
                                        const ParallelConfig& layout, DynamicCpExecutor executor) {
  Plan plan;
  plan.layout = layout;
  const int64_t pool = layout.dp() * layout.cp;
  for (size_t k = 0; k < schedule.rounds.size(); ++k)
    if (auto why = check_dynamic_cp_round(schedule.rounds[k], pool, static_cast<int64_t>(lengths.size())); !why.empty())
      return Error{"", "", "Dynamic-CP schedule, round " + std::to_string(k) + ": " + why};
  // A round where every rank is idle is no micro-batch at all (a solver may leave trailing
  // slots empty); it is dropped rather than run as an empty pipeline pass.
  DynamicCpSchedule kept;
  for (const DynamicCpRound& r : schedule.rounds)
    if (!r.groups.empty()) kept.rounds.push_back(r);
  const DynamicCpSchedule& schedule_used = kept;
  plan.layout.cp = 1;  // the CP size is chosen per micro-batch
  const int64_t sp = layout.sequence_parallel ? layout.tp : 1;
  const int64_t pad_to = dynamic_cp_pad_multiple(pool, sp);
  // Megatron main's executor (hybrid_cp_schedule.py, hybrid_context_parallel_forward_backward) runs
  // each of a round's sub-samples as a forward and backward step of its own, one sequence each
  // (`RerunDataIterator(iter([sample]))`), the host waiting for the device around each (the
  // partner CP size broadcast and `.item()` before its forward, `num_tokens.item()` after it), and
  // a barrier over DP×CP after the round: a round becomes as many micro-batches as its largest
  // group has sequences, a group with fewer idle for the rest. Dev and the solver pack a round's
  // sequences on a rank into one micro-batch.
  const bool per_sequence = executor == DynamicCpExecutor::per_sequence;
  std::vector<size_t> slots;  // each round's micro-batches
  for (const DynamicCpRound& r : schedule_used.rounds) {
    size_t most = 1;
    if (per_sequence)
      for (const DynamicCpGroup& g : r.groups) most = std::max(most, g.seq_ids.size());
    slots.push_back(most);
  }
  int64_t m = 0;
  for (size_t n : slots) m += static_cast<int64_t>(n);
  plan.pipeline_schedule = varlen_pipeline_schedule(plan.layout, &m);
  plan.micro_batches.assign(pool, std::vector<PlanMicroBatch>(m));
  if (per_sequence) plan.round_start.assign(static_cast<size_t>(m), false);
  size_t first = 0;  // the round's first micro-batch
  for (size_t k = 0; k < schedule_used.rounds.size(); first += slots[k], ++k) {
    if (per_sequence) plan.round_start[first] = true;
    for (const DynamicCpGroup& g : schedule_used.rounds[k].groups) {
      PlanMicroBatch mb;
      mb.cp = g.size;
      mb.first_rank = g.first_rank;
      // A group of the whole pool when the pool is no power of two (Megatron dev's fallback) splits
      // its sequences into 2·size chunks: its micro-batch is padded to that multiple instead (a
      // multiple of both, lcm, was 65,280 tokens per sequence on 255 ranks).
      mb.pad_to = pad_to % (2 * g.size) == 0 ? pad_to : 2 * g.size * sp;
      for (size_t i = 0; i < (per_sequence ? g.seq_ids.size() : 1); ++i) {
        mb.lengths.clear();
        if (per_sequence) mb.lengths.push_back(lengths[g.seq_ids[i]]);
        else
          for (int64_t id : g.seq_ids) mb.lengths.push_back(lengths[id]);
        for (int64_t r = g.first_rank; r < g.first_rank + g.size; ++r) plan.micro_batches[r][first + i] = mb;
      }
    }
  }
  if (per_sequence) set_hybrid_cp_host_work(layout, &plan);
  return plan;
}

// The lengths a Dynamic-CP scheduler places: each padded to dynamic_cp_pad_multiple, as the data loader
// pads a sample before any scheduler sees it (it may land on any group). Placing the unpadded
// lengths let padding break the per-rank token cap of the packed schedulers (dev, the solver): on a
// 256-rank pool a one-rank group of 64 sequences of 256 tokens held 64·512 padded tokens, and
// activations per GPU grew with the pool.
std::vector<int64_t> dynamic_cp_scheduled_lengths(const std::vector<int64_t>& lengths, const ParallelConfig& L) {
  const int64_t pad_to = dynamic_cp_pad_multiple(L.dp() * L.cp, L.sequence_parallel ? L.tp : 1);
  std::vector<int64_t> out(lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) out[i] = (lengths[i] + pad_to - 1) / pad_to * pad_to;
  return out;
}

PlanOutcome plan_with_dynamic_cp_scheduler(const StrategyInput& in, DynamicCpScheduler scheduler, DynamicCpExecutor executor) {
  const ParallelConfig& L = in.parallel;
  if (auto why = check_varlen_layout(in.model, L); !why.empty()) return PlanOutcome::infeasible(why);
  auto schedule = scheduler(dynamic_cp_scheduled_lengths(in.batch.lengths, L), L.dp() * L.cp, L.max_seqlen_per_dp_cp_rank);
  if (!schedule) return PlanOutcome::infeasible(schedule.error_str());
  auto plan = plan_from_dynamic_cp_schedule(*schedule, in.batch.lengths, L, executor);
  if (!plan) return PlanOutcome::error(plan.error_str());
  return finish_varlen_plan(in, std::move(*plan));
}


// Megatron main synchronizes DP×CP after every round (references/context_parallel.md).
PlanOutcome plan_dynamic_cp(const StrategyInput& in) {
  return plan_with_dynamic_cp_scheduler(in, schedule_dynamic_cp_main, DynamicCpExecutor::per_sequence);
}

}  // namespace cpbench
