// attention_plan.cpp — payload bytes, derived backward transfers and the well-formedness check of
// an AttentionPlan.
// defines: AttnSlice::contains, attn_tensor_name, transfer_bytes, forward_transfers,
//          backward_transfers, plan_bytes, home_of, check_attention_plan
#include "core/plan/attention_plan.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <sstream>
#include <utility>

namespace cpbench {

namespace {

constexpr double kLseBytes = 4.0;  // the log-sum-exp is fp32 whatever the values' dtype

std::optional<AttnSlice> intersect(const AttnSlice& a, const AttnSlice& b) {
  if (a.seq != b.seq) return std::nullopt;
  AttnSlice s{a.seq, std::max(a.tok_begin, b.tok_begin), std::min(a.tok_end, b.tok_end),
              std::max(a.head_begin, b.head_begin), std::min(a.head_end, b.head_end)};
  if (s.tok_begin >= s.tok_end || s.head_begin >= s.head_end) return std::nullopt;
  return s;
}

// True when one of `slices` contains `s`: the runtime reads a tile's input from one buffer.
bool held(const AttnSlice& s, const std::vector<AttnSlice>& slices) {
  return std::any_of(slices.begin(), slices.end(), [&](const AttnSlice& h) { return h.contains(s); });
}

// Whether held slices with all of s's heads cover s's tokens, in one piece or several: a tile's
// input the executor can assemble from token pieces (a transfer sends one held slice: `held`).
bool assembles(const AttnSlice& s, const std::vector<AttnSlice>& slices) {
  if (held(s, slices)) return true;  // one buffer: the common case, without collecting runs
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (const AttnSlice& h : slices)
    if (h.seq == s.seq && h.head_begin <= s.head_begin && h.head_end >= s.head_end) runs.push_back({h.tok_begin, h.tok_end});
  std::sort(runs.begin(), runs.end());
  int64_t reach = s.tok_begin;
  for (const auto& [b, e] : runs) {
    if (b > reach) break;
    reach = std::max(reach, e);
  }
  return reach >= s.tok_end;
}

// `region` cut at every token and head bound of `slices` that falls inside it: cells that each
// slice either contains or misses.
std::vector<AttnSlice> cells(const AttnSlice& region, const std::vector<AttnSlice>& slices) {
  std::vector<int64_t> toks = {region.tok_begin, region.tok_end};
  std::vector<int32_t> heads = {region.head_begin, region.head_end};
  for (const AttnSlice& c : slices) {
    if (c.seq != region.seq) continue;
    for (int64_t t : {c.tok_begin, c.tok_end})
      if (t > region.tok_begin && t < region.tok_end) toks.push_back(t);
    for (int32_t h : {c.head_begin, c.head_end})
      if (h > region.head_begin && h < region.head_end) heads.push_back(h);
  }
  std::sort(toks.begin(), toks.end());
  toks.erase(std::unique(toks.begin(), toks.end()), toks.end());
  std::sort(heads.begin(), heads.end());
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
  std::vector<AttnSlice> out;
  for (size_t i = 0; i + 1 < toks.size(); ++i)
    for (size_t j = 0; j + 1 < heads.size(); ++j) out.push_back({region.seq, toks[i], toks[i + 1], heads[j], heads[j + 1]});
  return out;
}

// True when the union of `pieces` covers `s` (tokens × heads). Pieces of other sequences are
// ignored. Cost O(n³) in the pieces that intersect s: fine for the few slices a rank holds.
bool covered(const AttnSlice& s, const std::vector<AttnSlice>& pieces) {
  std::vector<AttnSlice> clipped;
  for (const AttnSlice& p : pieces) {
    if (p.contains(s)) return true;
    if (auto c = intersect(p, s)) clipped.push_back(*c);
  }
  for (const AttnSlice& cell : cells(s, clipped))
    if (std::none_of(clipped.begin(), clipped.end(), [&](const AttnSlice& c) { return c.contains(cell); })) return false;
  return true;
}

// The home slices by sequence, in rank order: splitting a slice by home then reads only its own
// sequence's homes rather than every rank's (a packed batch has thousands of home slices).
class HomeIndex {
 public:
  explicit HomeIndex(const AttentionPlan& plan) : by_seq_(plan.seq_lengths.size()) {
    for (int32_t r = 0; r < static_cast<int32_t>(plan.home.size()); ++r)
      for (const AttnSlice& h : plan.home[r])
        if (h.seq >= 0 && h.seq < static_cast<int32_t>(by_seq_.size())) by_seq_[h.seq].emplace_back(r, h);
  }
  // `s` cut along the home slices: (home rank, piece) for every home slice it intersects.
  std::vector<std::pair<int32_t, AttnSlice>> split(const AttnSlice& s) const {
    std::vector<std::pair<int32_t, AttnSlice>> out;
    if (s.seq < 0 || s.seq >= static_cast<int32_t>(by_seq_.size())) return out;
    for (const auto& [r, h] : by_seq_[s.seq])
      if (auto c = intersect(h, s)) out.emplace_back(r, *c);
    return out;
  }

