// dynamic_cp_dev.cpp — Megatron dev's packing-aware Dynamic-CP scheduler as
// references/context_parallel.md describes it ("Scheduler on Megatron dev"), written from that
// description and checked against the behaviour of Megatron-LM dev's next_hdp_group_packing_aware
// and DefaultDynamicCPScheduler.get_groups_and_subsamples (no code is copied).
//
// Choices where the reference text is open, each marked [Dn] below:
// [D1] Unit and cap. Load is per-rank work Σ L² / size, Megatron's workload() and main's unit:
//      attention, quadratic in L, is what differs between ranks holding equal tokens. The cap is
//      1.05 · L_tall · max_seqlen_per_dp_cp_rank as Megatron dev computes it; it equals 1.05 × the
//      tallest sample's own load L_tall² / cp_min when that sample fills its ranks (131072 tokens at
//      CP 2 under 65536). It bounds every group that keeps the token budget: Σ L² / size ≤
//      L_tall · Σ L / size ≤ L_tall · max_seqlen. So the cap never rejects an option the token check
//      allows; a sample is deferred only when no group of an allowed size has token room and too
//      few ranks are free for a new group. (L_tall² / cp_min as the cap would let a round of equal
//      short samples hold one sample per rank, which Megatron dev does not do.)
// [D2] Options are tried in Megatron's order: CP size ascending from cp_min; per size, the open
//      groups of exactly that size in opening order, then a new group; an option replaces the best
//      only when its projected max is strictly smaller. A projected max is never below the
//      round's current max, so the first option that keeps the max wins: short samples fill the
//      earliest-opened group of their size up to its token budget before a new group is opened.
// [D3] The round's tallest sample opens a group of its cp_min without trying larger sizes.
// [D4] "A new group on the least-loaded free ranks": free ranks all carry load 0, so only their
//      number matters here; ranks are assigned once the round is final [D7].
// [D5] A deferred sample does not end the round: the shorter samples behind it are still tried.
//      Deferred samples keep their order (length descending, ties by index) for the next round.
// [D6] Idle ranks: while ranks are idle, the earliest-opened group of the smallest size s doubles
//      (work halves) if 2s ≤ the largest power of two ≤ ranks and ≥ s ranks are idle (Megatron
//      tries the smallest size only). Otherwise the round is rebuilt as one group of all `ranks`
//      ranks: the round's samples, first fit in order while Σ L ≤ ranks · max_seqlen; the others
//      are deferred. With a power-of-two rank count every size divides ranks, so ≥ s ranks are idle
//      whenever any is and the fallback never happens. Sizes are the powers of two ≤ ranks, as in
//      main (newer Megatron dev allows only those dividing DP×CP, plus DP×CP itself).
// [D7] Rank layout as main's [C7]: groups sorted by size descending (ties: opening order), laid
//      contiguously from rank 0, so each is an aligned slice (offsets are sums of larger powers).
#include "core/strategies/dynamic_cp_dev.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

namespace cpbench {
namespace {

constexpr double kCapSlack = 0.05;  // Megatron dev: _DYNAMIC_CP_WORKLOAD_CAP_DELTA

using OpenGroup = DynamicCpOpenGroup;
double sq(int64_t length) { return squared_length(length); }

int log2_of(int64_t pow2) {
  int k = 0;
  while ((int64_t{1} << k) < pow2) ++k;
  return k;
}

class DevRoundBuilder {
 public:
  DevRoundBuilder(const std::vector<int64_t>& lengths, const std::vector<int64_t>& cp_min, int64_t ranks,
                  int64_t largest_pow2, int64_t max_seqlen)
      : lengths_(lengths), cp_min_(cp_min), ranks_(ranks), largest_pow2_(largest_pow2), max_seqlen_(max_seqlen),
        by_size_(static_cast<size_t>(log2_of(largest_pow2)) + 1) {}

  // Builds one round from `pending` (length descending); returns the deferred samples in order.
  std::vector<int64_t> build(const std::vector<int64_t>& pending, DynamicCpRound* round) {
    groups_.clear();
    for (std::vector<size_t>& list : by_size_) list.clear();
    free_ranks_ = ranks_;
    current_max_ = 0;
    cap_ = dynamic_cp_dev_round_cap(lengths_[pending.front()], max_seqlen_);
    open_group(pending.front(), cp_min_[pending.front()]);  // [D3]
    std::vector<int64_t> deferred;
    for (size_t i = 1; i < pending.size(); ++i) {
      if (!place(pending[i])) deferred.push_back(pending[i]);  // [D5]
    }
    if (!fill_idle_ranks()) deferred = use_full_group(pending);
    lay_out(round);
    return deferred;
  }

 private:
  static constexpr size_t kNewGroup = std::numeric_limits<size_t>::max();

  void open_group(int64_t id, int64_t size) {
    by_size_[static_cast<size_t>(log2_of(size))].push_back(groups_.size());
    groups_.push_back(OpenGroup{size, {}, 0, 0});
    free_ranks_ -= size;
    add(groups_.size() - 1, id);
  }

