#include "core/reshard/state_layout.h"

#include <algorithm>

namespace cpbench {

std::string StateLayout::str() const {
  return "(t" + std::to_string(tp) + ", p" + std::to_string(pp) + ", d" + std::to_string(dp) +
         (distributed_optimizer ? ", dist-opt)" : ")");
}

Rect intersect(const Rect& a, const Rect& b) {
  Rect r{std::max(a.r0, b.r0), std::min(a.r1, b.r1), std::max(a.c0, b.c0), std::min(a.c1, b.c1)};
  if (r.empty()) return {};
  return r;
}

std::vector<Rect> subtract(const Rect& a, const Rect& b) {
  const Rect x = intersect(a, b);
  if (x.empty()) return {a};
  std::vector<Rect> out;
  if (a.r0 < x.r0) out.push_back({a.r0, x.r0, a.c0, a.c1});  // above
  if (x.r1 < a.r1) out.push_back({x.r1, a.r1, a.c0, a.c1});  // below
  if (a.c0 < x.c0) out.push_back({x.r0, x.r1, a.c0, x.c0});  // left
  if (x.c1 < a.c1) out.push_back({x.r0, x.r1, x.c1, a.c1});  // right
  return out;
}

int64_t padded_vocab(int64_t vocab, int64_t tp) {
  const int64_t m = 128 * tp;
  return (vocab + m - 1) / m * m;
}

double bytes_per_element(StateKind kind) { return kind == StateKind::weights ? 2.0 : 12.0; }

std::vector<ModelTensor> model_tensors(const ModelShape& m, int64_t max_seq) {
  std::vector<ModelTensor> t;
  const int64_t h = m.hidden, qkv = m.hidden + 2 * m.kv_dim(), ffn = m.ffn_hidden;
  const bool ln = m.norm == "layernorm";
  t.push_back({"embedding.word", m.vocab, h, TpSplit::vocab_rows, -1, true, m.tied_embeddings});
  if (m.position_embedding == "learned") t.push_back({"embedding.position", max_seq, h, TpSplit::replicated, -1, true, false});
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    t.push_back({p + "norm1.weight", 1, h, TpSplit::replicated, l});
    if (ln) t.push_back({p + "norm1.bias", 1, h, TpSplit::replicated, l});
    t.push_back({p + "qkv.weight", qkv, h, TpSplit::rows, l});
    if (m.bias) t.push_back({p + "qkv.bias", qkv, 1, TpSplit::rows, l});
    t.push_back({p + "proj.weight", h, h, TpSplit::columns, l});
    if (m.bias) t.push_back({p + "proj.bias", 1, h, TpSplit::replicated, l});
    t.push_back({p + "norm2.weight", 1, h, TpSplit::replicated, l});
    if (ln) t.push_back({p + "norm2.bias", 1, h, TpSplit::replicated, l});
    t.push_back({p + "fc1.weight", (m.gated_mlp ? 2 : 1) * ffn, h, m.gated_mlp ? TpSplit::gated_rows : TpSplit::rows, l});
    if (m.bias) t.push_back({p + "fc1.bias", (m.gated_mlp ? 2 : 1) * ffn, 1, m.gated_mlp ? TpSplit::gated_rows : TpSplit::rows, l});
    t.push_back({p + "fc2.weight", h, ffn, TpSplit::columns, l});
    if (m.bias) t.push_back({p + "fc2.bias", 1, h, TpSplit::replicated, l});
  }
  t.push_back({"final_norm.weight", 1, h, TpSplit::replicated, -1, false, true});
  if (ln) t.push_back({"final_norm.bias", 1, h, TpSplit::replicated, -1, false, true});
  if (!m.tied_embeddings) t.push_back({"output.weight", m.vocab, h, TpSplit::vocab_rows, -1, false, true});
  return t;
}