 private:
  std::vector<std::vector<std::pair<int32_t, AttnSlice>>> by_seq_;
};

// Distinct slices in first-appearance order, without those contained in another one.
std::vector<AttnSlice> maximal_distinct(const std::vector<AttnSlice>& slices) {
  std::vector<AttnSlice> distinct;
  for (const AttnSlice& s : slices) {
    if (std::find(distinct.begin(), distinct.end(), s) == distinct.end()) distinct.push_back(s);
  }
  std::vector<AttnSlice> out;
  for (size_t i = 0; i < distinct.size(); ++i) {
    bool inside = false;
    for (size_t j = 0; j < distinct.size() && !inside; ++j) inside = j != i && distinct[j].contains(distinct[i]);
    if (!inside) out.push_back(distinct[i]);
  }
  return out;
}

std::string str(const AttnSlice& s) {
  std::ostringstream o;
  o << "sequence " << s.seq << " tokens [" << s.tok_begin << ", " << s.tok_end << ") heads [" << s.head_begin << ", "
    << s.head_end << ")";
  return o.str();
}

// Problems found so far; the check reports the first few, not thousands of consequences.
struct Problems {
  std::vector<std::string> list;
  size_t total = 0;  // including those not kept
  void add(std::string p) {
    ++total;
    if (list.size() < 8) list.push_back(std::move(p));
  }
  bool full() const { return list.size() >= 8; }
  std::string str() const {
    std::string joined;
    for (const std::string& p : list) joined += (joined.empty() ? "" : "; ") + p;
    return joined;
  }
};

// A slice lies inside its sequence and the heads; K/V slices start and end on multiples of g.
bool check_slice(const AttentionPlan& p, const AttnSlice& s, bool kv, const std::string& where, Problems& out) {
  const int32_t g = std::max(1, p.group());
  const size_t before = out.total;
  if (s.seq < 0 || s.seq >= static_cast<int32_t>(p.seq_lengths.size())) {
    out.add(where + ": sequence " + std::to_string(s.seq) + " does not exist");
  } else if (s.tok_begin < 0 || s.tok_begin >= s.tok_end || s.tok_end > p.seq_lengths[s.seq]) {
    out.add(where + ": " + str(s) + " is empty or outside the sequence's " + std::to_string(p.seq_lengths[s.seq]) +
            " tokens");
  } else if (s.head_begin < 0 || s.head_begin >= s.head_end || s.head_end > p.heads_q) {
    out.add(where + ": " + str(s) + " is empty or outside the " + std::to_string(p.heads_q) + " query heads");
  } else if (kv && (s.head_begin % g != 0 || s.head_end % g != 0)) {
    out.add(where + ": " + str(s) + " splits a KV head (query heads per KV head g = " + std::to_string(g) + ")");
  }
  return out.total == before;
}

// A tile's q and kv lie inside the plan and are of one sequence and the same heads.
bool check_tile(const AttentionPlan& p, const AttnTile& t, const std::string& who, Problems& out) {
  const bool q_ok = check_slice(p, t.q, true, who + " q", out);
  if (!check_slice(p, t.kv, true, who + " kv", out) || !q_ok) return false;
  if (t.q.seq != t.kv.seq || t.q.head_begin != t.kv.head_begin || t.q.head_end != t.kv.head_end) {
    out.add(who + ": q " + str(t.q) + " and kv " + str(t.kv) + " differ in sequence or heads");
    return false;
  }
  return true;
}

// A transfer runs between two ranks of the plan and carries a slice inside it. False when the
// endpoints are wrong (the slice's problems are reported without stopping the caller).
bool check_transfer(const AttentionPlan& p, const AttnTransfer& t, const std::string& where, Problems& out) {
  if (t.src < 0 || t.src >= p.ranks || t.dst < 0 || t.dst >= p.ranks || t.src == t.dst) {
    out.add(where + ": " + std::to_string(t.src) + " -> " + std::to_string(t.dst) +
            " is not a transfer between two ranks of " + std::to_string(p.ranks));
    return false;
  }
  check_slice(p, t.slice, t.tensor == AttnTensor::kv || t.tensor == AttnTensor::dkv, where, out);
  return true;
}

// Every token of every sequence has exactly one home, and home slices carry all heads.
void check_homes(const AttentionPlan& p, Problems& out) {
  std::vector<std::vector<std::pair<AttnSlice, int32_t>>> by_seq(p.seq_lengths.size());
  for (int32_t r = 0; r < static_cast<int32_t>(p.home.size()); ++r) {
    for (const AttnSlice& h : p.home[r]) {
      // A home holds whole K/V heads: its query heads start and end on multiples of g.
      if (check_slice(p, h, true, "home of rank " + std::to_string(r), out) && h.seq >= 0 &&
          h.seq < static_cast<int32_t>(by_seq.size()))
        by_seq[h.seq].emplace_back(h, r);
    }
  }
  // Every (token, head) of a sequence has exactly one home: cut the sequence at every home's
  // token and head bounds and count the homes holding each cell.
  for (size_t s = 0; s < by_seq.size() && !out.full(); ++s) {
    const auto& v = by_seq[s];
    std::vector<AttnSlice> homes;
    for (const auto& [h, r] : v) homes.push_back(h);
    for (const AttnSlice& cell : cells({static_cast<int32_t>(s), 0, p.seq_lengths[s], 0, p.heads_q}, homes)) {
      std::vector<int32_t> holders;
      for (const auto& [h, r] : v)
        if (h.contains(cell)) holders.push_back(r);
      if (holders.size() == 1) continue;
      out.add(str(cell) + (holders.empty() ? " has no home"
                                           : " has " + std::to_string(holders.size()) + " homes (ranks " +
                                                 std::to_string(holders[0]) + " and " + std::to_string(holders[1]) + ")"));
      if (out.full()) return;
    }
  }
}

// Every allowed (query, key, head) is computed by exactly one tile. Per sequence and per head
// segment (cut at every tile's head bounds) each query row's key intervals are swept against
// the mask row: O(Σ tile rows · segments + Σ L · segments · log) time, O(Σ tile rows) memory.
void check_coverage(const AttentionPlan& p, const std::vector<const AttnTile*>& tiles, int32_t seq, Problems& out) {
  const int64_t L = p.seq_lengths[seq];
  std::vector<int32_t> cuts = {0, p.heads_q};
  for (const AttnTile* t : tiles) cuts.insert(cuts.end(), {t->q.head_begin, t->q.head_end});
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    std::vector<std::vector<std::pair<int64_t, int64_t>>> rows(L);  // [query] key intervals
    for (const AttnTile* t : tiles) {
      if (t->q.head_begin > cuts[c] || t->q.head_end < cuts[c + 1]) continue;
      for (int64_t q = t->q.tok_begin; q < t->q.tok_end; ++q) rows[q].emplace_back(t->kv.tok_begin, t->kv.tok_end);
    }
    for (int64_t q = 0; q < L; ++q) {
      const KeyRanges m = mask_row(p.mask, L, q);
      std::vector<std::pair<int64_t, int>> events = {{0, 0},      {L, 0},        {m.begin0, 0},
                                                     {m.end0, 0}, {m.begin1, 0}, {m.end1, 0}};
      for (const auto& [b, e] : rows[q]) events.insert(events.end(), {{b, +1}, {e, -1}});
      std::sort(events.begin(), events.end());
      int count = 0;
      for (size_t i = 0; i + 1 < events.size(); ++i) {
        count += events[i].second;
        const int64_t b = events[i].first, e = events[i + 1].first;
        if (b >= e || count == 1) continue;
        const int64_t allowed = std::max<int64_t>(0, std::min(e, m.end0) - std::max(b, m.begin0)) +
                                std::max<int64_t>(0, std::min(e, m.end1) - std::max(b, m.begin1));
        if (allowed > 0) {
          out.add("sequence " + std::to_string(seq) + " heads [" + std::to_string(cuts[c]) + ", " +
                  std::to_string(cuts[c + 1]) + ") query " + std::to_string(q) + ": keys [" + std::to_string(b) + ", " +
                  std::to_string(e) + ") allowed by the " + mask_kind_name(p.mask.kind) + " mask are computed " +
                  std::to_string(count) + " times");
          return;
        }
      }
    }
  }
}

}  // namespace

