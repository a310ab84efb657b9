// cp_layouts.cpp — static CP layouts (ring, zigzag, all-gather, Ulysses, USP) as AttentionPlans.
// defines: the layout table (cp_layouts) and plan_cp_layout over its rows
// Ring, zigzag, Ulysses and USP are one construction: a ring of `ring_size` groups of `a2a_size`
// ranks (ring: a2a_size 1; Ulysses: ring_size 1); only the token partition differs.
#include "core/layouts/cp_layouts.h"

#include <algorithm>
#include <map>
#include <memory>
#include <limits>
#include <optional>

namespace cpbench {

namespace {

using Homes = std::vector<std::vector<AttnSlice>>;  // [rank] slices with all heads

Error layout_error(const std::string& message) { return Error{"", "", message}; }

// Sorted by (sequence, first token); neighbours of one sequence that touch become one slice.
std::vector<AttnSlice> merged(std::vector<AttnSlice> slices) {
  std::sort(slices.begin(), slices.end(), [](const AttnSlice& a, const AttnSlice& b) {
    return a.seq != b.seq ? a.seq < b.seq : a.tok_begin < b.tok_begin;
  });
  std::vector<AttnSlice> out;
  for (const AttnSlice& s : slices) {
    if (!out.empty() && out.back().seq == s.seq && out.back().tok_end == s.tok_begin) {
      out.back().tok_end = s.tok_end;
    } else {
      out.push_back(s);
    }
  }
  return out;
}

AttnSlice with_heads(AttnSlice s, int32_t head_begin, int32_t head_end) {
  s.head_begin = head_begin;
  s.head_end = head_end;
  return s;
}

// Rank r owns tokens [r·T/cp, (r+1)·T/cp) of the packed batch, cut at sequence boundaries.
Homes contiguous_homes(const std::vector<int64_t>& lengths, int32_t cp, int32_t heads_q) {
  int64_t total = 0;
  for (int64_t L : lengths) total += L;
  const int64_t per_rank = total / cp;
  Homes homes(cp);
  int64_t seq_start = 0;
  for (int32_t s = 0; s < static_cast<int32_t>(lengths.size()); ++s) {
    for (int32_t r = 0; r < cp; ++r) {
      const int64_t b = std::max(seq_start, r * per_rank), e = std::min(seq_start + lengths[s], (r + 1) * per_rank);
      if (b < e) homes[r].push_back({s, b - seq_start, e - seq_start, 0, heads_q});
    }
    seq_start += lengths[s];
  }
  return homes;
}

// Every sequence in cp equal chunks; rank r owns chunk r of each (ring-flash-attention's varlen
// ring: every rank holds 1/cp of every sequence, its cu_seqlens divided by the ring size).
Homes per_sequence_homes(const std::vector<int64_t>& lengths, int32_t cp, int32_t heads_q) {
  Homes homes(cp);
  for (int32_t s = 0; s < static_cast<int32_t>(lengths.size()); ++s) {
    const int64_t chunk = lengths[s] / cp;
    for (int32_t r = 0; r < cp; ++r) homes[r].push_back({s, r * chunk, (r + 1) * chunk, 0, heads_q});
  }
  return homes;
}

// Every sequence in 2·cp chunks; rank r owns chunks r and 2cp−1−r (the causal work of the two
// chunks sums to the same for every rank: references/context_parallel.md, "zigzag").
Homes zigzag_homes(const std::vector<int64_t>& lengths, int32_t cp, int32_t heads_q) {
  Homes homes(cp);
  for (int32_t s = 0; s < static_cast<int32_t>(lengths.size()); ++s) {
    const int64_t chunk = lengths[s] / (2 * cp);
    for (int32_t r = 0; r < cp; ++r) {
      for (int64_t c : {int64_t{r}, int64_t{2 * cp - 1 - r}})
        homes[r].push_back({s, c * chunk, (c + 1) * chunk, 0, heads_q});
    }
  }
  for (auto& h : homes) h = merged(std::move(h));
  return homes;
}

bool any_pair(const AttentionPlan& p, const AttnSlice& q, const AttnSlice& kv) {
  return mask_pairs_in_tile(p.mask, p.seq_lengths[q.seq], q.tok_begin, q.tok_end, kv.tok_begin, kv.tok_end) > 0;
}

// Tokens [len·k/n, len·(k+1)/n) of `s` (empty when the slice has fewer than n tokens).
AttnSlice piece_of(AttnSlice s, int32_t k, int32_t n) {
  const int64_t len = s.tokens(), b = s.tok_begin;
  s.tok_begin = b + len * k / n;
  s.tok_end = b + len * (k + 1) / n;
  return s;
}

// A ring of ring_size = ranks / a2a_size groups; group g is ranks [g·a, (g+1)·a) and covers its
// members' home pieces, kept apart so that every tile input and every forwarded slice is one
// buffer the rank holds. Member i computes query heads [i·H/a, (i+1)·H/a).
//   stage 0:     all-to-all inside each group: Q and KV of each member's tokens for i's heads;
//                tiles: the group's Q × the group's KV.
//   stage t ≥ 1: rank (g, i) sends the KV it used in stage t−1 to rank (g+1, i); tiles: the
//                group's Q × the KV of group g−t.
//   gather_out:  O of every member's tokens goes back to it (Ulysses' all-to-all back).
// With a window w (1 < w < ring_size) the ring is LoongTrain's double ring: the groups form
// ring_size / w windows of w consecutive groups (on consecutive ranks, so a window fills a node
// when w·a = GPUs per node). Stage k = s·w + t: group (W, j) computes with the KV of group
// (W − s, j − t) (indices mod the windows and mod w): an inner ring inside the window (t ≥ 1: from
// (W, j − 1)) and an outer ring across windows, whose KV for outer step s + 1 comes from
// (W − 1, j) in w pieces, one in each of stages s·w + 1 … (s + 1)·w, so every piece crosses the
// network under an inner step's compute, every member of a window sending at once. KV travels in
// those w token pieces of each slice (a rank forwards what it received), tiles read whole slices.
void build_ring_of_groups(AttentionPlan& p, int32_t a2a_size, int32_t window) {
  const int32_t a = a2a_size, ring = p.ranks / a, heads = p.heads_q / a;
  const int32_t w = window < 1 || window >= ring ? ring : window, windows = ring / w;
  const int32_t pieces = w < ring ? w : 1;
  std::vector<std::vector<AttnSlice>> region(ring);
  for (int32_t g = 0; g < ring; ++g) {
    for (int32_t i = 0; i < a; ++i)
      region[g].insert(region[g].end(), p.home[g * a + i].begin(), p.home[g * a + i].end());
  }
  p.stages.assign(ring, AttnStage{});
  for (AttnStage& st : p.stages) st.tiles.assign(p.ranks, {});
  for (int32_t g = 0; g < ring; ++g) {
    for (int32_t i = 0; i < a; ++i) {
      for (const AttnSlice& piece : p.home[g * a + i]) {
        for (int32_t j = 0; j < a; ++j) {
          if (j == i) continue;
          const AttnSlice s = with_heads(piece, j * heads, (j + 1) * heads);
          p.stages[0].transfers.push_back({g * a + i, g * a + j, AttnTensor::q, s});
          p.stages[0].transfers.push_back({g * a + i, g * a + j, AttnTensor::kv, s});
        }
      }
    }
  }
  const auto mod = [](int32_t x, int32_t n) { return ((x % n) + n) % n; };
  // The group whose KV group g computes with in stage k.
  const auto source = [&](int32_t g, int32_t k) {
    return mod(g / w - k / w, windows) * w + mod(g % w - k % w, w);
  };
  for (int32_t k = 0; k < ring; ++k) {
    AttnStage& st = p.stages[k];
    const int32_t s = k / w, t = k % w;
    for (int32_t g = 0; g < ring; ++g) {
      const int32_t win = g / w, j = g % w;
      const int32_t inner_to = win * w + mod(j + 1, w), outer_to = mod(win + 1, windows) * w + j;
      for (int32_t i = 0; i < a; ++i) {
        const int32_t rank = g * a + i, hb = i * heads, he = (i + 1) * heads;
        // Sends pieces [first, last) of the KV group `to` computes with in stage `at`.
        auto send = [&](int32_t to, int32_t at, int32_t first, int32_t last) {
          for (const AttnSlice& kv : region[source(to, at)])
            for (int32_t pc = first; pc < last; ++pc)
              if (AttnSlice part = piece_of(kv, pc, pieces); part.tokens() > 0)
                st.transfers.push_back({rank, to * a + i, AttnTensor::kv, with_heads(part, hb, he)});
        };
        if (t >= 1) send(inner_to, k, 0, pieces);
        if (windows > 1 && t >= 1 && s + 1 < windows) send(outer_to, (s + 1) * w, t - 1, t);
        if (windows > 1 && t == 0 && s >= 1) send(outer_to, k, pieces - 1, pieces);
        for (const AttnSlice& q : region[g]) {
          for (const AttnSlice& kv : region[source(g, k)]) {
            if (kv.seq == q.seq && any_pair(p, q, kv))
              st.tiles[rank].push_back({with_heads(q, hb, he), with_heads(kv, hb, he)});
          }
        }
      }
    }
  }
  for (int32_t g = 0; g < ring; ++g) {
    for (int32_t i = 0; i < a; ++i) {
      for (int32_t j = 0; j < a; ++j) {
        if (j == i) continue;
        for (const AttnSlice& piece : p.home[g * a + j]) {
          p.gather_out.push_back(
              {g * a + i, g * a + j, AttnTensor::out, with_heads(piece, i * heads, (i + 1) * heads)});
        }
      }
    }
  }
}

// Llama 3 style: all-gather the KV (one stage, not overlapped), then every Q piece attends the
// KV pieces its rows may see, one tile per (Q piece, KV piece) as the KV arrives in pieces.
void build_all_gather(AttentionPlan& p) {
  AttnStage st;
  st.tiles.assign(p.ranks, {});
  for (int32_t src = 0; src < p.ranks; ++src) {
    for (const AttnSlice& piece : p.home[src]) {
      for (int32_t dst = 0; dst < p.ranks; ++dst) {
        if (dst != src) st.transfers.push_back({src, dst, AttnTensor::kv, piece});
      }
    }
  }
  for (int32_t r = 0; r < p.ranks; ++r) {
    for (const AttnSlice& q : p.home[r]) {
      for (const auto& kv_home : p.home) {
        for (const AttnSlice& kv : kv_home) {
          if (kv.seq == q.seq && any_pair(p, q, kv)) st.tiles[r].push_back({q, kv});
        }
      }
    }
  }
  p.stages.push_back(std::move(st));
}

// The request's shape errors, before any layout rule.
std::optional<Error> check_request(const CpLayoutRequest& r) {
  const std::string& name = r.layout;
  if (r.cp < 1) return layout_error(name + " needs cp ≥ 1, got cp = " + std::to_string(r.cp));
  if (r.seq_lengths.empty()) return layout_error(name + ": the batch has no sequences");
  for (size_t s = 0; s < r.seq_lengths.size(); ++s) {
    if (r.seq_lengths[s] < 1) {
      return layout_error(name + ": sequence " + std::to_string(s) + " has " + std::to_string(r.seq_lengths[s]) +
                          " tokens; every sequence needs at least one token");
    }
  }
  if (r.heads_kv < 1 || r.heads_q < 1 || r.heads_q % r.heads_kv != 0) {
    return layout_error(name + ": heads_q = " + std::to_string(r.heads_q) +
                        " must be a positive multiple of heads_kv = " + std::to_string(r.heads_kv));
  }
  if (r.head_dim < 1) return layout_error(name + ": head_dim must be ≥ 1, got " + std::to_string(r.head_dim));
  return std::nullopt;
}

// Ulysses splits heads over `a` ranks: both head counts must divide (TE cp_comm_type a2a).
std::optional<Error> check_heads(const CpLayoutRequest& r, int32_t a, const std::string& what) {
  if (r.heads_q % a == 0 && r.heads_kv % a == 0) return std::nullopt;
  return layout_error(r.layout + " needs heads_q and heads_kv to be multiples of " + what + " = " + std::to_string(a) +
                      ": heads_q = " + std::to_string(r.heads_q) + ", heads_kv = " + std::to_string(r.heads_kv));
}

// Contiguous layouts need T % cp == 0; padding grows the last sequence.
std::optional<Error> fit_total(const CpLayoutRequest& r, std::vector<int64_t>& lengths) {
  int64_t total = 0;
  for (int64_t L : lengths) total += L;
  const int64_t missing = (r.cp - total % r.cp) % r.cp;
  if (missing == 0) return std::nullopt;
  if (!r.pad) {
    return layout_error(
        r.layout + " needs the packed batch's total tokens to be a multiple of cp = " + std::to_string(r.cp) +
        ": the batch has " + std::to_string(total) + " tokens; pass pad = true to pad the last sequence");
  }
  lengths.back() += missing;
  return std::nullopt;
}

// Layouts that split every sequence need L % m == 0 (m = cp, or 2·cp for the zigzag chunks);
// padding grows each.
std::optional<Error> fit_each(const CpLayoutRequest& r, std::vector<int64_t>& lengths, int64_t m) {
  const std::string rule = m == r.cp ? "cp" : "2·cp";
  for (size_t s = 0; s < lengths.size(); ++s) {
    if (lengths[s] % m == 0) continue;
    if (!r.pad) {
      return layout_error(r.layout + " needs every sequence length to be a multiple of " + rule + " = " + std::to_string(m) +
                          ": sequence " + std::to_string(s) + " has " + std::to_string(lengths[s]) +
                          " tokens; pass pad = true to pad");
    }
    lengths[s] += m - lengths[s] % m;
  }
  return std::nullopt;
}

}  // namespace

int32_t auto_a2a_size(int32_t cp, int32_t heads_q, int32_t heads_kv) {
  for (int32_t a = cp; a > 1; --a) {
    if (cp % a == 0 && heads_q % a == 0 && heads_kv % a == 0) return a;
  }
  return 1;
}

void apply_te_a2a_sequence_loop(AttentionPlan& plan, const ParallelConfig& parallel) {
  if (plan.layout != "a2a+p2p" || !parallel.te_a2a_sequence_loop) return;
  plan.host_ops_per_sequence_fwd = 3 * kTeThdA2aCallsPerSequence;  // q, k, v
  plan.host_ops_per_sequence_bwd = 5 * kTeThdA2aCallsPerSequence;  // out, dout; dq, dk, dv
}

AttentionShape tp_rank_attention(const std::vector<int64_t>& lengths, const MaskSpec& mask, const ModelShape& model,
                                 const ParallelConfig& layout) {
  AttentionShape a;
  a.seq_lengths = lengths;
  a.mask = mask;
  a.heads_q = static_cast<int32_t>(model.heads / layout.tp);
  a.heads_kv = static_cast<int32_t>(model.kv_heads / layout.tp);
  a.head_dim = static_cast<int32_t>(model.head_dim());
  return a;
}

Expected<AttentionPlan> plan_micro_batch_attention(const PlanMicroBatch& mb, const ModelShape& model,
                                                   const ParallelConfig& layout, const MaskSpec& mask) {
  CpLayoutRequest req;
  req.layout = mb.cp > 1 ? cp_layout_for_comm_type(layout.cp_comm_type) : "single";
  if (req.layout.empty()) return layout_error("unknown cp_comm_type '" + layout.cp_comm_type + "'");
  req.cp = static_cast<int32_t>(mb.cp);
  // Decoder language models: a sparse mask is computed over its causal envelope (TransformerEngine
  // cannot skip the masked work), so the tiles are the causal ones.
  const bool sparse = mask.kind != MaskKind::causal && mask.kind != MaskKind::full;
  static_cast<AttentionShape&>(req) =
      tp_rank_attention(mb.padded_lengths(), sparse ? MaskSpec{.kind = MaskKind::causal} : mask, model, layout);
  req.pad = true;
  auto plan = plan_cp_layout(req);
  if (!plan) return plan;
  plan->mask = mask;
  // With attention_sparse_kernel the kernels skip the mask's empty key blocks (DCP §7.2's
  // TransformerEngine on DCP's masked kernels); the transfers stay the layout's.
  plan->causal_envelope_work = sparse && !layout.attention_sparse_kernel;
  plan->value_bytes = layout.attention_values();
  // As TransformerEngine runs CP attention on GPUs: a CP step's THD pack is one kernel call, and
  // the backward's inputs and partial gradients travel step by step under the kernels (unless
  // attention_per_tile).
  plan->fused_stages = !layout.attention_per_tile;
  plan->pipelined_backward = !layout.attention_per_tile;
  apply_te_a2a_sequence_loop(*plan, layout);
  return plan;
}

int64_t cp_layout_plan_entries(const std::string& layout, int64_t cp, int64_t sequences, int64_t a2a_size,
                               int64_t window) {
  // Per stage and rank: tiles (up to 4 per chunk pair of a sequence) and one transfer per piece.
  const CpLayout* row = find_cp_layout(layout);
  int64_t pieces_per_rank = sequences / std::max<int64_t>(cp, 1) + 2;  // contiguous (and unknown)
  if (row && row->tokens == TokenSplit::zigzag) pieces_per_rank = 2 * sequences;
  if (row && row->tokens == TokenSplit::per_sequence) pieces_per_rank = sequences;
  if (row && row->heads == HeadSplit::groups) pieces_per_rank *= std::max<int64_t>(1, a2a_size);
  if (row && row->window) pieces_per_rank *= std::max<int64_t>(1, window);
  return 3 * cp * cp * pieces_per_rank;
}

std::optional<AttachProblem> attach_attention_plans(Plan* plan, const ModelShape& model) {
  std::map<std::pair<std::vector<int64_t>, int64_t>, std::shared_ptr<const AttentionPlan>> made;
  for (auto& rank : plan->micro_batches)
    for (PlanMicroBatch& mb : rank) {
      if (mb.cp <= 1 || mb.lengths.empty()) continue;
      auto key = std::make_pair(mb.padded_lengths(), mb.cp);
      auto it = made.find(key);
      if (it == made.end()) {
        const std::string layout = cp_layout_for_comm_type(plan->layout.cp_comm_type);
        const int64_t a2a = auto_a2a_size(static_cast<int32_t>(mb.cp), static_cast<int32_t>(model.heads / plan->layout.tp),
                                          static_cast<int32_t>(model.kv_heads / plan->layout.tp));
        const int64_t entries = cp_layout_plan_entries(layout, mb.cp, static_cast<int64_t>(mb.lengths.size()), a2a);
        if (entries > kMaxAttentionPlanEntries) {
          return AttachProblem{"cpbench limit: the " + layout + " plan of a CP group of " + std::to_string(mb.cp) +
                                   " ranks over " + std::to_string(mb.lengths.size()) + " sequences would hold ~" +
                                   std::to_string(entries / 1'000'000) + "M tiles and transfers (cpbench builds at most " +
                                   std::to_string(kMaxAttentionPlanEntries / 1'000'000) +
                                   "M); the configuration may run, cpbench cannot price it",
                               true};
        }
        auto a = plan_micro_batch_attention(mb, model, plan->layout, plan->mask);
        if (!a) return AttachProblem{a.error_str(), false};
        it = made.emplace(std::move(key), std::make_shared<const AttentionPlan>(std::move(*a))).first;
      }
      mb.attention = it->second;
    }
  return std::nullopt;
}

const std::vector<CpLayout>& cp_layouts() {
  using enum TokenSplit;
  static const std::vector<CpLayout> table = {
      // name          tokens        heads              exchange                  one rank window  TE      chunks
      {"single",      contiguous,   HeadSplit::none,   KvExchange::ring_of_groups, true,  false, "",          0},
      {"ring",        per_sequence, HeadSplit::none,   KvExchange::ring_of_groups, false, false, "",          0},
      {"zigzag",      zigzag,       HeadSplit::none,   KvExchange::ring_of_groups, false, false, "p2p",       2},
      {"all_gather",  zigzag,       HeadSplit::none,   KvExchange::all_gather,     false, false, "all_gather", 2},
      {"a2a",         contiguous,   HeadSplit::all,    KvExchange::ring_of_groups, false, false, "a2a",       1},
      {"a2a+p2p",     zigzag,       HeadSplit::groups, KvExchange::ring_of_groups, false, false, "a2a+p2p",   2},
      {"double_ring", zigzag,       HeadSplit::groups, KvExchange::ring_of_groups, false, true,  "",          0},
  };
  return table;
}

const CpLayout* find_cp_layout(const std::string& name) {
  for (const CpLayout& l : cp_layouts())
    if (name == l.name) return &l;
  return nullptr;
}

int64_t cp_layout_sequence_multiple(const CpLayout& layout, int64_t cp) {
  switch (layout.tokens) {
    case TokenSplit::zigzag: return 2 * cp;
    case TokenSplit::per_sequence: return cp;
    case TokenSplit::contiguous: return 1;
  }
  return 1;
}

int64_t static_cp_pad_multiple(const ParallelConfig& layout) {
  const CpLayout* row = find_cp_layout(cp_layout_for_comm_type(layout.cp_comm_type));
  const int64_t chunks = layout.cp <= 1 || !row ? 1 : row->thd_chunks * layout.cp;
  return chunks * (layout.sequence_parallel ? layout.tp : 1);
}

std::string cp_layout_for_comm_type(const std::string& t) {
  for (const CpLayout& l : cp_layouts())
    if (!t.empty() && t == l.te_comm_type) return l.name;
  return "";
}

std::vector<std::string> cp_layout_names() {
  std::vector<std::string> names;
  for (const CpLayout& l : cp_layouts()) names.push_back(l.name);
  return names;
}

Expected<AttentionPlan> plan_cp_layout(const CpLayoutRequest& r) {
  const CpLayout* row = find_cp_layout(r.layout);
  if (!row) {
    std::string known;
    for (const std::string& n : cp_layout_names()) known += (known.empty() ? "" : ", ") + n;
    return layout_error("unknown CP layout \"" + r.layout + "\"; known layouts: " + known);
  }
  if (auto e = check_request(r)) return *e;

  AttentionPlan p;
  static_cast<AttentionShape&>(p) = r;
  p.layout = r.layout;
  p.ranks = r.cp;

  if (row->one_rank && r.cp != 1) return layout_error(r.layout + " needs cp = 1, got cp = " + std::to_string(r.cp));
  // TransformerEngine splits every sequence into 2·cp chunks under static CP, a2a+p2p included
  // (references/context_parallel.md, THD packing); ring-flash-attention's ring into cp.
  if (row->tokens == TokenSplit::contiguous) {
    if (auto e = fit_total(r, p.seq_lengths)) return *e;
  } else if (auto e = fit_each(r, p.seq_lengths, cp_layout_sequence_multiple(*row, r.cp))) {
    return *e;
  }
  int32_t a2a_size = 1;
  if (row->heads == HeadSplit::all) {
    if (auto e = check_heads(r, r.cp, "cp")) return *e;
    a2a_size = r.cp;
  }
  if (row->heads == HeadSplit::groups) {
    a2a_size = r.a2a_size == 0 ? auto_a2a_size(r.cp, r.heads_q, r.heads_kv) : r.a2a_size;
    if (a2a_size < 1 || r.cp % a2a_size != 0) {
      return layout_error(r.layout + " needs a2a_size to divide cp: a2a_size = " + std::to_string(a2a_size) +
                          ", cp = " + std::to_string(r.cp));
    }
    if (auto e = check_heads(r, a2a_size, "a2a_size")) return *e;
  }
  const int32_t ring_size = r.cp / a2a_size;
  if (row->window && (r.window < 1 || ring_size % r.window != 0))
    return layout_error(r.layout + " needs a window dividing the ring of cp / a2a_size = " + std::to_string(ring_size) +
                        " groups, got window = " + std::to_string(r.window));
  if (!row->window && r.window != 0)
    return layout_error(r.layout + " has no ring window (window = " + std::to_string(r.window) +
                        "); only double_ring takes one");

  // Zigzag chunks balance causal work: all_gather keeps two Q chunks per rank as TransformerEngine's
  // all-gather CP does (references/context_parallel.md); a2a+p2p: after the all-to-all inside a
  // group of a consecutive ranks, the group holds a chunks from each end of every sequence, so the
  // ring of groups is balanced the zigzag way.
  switch (row->tokens) {
    case TokenSplit::zigzag: p.home = zigzag_homes(p.seq_lengths, r.cp, r.heads_q); break;
    case TokenSplit::per_sequence: p.home = per_sequence_homes(p.seq_lengths, r.cp, r.heads_q); break;
    case TokenSplit::contiguous: p.home = contiguous_homes(p.seq_lengths, r.cp, r.heads_q); break;
  }
  if (row->exchange == KvExchange::all_gather) {
    build_all_gather(p);
  } else {
    build_ring_of_groups(p, a2a_size, r.window);
  }
  return p;
}

}  // namespace cpbench
