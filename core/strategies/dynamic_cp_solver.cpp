// dynamic_cp_solver.cpp — the Dynamic-CP blog's solver as references/context_parallel.md describes it
// ("The blog's solver (NVIDIA draft PR, not merged)"), written from that description; no code is
// copied. For each candidate micro-batch count m the batch is planned into m rounds; the m with the
// least predicted step wins (ties: the smaller m).
//
// Choices where the reference text is silent or ambiguous, each marked [Sn] below:
// [S1] Candidates: m ∈ pp·{k0, …, k0 + max_microbatch_factor − 1} with k0 = max(1, ⌈m_lo / pp⌉),
//      m_lo = ⌈Σ L / (ranks · max_seqlen_per_dp_cp_rank)⌉: no rank holds more than that many tokens
//      per round, so a smaller m cannot hold the batch. For the blog's shape (PP 8) k0 = 1, i.e. the
//      reference's PP×{1..6}. With pp = 1 the bubble term vanishes and m is chosen by balance alone.
//      The cost model has no per-micro-batch overhead (GEMM efficiency, launch, P2P latency), so
//      with pp > 1 the largest feasible m usually wins; the reference's memory check (70 GiB) is
//      the tokens-per-rank bound here.
// [S2] Units: a sample's cost is dynamic_cp_sequence_flops(L).total() (one layer; the layer count is a
//      common factor). A sample split over c ranks costs cost / c on each: the reference has no CP
//      communication term, so CP looks free to this solver; the simulator prices it.
// [S3] Bucket target: W / (ranks · m), W = Σ cost. "Long" compares forward FLOPs with the same
//      target in forward FLOPs (Σ forward / (ranks · m)), as the reference words it. A sample's CP
//      size c is the smallest power of two ≥ cp_min(L) with forward / c ≤ 1.3 · that target,
//      capped at the largest power of two ≤ ranks; a sample gets c > 1 only when it is long or
//      does not fit one rank's memory.
// [S4] CP samples are placed first, in order (c descending, cost descending, id): each opens a new
//      group on the aligned free slice [first_rank, first_rank + c) of some round whose ranks have
//      the least accumulated cost (max over the slice; ties: earliest round, lowest rank). When no
//      round has a free aligned slice, it joins the group of size c with the least per-rank cost
//      whose tokens stay ≤ c · max_seqlen; when none has room, this m is infeasible.
// [S5] The other samples go largest cost first (ties: id) to the rank of least accumulated cost
//      (ties: lowest rank) that has room: "buckets go to the DP rank with least accumulated FLOPs"
//      applied per sample, which makes this LPT over ranks. On that rank the sample joins its
//      bucket of least cost — a size-1 group, or a free slot (round, rank) — whose Σ L stays ≤
//      max_seqlen_per_dp_cp_rank (ties: the one that raises its round's busiest rank least, then
//      the earliest round): "packed greedily by FLOPs", so a rank's m micro-batches come out
//      even. (Until session 11 the round-raise came first: a bucket just under its round's busiest
//      rank raised it least, so a few rounds ratcheted up to the token cap while others stayed
//      near empty — 64K beside 0.3K tokens, 11× the mean round, 37 of 48 rounds empty on
//      CommonCrawl — a pipeline the [S6] prediction could not see.) When no rank has room, it
//      joins the CP group with room for its tokens whose busiest rank ends least loaded (it then
//      runs at a CP size above its cp_min, as Megatron dev packs onto larger groups); when none
//      has room, this m is infeasible. Slots left empty are idle ranks in that round.
// [S6] Predicted step of m ("a pipeline simulator times each option"): max over ranks of its
//      Σ per-round cost + (pp − 1) / vp × its heaviest round — 1F1B's (interleaved when vp > 1)
//      fill and drain are paced by the heaviest micro-batch. With equal rounds this is the
//      reference's W·(m·vp + pp − 1) / (m·vp) comparison of bucket sizes.
#include "core/strategies/dynamic_cp_solver.h"

#include "core/strategies/varlen.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <set>
#include <string>
#include <utility>