bool AttnSlice::contains(const AttnSlice& s) const {
  return seq == s.seq && tok_begin <= s.tok_begin && s.tok_end <= tok_end && head_begin <= s.head_begin &&
         s.head_end <= head_end;
}

const char* attn_tensor_name(AttnTensor t) {
  switch (t) {
    case AttnTensor::q: return "q";
    case AttnTensor::kv: return "kv";
    case AttnTensor::out: return "out";
    case AttnTensor::dout: return "dout";
    case AttnTensor::dq: return "dq";
    case AttnTensor::dkv: return "dkv";
  }
  return "?";
}

namespace {

// The last stage (at or after `from`) whose tiles on a rank touch a slice on the Q side (q, dout,
// out, dq: through the tiles' q) or the KV side (kv, dkv: through their kv). Indexed once per plan
// by (rank, side, sequence): scanning every later stage's tiles for every transfer made the
// backward's derivation most of a DCP experiment's run time.
class TouchIndex {
 public:
  explicit TouchIndex(const AttentionPlan& plan) : by_rank_side_(2 * static_cast<size_t>(std::max(0, plan.ranks))) {
    for (size_t st = 0; st < plan.stages.size(); ++st)
      for (size_t r = 0; r < plan.stages[st].tiles.size() && r < static_cast<size_t>(plan.ranks); ++r)
        for (const AttnTile& tile : plan.stages[st].tiles[r])
          for (const bool kv_side : {false, true}) {
            const AttnSlice& s = kv_side ? tile.kv : tile.q;
            by_rank_side_[2 * r + kv_side][s.seq].emplace_back(st, &s);
          }
  }
  // −1 when no tile of stage ≥ from touches it. A list is in stage order: the first hit from
  // the back is the last stage.
  int64_t last(int32_t rank, bool kv_side, const AttnSlice& slice, size_t from) const {
    if (rank < 0 || 2 * static_cast<size_t>(rank) >= by_rank_side_.size()) return -1;
    const auto& by_seq = by_rank_side_[2 * static_cast<size_t>(rank) + kv_side];
    auto it = by_seq.find(slice.seq);
    if (it == by_seq.end()) return -1;
    for (auto e = it->second.rbegin(); e != it->second.rend() && e->first >= from; ++e)
      if (intersect(*e->second, slice)) return static_cast<int64_t>(e->first);
    return -1;
  }

