// state_layout.h — Tenplex's parallelizable tensor collection (SOSP'24; references/
// tenplex_tensoropt.md): a model's training state as tensors with global shapes, and for a
// (TP, PP, DP, distributed optimizer) layout exactly which index ranges of which tensor each rank
// holds, the way Megatron-LM shards them.
// Requires: core/model/model.h. Ranks are numbered as Megatron orders them (TP fastest, then DP,
// then PP: core/plan/parallel_config.h global_rank with cp = 1); rank i runs on GPU i.
// Note: every tensor is 2-D (a vector is 1 × n). Megatron's splits: QKV, FC1 and the vocabulary
// by rows ("column-parallel": output features), projection and FC2 by columns ("row-parallel");
// the fused QKV interleaves heads per query group, so a TP rank's groups are contiguous rows; a
// gated FC1 stacks gate and up halves and a rank holds its slice of each (two row ranges); the
// vocabulary is padded to a multiple of 128·t, the padding rows hold no state (zero on arrival);
// tied embeddings put a copy of the word embedding on the last stage. The distributed optimizer
// shards each (TP, PP) group's flat buffer of fp32 state (master weight, two Adam moments)
// contiguously over the DP ranks, cutting across tensor boundaries — simplified: Megatron shards
// each gradient bucket (parameters in reverse order, padded to a multiple of dp) the same way, so
// its cut points differ; what a re-shard must move is of the same kind.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/model.h"

namespace cpbench {

struct StateLayout {
  int64_t tp = 1, pp = 1, dp = 1;
  bool distributed_optimizer = false;
  int64_t ranks() const { return tp * pp * dp; }
  int64_t rank_of(int64_t stage, int64_t dp_rank, int64_t tp_rank) const { return (stage * dp + dp_rank) * tp + tp_rank; }
  int64_t tp_rank(int64_t rank) const { return rank % tp; }
  int64_t dp_rank(int64_t rank) const { return (rank / tp) % dp; }
  int64_t stage(int64_t rank) const { return rank / (tp * dp); }
  std::string str() const;  // "(t4, p2, d1)" or "(t4, p2, d2, dist-opt)"
};

// Half-open rows [r0, r1) × columns [c0, c1) of a 2-D tensor.
struct Rect {
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
  int64_t area() const { return (r1 - r0) * (c1 - c0); }
  bool empty() const { return r1 <= r0 || c1 <= c0; }
  bool operator==(const Rect&) const = default;
};
Rect intersect(const Rect& a, const Rect& b);
// a minus b as at most four disjoint rectangles.
std::vector<Rect> subtract(const Rect& a, const Rect& b);

// How tensor parallelism splits a tensor.
enum class TpSplit { replicated, rows, columns, vocab_rows, gated_rows };

struct ModelTensor {
  std::string name;  // "layer3.qkv.weight"
  int64_t rows = 1, cols = 1;  // global shape (the vocabulary unpadded)
  TpSplit split = TpSplit::replicated;
  int64_t layer = -1;         // transformer layer; -1: outside the layers
  bool first_stage = false;   // outside the layers: held by the first stage …
  bool last_stage = false;    // … and/or by the last
};

// The model's tensors in Megatron's order; `max_seq` sizes a learned position table.
std::vector<ModelTensor> model_tensors(const ModelShape& model, int64_t max_seq);

// The state kinds a rank holds: the 16-bit model weights, and the optimizer's fp32 master weights
// and two Adam moments (one entry: the same index ranges, 12 bytes per element).
enum class StateKind { weights, optimizer };
double bytes_per_element(StateKind kind);  // 2 and 12

// Part of a tensor held by a rank.
struct Piece {
  int tensor = 0;
  StateKind kind = StateKind::weights;
  Rect rect;
};

// Everything `rank` holds under `layout` (model weights, then optimizer state), for the model's
// tensors. Errors (empty vector and `why` set) when the model does not split: layers over pp,
// heads, KV heads or the FFN over tp.
std::vector<Piece> rank_state(const ModelShape& model, const std::vector<ModelTensor>& tensors, const StateLayout& layout,
                              int64_t rank);

// "" when the model splits under the layout; otherwise why not.
std::string check_state_layout(const ModelShape& model, const StateLayout& layout);

// Megatron's padded vocabulary under tensor parallelism t: V rounded up to a multiple of 128·t.
int64_t padded_vocab(int64_t vocab, int64_t tp);

}  // namespace cpbench