namespace cpbench {
namespace {

constexpr double kLongSampleFactor = 1.3;    // "fwd > 1.3 × mean bucket target" (blog solver)
constexpr double kBackwardAttention = 2.77;  // backward / forward FLOPs of attention (blog solver)
constexpr double kBackwardLinear = 2.7;      // backward / forward FLOPs of the other layers (ditto)

struct Sample {
  int64_t id = 0;
  int64_t length = 0;
  int64_t cp_min = 1;
  double cost = 0;     // fwd + bwd (+ recompute), one layer
  double forward = 0;  // fwd, one layer
};

struct Group {
  int64_t round = 0;
  int64_t first_rank = 0;
  int64_t size = 1;
  std::vector<int64_t> seq_ids;
  int64_t tokens = 0;
  double work = 0;  // per-rank cost Σ cost / size
};

struct Candidate {
  DynamicCpSchedule schedule;
  double predicted = 0;
};

std::string sample_name(const Sample& s) {
  return "sequence " + std::to_string(s.id) + " (" + std::to_string(s.length) + " tokens)";
}

// Min over ranks of (key, rank), each leaf settable; kOff switches a leaf off.
constexpr double kOff = std::numeric_limits<double>::infinity();
class RankTree {
 public:
  explicit RankTree(int64_t n) {
    while (size_ < n) size_ *= 2;
    node_.assign(2 * static_cast<size_t>(size_), {kOff, -1});
  }
  void set(int64_t i, double key) {
    size_t p = static_cast<size_t>(i + size_);
    node_[p] = {key, key == kOff ? -1 : i};
    for (p /= 2; p >= 1; p /= 2) node_[p] = better(node_[2 * p], node_[2 * p + 1]);
  }
  int64_t min_index() const { return node_[1].second; }  // −1 when every leaf is off

 private:
  static std::pair<double, int64_t> better(const std::pair<double, int64_t>& a, const std::pair<double, int64_t>& b) {
    if (a.second < 0) return b;
    if (b.second < 0) return a;
    return a < b ? a : b;
  }
  int64_t size_ = 1;
  std::vector<std::pair<double, int64_t>> node_;
};

// Plans the batch for one micro-batch count m ([S3]–[S6]).
class RoundPlanner {
 public:
  RoundPlanner(const std::vector<Sample>& by_cost, const DynamicCpSolverOptions& opt, int64_t largest_pow2,
               double total_forward)
      : by_cost_(by_cost), opt_(opt), largest_pow2_(largest_pow2), total_forward_(total_forward) {}

  Expected<Candidate> plan(int64_t m) {
    m_ = m;
    const int64_t ranks = opt_.ranks;
    owner_.assign(static_cast<size_t>(m * ranks), -1);
    rank_work_.assign(static_cast<size_t>(ranks), 0.0);
    round_max_.assign(static_cast<size_t>(m), 0.0);
    rank_room_.assign(static_cast<size_t>(ranks), opt_.max_seqlen_per_dp_cp_rank);
    leaves_ = 1;
    while (leaves_ < ranks) leaves_ *= 2;
    work_max_.assign(2 * static_cast<size_t>(leaves_), 0.0);
    block_groups_.assign(2 * static_cast<size_t>(leaves_), {});
    block_room_.assign(2 * static_cast<size_t>(leaves_), 0);
    cp_blocks_.clear();
    groups_.clear();
    const double slots = static_cast<double>(m * ranks);
    const double long_forward = kLongSampleFactor * total_forward_ / slots;  // [S3]

    std::vector<std::pair<int64_t, const Sample*>> cp_samples;  // (c, sample)
    std::vector<const Sample*> short_samples;
    for (const Sample& s : by_cost_) {
      int64_t c = s.cp_min;
      while (c < largest_pow2_ && s.forward / static_cast<double>(c) > long_forward) c *= 2;
      if (c > 1) {
        cp_samples.emplace_back(c, &s);
      } else {
        short_samples.push_back(&s);
      }
    }
    // by_cost_ is sorted by (cost desc, id); a stable sort on c keeps that order within a size.
    std::stable_sort(cp_samples.begin(), cp_samples.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [c, s] : cp_samples) {
      Status placed = place_cp(*s, c);
      if (!placed.ok()) return placed.errors();
    }
    Status packed = pack_short(short_samples);
    if (!packed.ok()) return packed.errors();

    Candidate out;
    out.schedule.rounds.resize(static_cast<size_t>(m));
    for (const Group& g : groups_) {
      out.schedule.rounds[static_cast<size_t>(g.round)].groups.push_back(
          DynamicCpGroup{g.first_rank, g.size, g.seq_ids, g.work});
    }
    for (DynamicCpRound& r : out.schedule.rounds) {
      std::sort(r.groups.begin(), r.groups.end(),
                [](const DynamicCpGroup& a, const DynamicCpGroup& b) { return a.first_rank < b.first_rank; });
    }
    out.predicted = 0;  // [S6]
    for (int64_t k = 0; k < ranks; ++k) {
      double heaviest = 0;
      for (int64_t r = 0; r < m; ++r) {
        const int64_t g = owner(r, k);
        if (g >= 0) heaviest = std::max(heaviest, groups_[static_cast<size_t>(g)].work);
      }
      const double step = rank_work_[static_cast<size_t>(k)] +
                          heaviest * static_cast<double>(opt_.pp - 1) / static_cast<double>(opt_.vp);
      out.predicted = std::max(out.predicted, step);
    }
    return out;
  }