 private:
  // [2 · rank + side] -> sequence -> (stage, slice) in stage order.
  std::vector<std::unordered_map<int32_t, std::vector<std::pair<size_t, const AttnSlice*>>>> by_rank_side_;
};

using SliceKey = std::tuple<int32_t, int32_t, int32_t, int64_t, int64_t, int32_t, int32_t>;  // rank, tensor, slice
SliceKey key_of(int32_t rank, AttnTensor t, const AttnSlice& s) {
  return {rank, static_cast<int32_t>(t), s.seq, s.tok_begin, s.tok_end, s.head_begin, s.head_end};
}
struct SliceKeyHash {
  // Each field mixed in by splitmix64's finalizer: slices of a plan differ in a few low bits.
  static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  size_t operator()(const SliceKey& k) const {
    uint64_t h = 0;
    std::apply([&](auto... v) { ((h = mix(h + 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(v))), ...); }, k);
    return h;
  }
};

// The pipelined backward: the forward's paths run again. Phase i (0 … stages + 1, more when a
// relay chain runs late) runs stage i − 1's tiles. Inputs: every forward transfer of stage i again
// in phase i (a Q slice brings its dO and final O along). Gradients: a rank's partial of a slice it
// received travels on with the slice when the rank forwarded it to exactly one rank (a ring: the
// running dK/dV goes round with K/V and ends at its owner), otherwise it goes home; it leaves in the
// phase after the rank's last tile that touches the slice, and after the partial it merges
// arrived. A slice received by a relay (two-phase) returns its partial to the relay instead.
std::vector<AttnBackwardPhase> relayed_backward(const AttentionPlan& plan) {
  const size_t stages = plan.stages.size();
  std::vector<AttnBackwardPhase> phases(stages + 2);
  auto phase = [&](size_t i) -> AttnBackwardPhase& {
    while (phases.size() <= i) phases.push_back({});
    return phases[i];
  };
  for (size_t i = 1; i <= stages; ++i) phases[i].tiles = plan.stages[i - 1].tiles;
  // Where each received slice goes next in the forward: (rank, tensor, slice) -> its forwards, in
  // stage order. A sorted list rather than a hash map of lists: plans of 10⁵ transfers.
  struct Onward {
    SliceKey key;
    size_t stage;
    int32_t dst;
  };
  std::vector<Onward> forwards;
  for (size_t i = 0; i < stages; ++i)
    for (const AttnTransfer& t : plan.stages[i].transfers) {
      if (t.tensor != AttnTensor::q && t.tensor != AttnTensor::kv) continue;  // a forward output
      phase(i).transfers.push_back(t);
      if (t.tensor == AttnTensor::q)
        for (AttnTensor x : {AttnTensor::dout, AttnTensor::out})
          phase(i).transfers.push_back({t.src, t.dst, x, t.slice, t.relay});
      forwards.push_back({key_of(t.src, t.tensor, t.slice), i, t.dst});
    }
  const auto by_key = [](const Onward& a, const Onward& b) { return a.key < b.key; };
  std::stable_sort(forwards.begin(), forwards.end(), by_key);
  const TouchIndex touch(plan);
  const HomeIndex homes(plan);
  std::unordered_map<SliceKey, size_t, SliceKeyHash> merged_after;  // (rank, tensor, slice) -> phase its incoming partial arrives in
  merged_after.reserve(forwards.size());
  // A relayed slice's partial goes back to its relay, inside the node, and the relay's summed
  // partial crosses the network once: relays first, so the relay knows when they arrive.
  for (const bool relays : {true, false})
  for (size_t i = 0; i < stages; ++i)
    for (const AttnTransfer& t : plan.stages[i].transfers) {
      if (t.tensor != AttnTensor::q && t.tensor != AttnTensor::kv) continue;
      if (t.relay != relays) continue;
      const bool kv_side = t.tensor == AttnTensor::kv;
      const AttnTensor grad = kv_side ? AttnTensor::dkv : AttnTensor::dq;
      const int32_t r = t.dst;
      size_t when = i + 1;  // not before the slice arrived
      if (const int64_t last = touch.last(r, kv_side, t.slice, i); last >= 0)
        when = std::max(when, static_cast<size_t>(last) + 2);
      if (auto m = merged_after.find(key_of(r, grad, t.slice)); m != merged_after.end()) when = std::max(when, m->second + 1);
      if (t.relay) {
        phase(when).transfers.push_back({r, t.src, grad, t.slice});
        size_t& merged = merged_after[key_of(t.src, grad, t.slice)];
        merged = std::max(merged, when);
        continue;
      }
      // The rank's later forwards of the slice: the partial follows one, else goes home.
      const Onward probe{key_of(r, t.tensor, t.slice), 0, 0};
      const auto [first, end] = std::equal_range(forwards.begin(), forwards.end(), probe, by_key);
      const Onward* onward = nullptr;
      size_t later = 0;
      for (auto f = first; f != end; ++f)
        if (f->stage > i && later++ == 0) onward = &*f;
      if (later == 1) {
        phase(when).transfers.push_back({r, onward->dst, grad, t.slice});
        merged_after[key_of(onward->dst, grad, t.slice)] = when;
      } else {
        for (const auto& [h, piece] : homes.split(t.slice))
          if (h != r) phase(when).transfers.push_back({r, h, grad, piece});
      }
    }
  return phases;
}

}  // namespace