  void add(size_t g, int64_t id) {
    OpenGroup& og = groups_[g];
    og.seq_ids.push_back(id);
    og.tokens += lengths_[id];
    og.work += sq(lengths_[id]) / static_cast<double>(og.size);
    current_max_ = std::max(current_max_, og.work);
    max_room_ = 0;
    for (const OpenGroup& o : groups_) max_room_ = std::max(max_room_, o.size * max_seqlen_ - o.tokens);
  }

  // [D1] [D2] [D4] Places sample `id` at the option with the smallest projected max; false if none.
  bool place(int64_t id) {
    const int64_t length = lengths_[id];
    // A group with room for L tokens has size ≥ cp_min(L); without such a group or free ranks for a
    // new one there is no option (the cap never binds, [D1]).
    if (length > max_room_ && free_ranks_ < cp_min_[id]) return false;
    double best = std::numeric_limits<double>::infinity();
    size_t best_group = kNewGroup;
    int64_t best_size = 0;
    for (int64_t size = cp_min_[id]; size <= largest_pow2_; size *= 2) {
      const double work = sq(length) / static_cast<double>(size);
      for (size_t g : by_size_[static_cast<size_t>(log2_of(size))]) {
        const OpenGroup& og = groups_[g];
        if (og.tokens + length > size * max_seqlen_) continue;
        const double projected = std::max(current_max_, og.work + work);
        if (projected <= cap_ && projected < best) {
          best = projected;
          best_group = g;
          best_size = size;
        }
      }
      if (free_ranks_ >= size) {
        const double projected = std::max(current_max_, work);
        if (projected <= cap_ && projected < best) {
          best = projected;
          best_group = kNewGroup;
          best_size = size;
        }
      }
      if (best == current_max_) break;  // nothing later can be strictly smaller [D2]
    }
    if (best_size == 0) return false;
    if (best_group == kNewGroup) {
      open_group(id, best_size);
    } else {
      add(best_group, id);
    }
    return true;
  }

  // [D6] Doubles groups until no rank is idle; false when the full-group fallback is needed.
  bool fill_idle_ranks() {
    while (free_ranks_ > 0) {
      size_t smallest = 0;
      for (size_t g = 1; g < groups_.size(); ++g) {
        if (groups_[g].size < groups_[smallest].size) smallest = g;
      }
      OpenGroup& og = groups_[smallest];
      if (2 * og.size > largest_pow2_ || free_ranks_ < og.size) return false;
      free_ranks_ -= og.size;
      og.size *= 2;
      og.work /= 2;
    }
    return true;
  }

  // [D6] One group of all ranks: first fit of the round's samples within the token budget.
  std::vector<int64_t> use_full_group(const std::vector<int64_t>& pending) {
    OpenGroup all{ranks_, {}, 0, 0};
    std::vector<int64_t> deferred;
    for (int64_t id : pending) {
      if (all.tokens + lengths_[id] > ranks_ * max_seqlen_) {
        deferred.push_back(id);
        continue;
      }
      all.seq_ids.push_back(id);
      all.tokens += lengths_[id];
      all.work += sq(lengths_[id]) / static_cast<double>(ranks_);
    }
    groups_.assign(1, std::move(all));
    free_ranks_ = 0;
    return deferred;
  }

  // [D7]
  void lay_out(DynamicCpRound* round) const { lay_out_open_groups(groups_, round); }

  const std::vector<int64_t>& lengths_;
  const std::vector<int64_t>& cp_min_;
  int64_t ranks_, largest_pow2_, max_seqlen_;
  std::vector<OpenGroup> groups_;
  std::vector<std::vector<size_t>> by_size_;  // group indices per log2(size), in opening order
  int64_t free_ranks_ = 0;
  int64_t max_room_ = 0;  // the most tokens any open group can still take
  double current_max_ = 0;
  double cap_ = 0;
};

}  // namespace

double dynamic_cp_dev_round_cap(int64_t tallest_length, int64_t max_seqlen_per_dp_cp_rank) {
  return (1 + kCapSlack) * static_cast<double>(tallest_length) * static_cast<double>(max_seqlen_per_dp_cp_rank);
}

Expected<DynamicCpSchedule> schedule_dynamic_cp_dev(const std::vector<int64_t>& lengths, int64_t ranks,
                                              int64_t max_seqlen_per_dp_cp_rank) {
  auto sizes = dynamic_cp_min_cp_sizes(lengths, ranks, max_seqlen_per_dp_cp_rank);
  if (!sizes) return sizes.errors();
  const std::vector<int64_t>& cp_min = sizes->cp_min;
  const int64_t largest_pow2 = sizes->largest_pow2;
  std::vector<int64_t> pending(lengths.size());
  std::iota(pending.begin(), pending.end(), int64_t{0});
  std::sort(pending.begin(), pending.end(), [&](int64_t a, int64_t b) {
    return lengths[a] != lengths[b] ? lengths[a] > lengths[b] : a < b;
  });
  DevRoundBuilder builder(lengths, cp_min, ranks, largest_pow2, max_seqlen_per_dp_cp_rank);
  return build_rounds(builder, std::move(pending));
}

PlanOutcome plan_dynamic_cp_dev(const StrategyInput& in) {
  return plan_with_dynamic_cp_scheduler(in, schedule_dynamic_cp_dev, DynamicCpExecutor::packed);
}

}  // namespace cpbench