 private:
  int64_t& owner(int64_t round, int64_t rank) { return owner_[static_cast<size_t>(round * opt_.ranks + rank)]; }

  void add_to_group(size_t g, const Sample& s) {
    Group& group = groups_[g];
    const double per_rank = s.cost / static_cast<double>(group.size);
    group.seq_ids.push_back(s.id);
    group.tokens += s.length;
    group.work += per_rank;
    for (int64_t k = group.first_rank; k < group.first_rank + group.size; ++k) {
      rank_work_[static_cast<size_t>(k)] += per_rank;
      update_work_max(k);
    }
    double& round_max = round_max_[static_cast<size_t>(group.round)];
    round_max = std::max(round_max, group.work);
    if (group.size == 1) update_room(group.first_rank);
    else update_block_room(block_of(group));
  }

  // CP groups are aligned power-of-two slices of ranks, so each is a node of a binary tree over
  // the ranks (a "block"): work_max_ holds each node's busiest rank, the load cp_group_with_room
  // compares, the same for every round's group on that block.
  size_t block_of(const Group& g) const { return static_cast<size_t>(leaves_ / g.size + g.first_rank / g.size); }
  void update_work_max(int64_t rank) {
    size_t p = static_cast<size_t>(leaves_ + rank);
    work_max_[p] = rank_work_[static_cast<size_t>(rank)];
    for (p /= 2; p >= 1; p /= 2) work_max_[p] = std::max(work_max_[2 * p], work_max_[2 * p + 1]);
  }
  // The most tokens one of the block's CP groups can still take.
  void update_block_room(size_t block) {
    int64_t room = 0;
    for (size_t g : block_groups_[block]) {
      const Group& group = groups_[g];
      room = std::max(room, group.size * opt_.max_seqlen_per_dp_cp_rank - group.tokens);
    }
    block_room_[block] = room;
  }

  // rank_room_[rank]: the most tokens one of its rounds can still take as a one-rank bucket (a free
  // slot: the cap; its one-rank group: the cap less what it holds; a CP group's slot: none). It
  // only shrinks, and lets pack_short skip a full rank without scanning its m rounds — 100k
  // sequences on 512 ranks took 48 s with the scan (bench/planner_bench.cpp).
  void update_room(int64_t rank) {
    int64_t room = 0;
    for (int64_t r = 0; r < m_; ++r) {
      const int64_t g = owner(r, rank);
      if (g < 0) {
        room = opt_.max_seqlen_per_dp_cp_rank;
        break;
      }
      const Group& group = groups_[static_cast<size_t>(g)];
      if (group.size == 1) room = std::max(room, opt_.max_seqlen_per_dp_cp_rank - group.tokens);
    }
    rank_room_[static_cast<size_t>(rank)] = room;
  }

  size_t open_group(int64_t round, int64_t first_rank, int64_t size) {
    groups_.push_back(Group{round, first_rank, size, {}, 0, 0.0});
    const int64_t index = static_cast<int64_t>(groups_.size()) - 1;
    for (int64_t k = first_rank; k < first_rank + size; ++k) owner(round, k) = index;
    for (int64_t k = first_rank; k < first_rank + size; ++k) update_room(k);
    if (size > 1) {
      const size_t block = block_of(groups_.back());
      if (block_groups_[block].empty()) cp_blocks_.push_back(block);
      block_groups_[block].push_back(static_cast<size_t>(index));
      update_block_room(block);
    }
    return static_cast<size_t>(index);
  }