std::vector<AttnBackwardPhase> backward_phases(const AttentionPlan& plan) {
  if (!plan.backward.empty()) return plan.backward;
  if (plan.pipelined_backward) return relayed_backward(plan);
  const BackwardTransfers bt = backward_transfers(plan);
  std::vector<AttnBackwardPhase> phases;
  phases.push_back({bt.inputs, {}});
  for (const AttnStage& st : plan.stages) phases.push_back({{}, st.tiles});
  phases.push_back({bt.returns, {}});
  return phases;
}

MaskSpec tile_work_mask(const AttentionPlan& plan) {
  return plan.causal_envelope_work ? MaskSpec{MaskKind::causal} : plan.mask;
}

int64_t tile_work_pairs(const AttentionPlan& plan, const AttnTile& tile) {
  return mask_pairs_in_tile(tile_work_mask(plan), plan.seq_lengths[tile.q.seq], tile.q.tok_begin, tile.q.tok_end,
                            tile.kv.tok_begin, tile.kv.tok_end);
}

double transfer_bytes(const AttentionPlan& plan, const AttnTransfer& t) {
  const double tokens = static_cast<double>(t.slice.tokens()), heads = t.slice.heads(), d = plan.head_dim;
  const double kv_heads = heads / std::max(1, plan.group());
  const double value = plan.wire_bytes(t.tensor);
  switch (t.tensor) {
    case AttnTensor::q:
    case AttnTensor::dout:
    case AttnTensor::dq: return tokens * heads * d * value;
    case AttnTensor::kv:
    case AttnTensor::dkv: return 2 * tokens * kv_heads * d * value;  // K and V
    case AttnTensor::out: return tokens * heads * (d * value + kLseBytes);   // O and one LSE per row
  }
  return 0;
}

std::vector<AttnTransfer> forward_transfers(const AttentionPlan& plan) {
  std::vector<AttnTransfer> out;
  for (const AttnStage& st : plan.stages) out.insert(out.end(), st.transfers.begin(), st.transfers.end());
  out.insert(out.end(), plan.gather_out.begin(), plan.gather_out.end());
  return out;
}

BackwardTransfers backward_transfers(const AttentionPlan& plan) {
  BackwardTransfers bt;
  const HomeIndex homes(plan);
  for (int32_t r = 0; r < plan.ranks; ++r) {
    std::vector<AttnSlice> qs, kvs;
    for (const AttnStage& st : plan.stages) {
      if (r >= static_cast<int32_t>(st.tiles.size())) continue;
      for (const AttnTile& t : st.tiles[r]) {
        qs.push_back(t.q);
        kvs.push_back(t.kv);
      }
    }
    // A slice spanning several homes (a whole sequence under Ulysses) comes piece by piece.
    std::vector<AttnSlice> seen_q, seen_kv;
    for (const AttnSlice& s : maximal_distinct(qs)) {
      for (const auto& [h, piece] : homes.split(s)) {
        if (h == r || std::find(seen_q.begin(), seen_q.end(), piece) != seen_q.end()) continue;
        seen_q.push_back(piece);
        for (AttnTensor x : {AttnTensor::q, AttnTensor::dout, AttnTensor::out}) bt.inputs.push_back({h, r, x, piece});
        bt.returns.push_back({r, h, AttnTensor::dq, piece});
      }
    }
    for (const AttnSlice& s : maximal_distinct(kvs)) {
      for (const auto& [h, piece] : homes.split(s)) {
        if (h == r || std::find(seen_kv.begin(), seen_kv.end(), piece) != seen_kv.end()) continue;
        seen_kv.push_back(piece);
        bt.inputs.push_back({h, r, AttnTensor::kv, piece});
        bt.returns.push_back({r, h, AttnTensor::dkv, piece});
      }
    }
  }
  return bt;
}

int64_t fullest_home_tokens(const AttentionPlan& plan) {
  double fullest = 0;
  for (const auto& homes : plan.home) {
    double share = 0;
    for (const AttnSlice& s : homes)
      share += static_cast<double>(s.tokens()) * s.heads() / std::max(1, plan.heads_q);
    fullest = std::max(fullest, share);
  }
  return static_cast<int64_t>(std::ceil(fullest - 1e-9));
}

RankBytes plan_bytes(const AttentionPlan& plan, bool with_backward) {
  return plan_bytes(plan, with_backward ? backward_phases(plan) : std::vector<AttnBackwardPhase>{});
}

RankBytes plan_bytes(const AttentionPlan& plan, const std::vector<AttnBackwardPhase>& backward) {
  RankBytes b{std::vector<double>(plan.ranks, 0.0), std::vector<double>(plan.ranks, 0.0)};
  auto add = [&](const std::vector<AttnTransfer>& ts) {
    for (const AttnTransfer& t : ts) {
      if (t.src < 0 || t.src >= plan.ranks || t.dst < 0 || t.dst >= plan.ranks) continue;
      const double bytes = transfer_bytes(plan, t);
      b.sent[t.src] += bytes;
      b.received[t.dst] += bytes;
    }
  };
  add(forward_transfers(plan));
  for (const AttnBackwardPhase& ph : backward) add(ph.transfers);
  return b;
}

int32_t home_of(const AttentionPlan& plan, const AttnSlice& s) {
  for (int32_t r = 0; r < static_cast<int32_t>(plan.home.size()); ++r) {
    for (const AttnSlice& h : plan.home[r]) {
      if (h.contains(s)) return r;
    }
  }
  return -1;
}