std::string check_state_layout(const ModelShape& m, const StateLayout& L) {
  if (L.tp < 1 || L.pp < 1 || L.dp < 1) return "tp, pp and dp must be ≥ 1";
  if (m.layers % L.pp != 0) return std::to_string(m.layers) + " layers do not split over pp " + std::to_string(L.pp);
  if (m.kv_heads % L.tp != 0 || m.heads % L.tp != 0)
    return std::to_string(m.heads) + " heads / " + std::to_string(m.kv_heads) + " KV heads do not split over tp " + std::to_string(L.tp);
  if (m.ffn_hidden % L.tp != 0 || m.hidden % L.tp != 0) return "the hidden or FFN width does not split over tp " + std::to_string(L.tp);
  return "";
}

namespace {

// The rows × columns a TP rank holds of a tensor (one or two rectangles), empty for padding only.
std::vector<Rect> tp_slice(const ModelTensor& t, int64_t tp, int64_t r) {
  switch (t.split) {
    case TpSplit::replicated:
      return {{0, t.rows, 0, t.cols}};
    case TpSplit::rows:
      return {{t.rows / tp * r, t.rows / tp * (r + 1), 0, t.cols}};
    case TpSplit::columns:
      return {{0, t.rows, t.cols / tp * r, t.cols / tp * (r + 1)}};
    case TpSplit::gated_rows: {
      const int64_t half = t.rows / 2, s = half / tp;
      return {{s * r, s * (r + 1), 0, t.cols}, {half + s * r, half + s * (r + 1), 0, t.cols}};
    }
    case TpSplit::vocab_rows: {
      const int64_t per = padded_vocab(t.rows, tp) / tp;
      const Rect real{per * r, std::min(per * (r + 1), t.rows), 0, t.cols};
      if (real.empty()) return {};
      return {real};
    }
  }
  return {};
}

// The stage holding a tensor under pp stages (the embedding also on the last with tied weights).
bool held_by_stage(const ModelTensor& t, int64_t layers, int64_t pp, int64_t stage) {
  if (t.layer >= 0) return t.layer / (layers / pp) == stage;
  return (t.first_stage && stage == 0) || (t.last_stage && stage == pp - 1);
}

}  // namespace

std::vector<Piece> rank_state(const ModelShape& m, const std::vector<ModelTensor>& tensors, const StateLayout& L,
                              int64_t rank) {
  std::vector<Piece> weights;
  const int64_t stage = L.stage(rank), t = L.tp_rank(rank);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!held_by_stage(tensors[i], m.layers, L.pp, stage)) continue;
    for (const Rect& r : tp_slice(tensors[i], L.tp, t)) weights.push_back({static_cast<int>(i), StateKind::weights, r});
  }
  std::vector<Piece> out = weights;
  if (!L.distributed_optimizer || L.dp == 1) {
    for (Piece p : weights) {
      p.kind = StateKind::optimizer;
      out.push_back(p);
    }
    return out;
  }
  // The (TP, PP) shard's flat buffer is its pieces in order, each row-major; DP rank d holds
  // elements [d·⌈N/dp⌉, (d+1)·⌈N/dp⌉) ∩ [0, N) of it (the last shard is the shorter).
  int64_t total = 0;
  for (const Piece& p : weights) total += p.rect.area();
  const int64_t per = (total + L.dp - 1) / L.dp, d = L.dp_rank(rank);
  const int64_t lo = std::min(total, per * d), hi = std::min(total, per * (d + 1));
  int64_t at = 0;
  for (const Piece& p : weights) {
    const int64_t n = p.rect.area(), a = std::max(lo, at), b = std::min(hi, at + n);
    if (a < b) {
      // Elements [a − at, b − at) of the piece, row-major: a partial first row, full rows, a
      // partial last row.
      const int64_t w = p.rect.c1 - p.rect.c0, f = a - at, e = b - at;
      const int64_t fr = f / w, fc = f % w, er = e / w, ec = e % w;
      auto add = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
        const Rect r{p.rect.r0 + r0, p.rect.r0 + r1, p.rect.c0 + c0, p.rect.c0 + c1};
        if (!r.empty()) out.push_back({p.tensor, StateKind::optimizer, r});
      };
      if (fr == er) {
        add(fr, fr + 1, fc, ec);
      } else {
        add(fr, fr + 1, fc, w);
        add(fr + 1, er, 0, w);
        add(er, er + 1, 0, ec);
      }
    }
    at += n;
  }
  return out;
}

}  // namespace cpbench