  // [S4]
  Status place_cp(const Sample& s, int64_t c) {
    std::vector<std::pair<double, int64_t>> slices;  // (max accumulated cost, first_rank)
    for (int64_t base = 0; base + c <= opt_.ranks; base += c) {
      double key = 0;
      for (int64_t k = base; k < base + c; ++k) key = std::max(key, rank_work_[static_cast<size_t>(k)]);
      slices.emplace_back(key, base);
    }
    std::sort(slices.begin(), slices.end());
    // Least key first; among equal keys the earliest round, then the lowest rank.
    int64_t best_round = -1, best_base = -1;
    double best_key = 0;
    for (const auto& [key, base] : slices) {
      if (best_round >= 0 && key > best_key) break;
      const int64_t limit = best_round >= 0 ? best_round : m_;  // only an earlier round can win now
      for (int64_t r = 0; r < limit; ++r) {
        bool free = true;
        for (int64_t k = base; k < base + c && free; ++k) free = owner(r, k) < 0;
        if (!free) continue;
        best_round = r, best_base = base, best_key = key;
        break;
      }
    }
    if (best_round >= 0) {
      add_to_group(open_group(best_round, best_base, c), s);
      return ok_status();
    }
    int64_t join = -1;
    for (size_t g = 0; g < groups_.size(); ++g) {
      const Group& group = groups_[g];
      if (group.size != c || group.tokens + s.length > c * opt_.max_seqlen_per_dp_cp_rank) continue;
      if (join < 0 || group.work < groups_[static_cast<size_t>(join)].work) join = static_cast<int64_t>(g);
    }
    if (join < 0) {
      return Error{"", "", sample_name(s) + " at CP size " + std::to_string(c) + " finds no free aligned slice of " +
                               std::to_string(c) + " ranks in " + std::to_string(m_) +
                               " micro-batches and no CP group of that size with room for it"};
    }
    add_to_group(static_cast<size_t>(join), s);
    return ok_status();
  }

  // [S5]
  Status pack_short(const std::vector<const Sample*>& samples) {
    // The least-loaded rank (ties: the lowest) among those with a round that has room for the
    // sample: a min-tree over ranks of (accumulated cost, rank), a rank's leaf switched off while
    // its room (update_room) is under the sample's length. Samples come in decreasing cost, so
    // lengths only fall: a switched-off rank waits in `waiting` (by room) until the length drops
    // to its room. Scanning ranks by load instead cost O(ranks) per sample: 48 s for 100k
    // sequences on 512 ranks (bench/planner_bench.cpp), under 1 s now.
    const int64_t ranks = opt_.ranks;
    RankTree tree(ranks);
    std::priority_queue<std::pair<int64_t, int64_t>> waiting;  // (room when queued, rank), largest room first
    auto refresh = [&](int64_t k, int64_t length) {
      const int64_t room = rank_room_[static_cast<size_t>(k)];
      if (room >= length) {
        tree.set(k, rank_work_[static_cast<size_t>(k)]);
      } else {
        tree.set(k, kOff);
        waiting.emplace(room, k);
      }
    };
    int64_t length = std::numeric_limits<int64_t>::max();
    for (int64_t k = 0; k < ranks; ++k) refresh(k, length);
    for (const Sample* s : samples) {
      if (s->length > length)  // not in decreasing order after all: re-evaluate every rank
        for (int64_t k = 0; k < ranks; ++k) refresh(k, s->length);
      length = s->length;
      while (!waiting.empty() && waiting.top().first >= length) {
        const auto [room, k] = waiting.top();
        waiting.pop();
        if (room == rank_room_[static_cast<size_t>(k)]) tree.set(k, rank_work_[static_cast<size_t>(k)]);  // else stale
      }
      const int64_t rank = tree.min_index();
      const int64_t round = rank >= 0 ? best_slot(rank, *s) : -1;
      size_t g = 0;
      if (round >= 0) {
        const int64_t held = owner(round, rank);
        g = held >= 0 ? static_cast<size_t>(held) : open_group(round, rank, 1);
      } else {
        const int64_t joined = cp_group_with_room(*s);
        if (joined < 0) {
          return Error{"", "", sample_name(*s) + " fits in no rank slot of the " + std::to_string(m_) +
                                   " micro-batches: every slot and CP group is full at max_seqlen_per_dp_cp_rank " +
                                   std::to_string(opt_.max_seqlen_per_dp_cp_rank)};
        }
        g = static_cast<size_t>(joined);
      }
      add_to_group(g, *s);
      const Group& group = groups_[g];
      for (int64_t k = group.first_rank; k < group.first_rank + group.size; ++k) refresh(k, length);
    }
    return ok_status();
  }