// "Held" means contained in one home slice of the rank or in one slice of the same tensor (q for
// a tile's q, kv for its kv) it received in this or an earlier stage, as the executor looks its
// inputs up; a rank forwards (q, kv) or returns (out) only slices it holds or computed that way.
// What goes home may arrive in several pieces: their union must cover each computed row.
namespace {

// The plan's explicit backward (AttentionPlan::backward), as the executor runs it: a phase's tiles
// read only inputs held before the phase (home, or received in an earlier phase: the q side needs
// Q, dO and the final O, the kv side K/V); a relay forwards an input it receives in the phase;
// every allowed pair's backward runs exactly once; each gradient partial of a slice away from
// home leaves its rank once, after the rank's last tile on it and after the partials it merges
// arrived, for a rank that holds a slot for it (its home, or a rank that sends it on).
void check_explicit_backward(const AttentionPlan& p, Problems& out) {
  const HomeIndex homes(p);
  constexpr int kInputs = 4;  // q, kv, out, dout
  auto input_index = [](AttnTensor t) {
    switch (t) {
      case AttnTensor::q: return 0;
      case AttnTensor::kv: return 1;
      case AttnTensor::out: return 2;
      case AttnTensor::dout: return 3;
      default: return -1;
    }
  };
  std::vector<std::array<std::vector<AttnSlice>, kInputs>> have(p.ranks);
  for (int32_t r = 0; r < p.ranks; ++r)
    for (auto& v : have[r]) v = p.home[r];
  // Per rank and gradient tensor (0: dq, 1: dkv): slices its partials touch (tiles, receipts) and
  // the slices it sends, each with its phase.
  struct Use {
    AttnSlice slice;
    size_t phase;
    bool received;
  };
  std::vector<std::array<std::vector<Use>, 2>> touched(p.ranks), sent(p.ranks);
  std::vector<std::array<std::vector<int32_t>, 2>> dst_of(p.ranks);  // [rank][g] parallel to sent
  std::vector<std::vector<const AttnTile*>> by_seq(p.seq_lengths.size());
  for (size_t i = 0; i < p.backward.size() && !out.full(); ++i) {
    const AttnBackwardPhase& ph = p.backward[i];
    const std::string at = "backward phase " + std::to_string(i);
    std::vector<AttnTransfer> arrived;
    for (const AttnTransfer& t : ph.transfers) {
      if (!check_transfer(p, t, at + " transfer", out)) continue;
      const int x = input_index(t.tensor);
      if (x < 0) {  // a gradient partial
        if (t.relay) out.add(at + ": a relay carries " + std::string(attn_tensor_name(t.tensor)) + "; relays carry inputs");
        const int g = t.tensor == AttnTensor::dkv;
        sent[t.src][g].push_back({t.slice, i, false});
        dst_of[t.src][g].push_back(t.dst);
        touched[t.dst][g].push_back({t.slice, i, true});
        continue;
      }
      const bool source_holds =
          t.relay ? std::any_of(ph.transfers.begin(), ph.transfers.end(),
                                [&](const AttnTransfer& a) {
                                  return !a.relay && a.dst == t.src && a.tensor == t.tensor && a.slice.contains(t.slice);
                                })
                  : held(t.slice, have[t.src][x]);
      if (!source_holds)
        out.add(at + ": rank " + std::to_string(t.src) + " sends " + attn_tensor_name(t.tensor) + " of " + str(t.slice) +
                (t.relay ? " that it does not receive in the phase" : " that it does not hold"));
      arrived.push_back(t);
    }
    for (int32_t r = 0; r < static_cast<int32_t>(ph.tiles.size()); ++r) {
      if (r >= p.ranks) {
        out.add(at + ": tiles list " + std::to_string(ph.tiles.size()) + " ranks, the plan has " + std::to_string(p.ranks));
        break;
      }
      const std::string who = at + " rank " + std::to_string(r) + " tile";
      for (const AttnTile& t : ph.tiles[r]) {
        if (!check_tile(p, t, who, out)) continue;
        for (AttnTensor x : {AttnTensor::q, AttnTensor::out, AttnTensor::dout})
          if (!assembles(t.q, have[r][input_index(x)]))
            out.add(who + ": " + attn_tensor_name(x) + " of " + str(t.q) + " has not arrived before the phase");
        if (!assembles(t.kv, have[r][1])) out.add(who + ": kv " + str(t.kv) + " has not arrived before the phase");
        touched[r][0].push_back({t.q, i, false});
        touched[r][1].push_back({t.kv, i, false});
        by_seq[t.q.seq].push_back(&t);
      }
    }
    for (const AttnTransfer& t : arrived) have[t.dst][input_index(t.tensor)].push_back(t.slice);
  }
  if (out.full()) return;
  for (int32_t r = 0; r < p.ranks && !out.full(); ++r)
    for (int g = 0; g < 2; ++g) {
      const char* name = g ? "dkv" : "dq";
      const auto& outgoing = sent[r][g];
      std::vector<AttnSlice> outgoing_slices;
      for (size_t k = 0; k < outgoing.size(); ++k) {
        const Use& o = outgoing[k];
        const std::string what = "backward: rank " + std::to_string(r) + " sends " + name + " of " + str(o.slice);
        if (held(o.slice, p.home[r])) out.add(what + " away from its home");
        for (const Use& u : touched[r][g])
          if (intersect(u.slice, o.slice) && u.phase >= o.phase) {
            out.add(what + " in phase " + std::to_string(o.phase) + ", but " +
                    (u.received ? "a partial of it arrives" : "a tile of it runs") + " in phase " + std::to_string(u.phase));
            break;
          }
        for (size_t j = 0; j < k; ++j)
          if (intersect(outgoing[j].slice, o.slice)) out.add(what + " twice");
        const int32_t d = dst_of[r][g][k];
        const bool slot = held(o.slice, p.home[d]) ||
                          std::any_of(sent[d][g].begin(), sent[d][g].end(), [&](const Use& u) { return u.slice.contains(o.slice); });
        if (!slot) out.add(what + " to rank " + std::to_string(d) + ", which neither owns it nor sends it on");
        outgoing_slices.push_back(o.slice);
      }
      std::vector<AttnSlice> pieces;
      for (const Use& u : touched[r][g]) pieces.push_back(u.slice);
      for (const AttnSlice& s : maximal_distinct(pieces))
        for (const auto& [h, piece] : homes.split(s))
          if (h != r && !covered(piece, outgoing_slices))
            out.add("backward: rank " + std::to_string(r) + " holds a " + name + " partial of " + str(piece) +
                    " that it never sends towards its home rank " + std::to_string(h));
    }
  for (size_t s = 0; s < by_seq.size() && !out.full(); ++s) check_coverage(p, by_seq[s], static_cast<int32_t>(s), out);
}

}  // namespace

std::string check_attention_plan(const AttentionPlan& p) {
  Problems out;
  if (p.ranks < 1 || static_cast<int32_t>(p.home.size()) != p.ranks)
    out.add("home lists " + std::to_string(p.home.size()) + " ranks, the plan has " + std::to_string(p.ranks));
  if (p.heads_kv < 1 || p.heads_q < 1 || p.heads_q % p.heads_kv != 0 || p.head_dim < 1)
    out.add("heads_q = " + std::to_string(p.heads_q) + ", heads_kv = " + std::to_string(p.heads_kv) +
            ", head_dim = " + std::to_string(p.head_dim) + ": need heads_kv ≥ 1 dividing heads_q and head_dim ≥ 1");
  if (p.value_bytes != 2 && p.value_bytes != 4)
    out.add("value_bytes = " + std::to_string(p.value_bytes) + ": need 2 (bf16/fp16) or 4 (fp32)");
  if (p.grad_bytes != 0 && p.grad_bytes != 2 && p.grad_bytes != 4)
    out.add("grad_bytes = " + std::to_string(p.grad_bytes) + ": need 0 (value_bytes), 2 or 4");
  for (size_t s = 0; s < p.seq_lengths.size(); ++s) {
    if (p.seq_lengths[s] < 1)
      out.add("sequence " + std::to_string(s) + " has " + std::to_string(p.seq_lengths[s]) + " tokens");
  }
  if (!out.list.empty()) return out.str();
  check_homes(p, out);

  std::vector<std::vector<AttnSlice>> held_q(p.home), held_kv(p.home), computed_q(p.ranks);
  // Partial outputs sent home inside the stages: (stage, transfer); checked once all tiles are known.
  std::vector<std::pair<size_t, const AttnTransfer*>> early_out;
  for (size_t s = 0; s < p.stages.size() && !out.full(); ++s) {
    const AttnStage& st = p.stages[s];
    const std::string at = "stage " + std::to_string(s);
    // Transfers of a stage run together: a rank forwards only what it held before the stage, or,
    // by a relay, what it receives in the stage by a transfer that is no relay.
    std::vector<AttnTransfer> arrived;
    std::vector<const AttnTransfer*> relays;
    for (const AttnTransfer& t : st.transfers) {
      if (!check_transfer(p, t, at + " transfer", out)) continue;
      if (t.relay) {
        relays.push_back(&t);
        continue;
      }
      const bool is_q = t.tensor == AttnTensor::q, is_kv = t.tensor == AttnTensor::kv;
      if (t.tensor == AttnTensor::out) {
        early_out.emplace_back(s, &t);
        continue;
      }
      if (!is_q && !is_kv) {
        out.add(at + ": a stage carries " + std::string(attn_tensor_name(t.tensor)) + "; stages carry q, kv and out");
        continue;
      }
      if ((is_q && held(t.slice, held_q[t.dst])) || (is_kv && held(t.slice, held_kv[t.dst]))) {
        // The backward sends one gradient partial per receipt: a second copy would count twice.
        out.add(at + ": rank " + std::to_string(t.dst) + " receives " + attn_tensor_name(t.tensor) + " of " +
                str(t.slice) + " that it already holds");
      }
      if ((is_q && !held(t.slice, held_q[t.src])) || (is_kv && !held(t.slice, held_kv[t.src]))) {
        out.add(at + ": rank " + std::to_string(t.src) + " sends " + attn_tensor_name(t.tensor) + " of " +
                str(t.slice) + " that it does not hold");
      }
      arrived.push_back(t);
    }
    const size_t direct = arrived.size();
    for (const AttnTransfer* t : relays) {
      const std::string what = std::string(attn_tensor_name(t->tensor)) + " of " + str(t->slice);
      if (t->tensor != AttnTensor::q && t->tensor != AttnTensor::kv) {
        out.add(at + ": a relay carries " + std::string(attn_tensor_name(t->tensor)) + "; relays carry q and kv");
        continue;
      }
      const auto first_hop = [&](const AttnTransfer& a) { return a.dst == t->src && a.tensor == t->tensor && a.slice == t->slice; };
      if (std::none_of(arrived.begin(), arrived.begin() + static_cast<std::ptrdiff_t>(direct), first_hop))
        out.add(at + ": rank " + std::to_string(t->src) + " relays " + what + " that it does not receive in the stage");
      const auto& dst_held = t->tensor == AttnTensor::q ? held_q[t->dst] : held_kv[t->dst];
      const bool twice = held(t->slice, dst_held) ||
                         std::any_of(arrived.begin(), arrived.end(), [&](const AttnTransfer& a) {
                           return a.dst == t->dst && a.tensor == t->tensor && a.slice.contains(t->slice);
                         });
      if (twice)
        out.add(at + ": rank " + std::to_string(t->dst) + " receives " + what + " that it already holds");
      arrived.push_back(*t);
    }
    for (const AttnTransfer& t : arrived) {
      if (t.tensor == AttnTensor::q) held_q[t.dst].push_back(t.slice);
      if (t.tensor == AttnTensor::kv) held_kv[t.dst].push_back(t.slice);
    }
    if (static_cast<int32_t>(st.tiles.size()) != p.ranks) {
      out.add(at + ": tiles list " + std::to_string(st.tiles.size()) + " ranks, the plan has " +
              std::to_string(p.ranks));
      continue;
    }
    for (int32_t r = 0; r < p.ranks; ++r) {
      const std::string who = at + " rank " + std::to_string(r) + " tile";
      for (const AttnTile& t : st.tiles[r]) {
        if (!check_tile(p, t, who, out)) continue;
        if (!assembles(t.q, held_q[r])) out.add(who + ": q " + str(t.q) + " is not held");
        if (!assembles(t.kv, held_kv[r])) out.add(who + ": kv " + str(t.kv) + " is not held");
        computed_q[r].push_back(t.q);
      }
    }
  }
  if (!out.list.empty()) return out.str();

  // A partial output sent inside stage s is final: its sender computed it in stages before s − 1
  // (stage s's transfers are posted while stage s − 1 runs) and computes no more of it after.
  std::vector<AttnTransfer> outputs = p.gather_out;
  for (const auto& [s, t] : early_out) {
    const std::string at = "stage " + std::to_string(s) + " out";
    if (!check_transfer(p, *t, at, out)) continue;
    bool before = false, after = false;
    for (size_t k = 0; k < p.stages.size(); ++k)
      for (const AttnTile& tile : p.stages[k].tiles[t->src])
        if (intersect(tile.q, t->slice)) (k + 2 <= s ? before : after) = true;
    if (after)
      out.add(at + ": rank " + std::to_string(t->src) + " sends out of " + str(t->slice) +
              " while it still computes rows of it (stage " + std::to_string(s) + " or the one before)");
    else if (!before || !held(t->slice, computed_q[t->src]))
      out.add(at + ": rank " + std::to_string(t->src) + " sends out of " + str(t->slice) +
              " that no one of its tiles of the stages before computed");
    // Each partial goes home once: not again early, nor in gather_out (the home would merge it twice).
    for (const AttnTransfer& o : outputs)
      if (o.src == t->src && intersect(o.slice, t->slice))
        out.add(at + ": rank " + std::to_string(t->src) + " sends out of " + str(t->slice) + " twice");
    outputs.push_back(*t);
  }
  // Outputs: every row computed away from home goes home; only computed rows are sent.
  for (const AttnTransfer& t : p.gather_out) {
    if (!check_transfer(p, t, "gather_out", out)) continue;
    if (t.tensor != AttnTensor::out)
      out.add(std::string("gather_out carries ") + attn_tensor_name(t.tensor) + ", not out");
    else if (!held(t.slice, computed_q[t.src]))
      out.add("gather_out: rank " + std::to_string(t.src) + " sends out of " + str(t.slice) +
              " that it did not compute");
  }
  const HomeIndex homes(p);
  for (int32_t r = 0; r < p.ranks; ++r) {
    for (const AttnSlice& q : maximal_distinct(computed_q[r])) {
      for (const auto& [h, piece] : homes.split(q)) {
        if (h == r) continue;
        std::vector<AttnSlice> to_h;
        for (const AttnTransfer& t : outputs) {
          if (t.src == r && t.dst == h && t.tensor == AttnTensor::out) to_h.push_back(t.slice);
        }
        if (!covered(piece, to_h))
          out.add("rank " + std::to_string(r) + " computes " + str(piece) +
                  " but gather_out does not send it to its home rank " + std::to_string(h));
      }
    }
  }

  std::vector<std::vector<const AttnTile*>> by_seq(p.seq_lengths.size());
  for (const AttnStage& st : p.stages) {
    for (const auto& rank_tiles : st.tiles) {
      for (const AttnTile& t : rank_tiles) by_seq[t.q.seq].push_back(&t);
    }
  }
  for (size_t s = 0; s < by_seq.size() && !out.full(); ++s) check_coverage(p, by_seq[s], static_cast<int32_t>(s), out);
  if (!p.backward.empty() && out.list.empty()) check_explicit_backward(p, out);
  return out.str();
}

}  // namespace cpbench