  // [S5] fallback: the CP group with room for s's tokens whose busiest rank ends least loaded
  // (ties: the earliest opened), so that s runs at a CP size above its cp_min; −1 when none.
  int64_t cp_group_with_room(const Sample& s) const {
    // Per block: every group on it has the same load (the block's busiest rank); the earliest
    // opened one with room stands for it. Scanning every group instead cost O(groups) per
    // sample: most of 100k sequences on 512 ranks land here (bench/planner_bench.cpp).
    int64_t best = -1;
    double best_load = 0;
    for (size_t block : cp_blocks_) {
      if (block_room_[block] < s.length) continue;
      const Group& first = groups_[block_groups_[block].front()];
      const double load = work_max_[block] + s.cost / static_cast<double>(first.size);
      if (best >= 0 && load > best_load) continue;
      for (size_t g : block_groups_[block]) {
        const Group& group = groups_[g];
        if (group.tokens + s.length > group.size * opt_.max_seqlen_per_dp_cp_rank) continue;
        if (best < 0 || load < best_load || static_cast<int64_t>(g) < best) best = static_cast<int64_t>(g), best_load = load;
        break;
      }
    }
    return best;
  }

  // The round of `rank` to put `s` in ([S5]): among its size-1 buckets (or free slots, cost 0)
  // with room for s's tokens, the one of least cost, then the one that raises its round's busiest
  // rank least, then the earliest; −1 when none has room.
  int64_t best_slot(int64_t rank, const Sample& s) {
    int64_t best = -1;
    double best_raise = 0, best_cost = 0;
    for (int64_t r = 0; r < m_; ++r) {
      const int64_t g = owner(r, rank);
      double cost = 0;
      if (g >= 0) {
        const Group& group = groups_[static_cast<size_t>(g)];
        if (group.size != 1 || group.tokens + s.length > opt_.max_seqlen_per_dp_cp_rank) continue;
        cost = group.work;
      }
      const double raise = std::max(0.0, cost + s.cost - round_max_[static_cast<size_t>(r)]);
      if (best < 0 || cost < best_cost || (cost == best_cost && raise < best_raise)) {
        best = r, best_raise = raise, best_cost = cost;
      }
    }
    return best;
  }

  const std::vector<Sample>& by_cost_;
  const DynamicCpSolverOptions& opt_;
  int64_t largest_pow2_;
  double total_forward_;
  int64_t m_ = 0;
  std::vector<int64_t> owner_;  // [round · ranks + rank] → group index, −1 when free
  std::vector<double> rank_work_;
  std::vector<double> round_max_;  // per round: the largest per-rank cost of any group
  std::vector<int64_t> rank_room_;  // per rank: see update_room
  int64_t leaves_ = 1;              // ranks rounded up to a power of two: the block tree's leaves
  std::vector<double> work_max_;    // [tree node] the busiest rank's accumulated cost below it
  std::vector<std::vector<size_t>> block_groups_;  // [tree node] its CP groups, in opening order
  std::vector<int64_t> block_room_;  // [tree node] see update_block_room
  std::vector<size_t> cp_blocks_;    // nodes with at least one CP group
  std::vector<Group> groups_;
};

Status check_inputs(const std::vector<int64_t>& lengths, const ModelShape& model, const DynamicCpSolverOptions& opt) {
  auto positive = [](int64_t v, const std::string& name) -> Status {
    if (v >= 1) return ok_status();
    return Error{"", "", name + " must be ≥ 1, got " + std::to_string(v)};
  };
  for (const auto& [v, name] : {std::pair<int64_t, const char*>{opt.ranks, "ranks (dp·cp)"},
                                {opt.max_seqlen_per_dp_cp_rank, "max_seqlen_per_dp_cp_rank"},
                                {opt.pp, "pp"},
                                {opt.vp, "vp"},
                                {opt.max_microbatch_factor, "max_microbatch_factor"},
                                {model.hidden, "model hidden"},
                                {model.ffn_hidden, "model ffn_hidden"},
                                {model.heads, "model heads"},
                                {model.kv_heads, "model kv_heads"}}) {
    Status s = positive(v, name);
    if (!s.ok()) return s;
  }
  if (model.heads % model.kv_heads != 0) {
    return Error{"", "", "model heads (" + std::to_string(model.heads) + ") must be a multiple of kv_heads (" +
                             std::to_string(model.kv_heads) + ")"};
  }
  if (lengths.empty()) return Error{"", "", "the batch has no sequences"};
  return ok_status();
}

}  // namespace

DynamicCpSequenceFlops dynamic_cp_sequence_flops(int64_t length, const ModelShape& model, bool full_recompute) {
  const double s = static_cast<double>(length);
  const double h = static_cast<double>(model.hidden);
  const double ffn = static_cast<double>(model.ffn_hidden);
  const double groups = static_cast<double>(model.heads) / static_cast<double>(model.kv_heads);
  const double gemm = 2 * s * h * h;
  const double qkv = gemm * (1 + 2 / groups);  // "gemm + 2·gemm/groups", as written
  const double out_proj = gemm;
  const double mlp = 2 * s * h * (model.gated_mlp ? 2 * ffn : ffn) + 2 * s * ffn * h;
  DynamicCpSequenceFlops f;
  f.attention_forward = 2 * 2 * s * s * h * 0.5;  // causal: half of the s×s scores
  f.linear_forward = qkv + out_proj + mlp;
  f.forward = f.attention_forward + f.linear_forward;
  f.backward = kBackwardAttention * f.attention_forward + kBackwardLinear * f.linear_forward;
  f.recompute = full_recompute ? f.forward : 0;
  return f;
}

Expected<DynamicCpSolverResult> solve_dynamic_cp(const std::vector<int64_t>& lengths, const ModelShape& model,
                                           const DynamicCpSolverOptions& opt) {
  Status valid = check_inputs(lengths, model, opt);
  if (!valid.ok()) return valid.errors();
  auto sizes = dynamic_cp_min_cp_sizes(lengths, opt.ranks, opt.max_seqlen_per_dp_cp_rank);
  if (!sizes) return sizes.errors();
  const int64_t largest_pow2 = sizes->largest_pow2;
  std::vector<Sample> samples(lengths.size());
  double total_forward = 0;
  int64_t total_tokens = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t L = lengths[i];
    Sample& s = samples[i];
    s.id = static_cast<int64_t>(i);
    s.length = L;
    s.cp_min = sizes->cp_min[i];
    const DynamicCpSequenceFlops f = dynamic_cp_sequence_flops(L, model, opt.full_recompute);
    s.cost = f.total();
    s.forward = f.forward;
    total_forward += s.forward;
    total_tokens += L;
  }
  std::stable_sort(samples.begin(), samples.end(), [](const Sample& a, const Sample& b) { return a.cost > b.cost; });

  // [S1]
  const int64_t per_round = opt.ranks * opt.max_seqlen_per_dp_cp_rank;
  const int64_t m_lo = (total_tokens + per_round - 1) / per_round;
  const int64_t k0 = std::max<int64_t>(1, (m_lo + opt.pp - 1) / opt.pp);
  RoundPlanner planner(samples, opt, largest_pow2, total_forward);
  Expected<DynamicCpSolverResult> best = Error{"", "", ""};
  std::string last_reason, tried;
  for (int64_t k = k0; k < k0 + opt.max_microbatch_factor; ++k) {
    const int64_t m = opt.pp * k;
    tried += (tried.empty() ? "" : ", ") + std::to_string(m);
    Expected<Candidate> c = planner.plan(m);
    if (!c.ok()) {
      last_reason = "at " + std::to_string(m) + " micro-batches, " + c.errors().list.front().message;
      continue;
    }
    if (!best.ok() || c->predicted < best->predicted_time_units) {
      best = DynamicCpSolverResult{std::move(c->schedule), m, c->predicted};
    }
  }
  if (!best.ok()) {
    return Error{"", "", "no micro-batch count in {" + tried + "} holds the batch on " + std::to_string(opt.ranks) +
                             " ranks: " + last_reason + "; raise max_microbatch_factor or ranks"};
  }
  return best;
}

PlanOutcome plan_dynamic_cp_solver(const StrategyInput& in) {
  const ParallelConfig& L = in.parallel;
  if (auto why = check_varlen_layout(in.model, L); !why.empty()) return PlanOutcome::infeasible(why);
  DynamicCpSolverOptions opt;
  opt.ranks = L.dp() * L.cp;
  opt.max_seqlen_per_dp_cp_rank = L.max_seqlen_per_dp_cp_rank;
  opt.pp = L.pp;
  opt.vp = L.vp;
  opt.full_recompute = L.recompute == "full";
  auto solved = solve_dynamic_cp(dynamic_cp_scheduled_lengths(in.batch.lengths, L), in.model, opt);
  if (!solved) return PlanOutcome::infeasible(solved.error_str());
  auto plan = plan_from_dynamic_cp_schedule(solved->schedule, in.batch.lengths, L, DynamicCpExecutor::packed);
  if (!plan) return PlanOutcome::error(plan.error_str());
  return finish_varlen_plan(in, std::move(*plan));
}

}  // namespace cpbench
