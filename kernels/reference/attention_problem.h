// attention_problem.h — the shape of a packed variable-length attention batch shared by every
// kernel: head counts (GQA), cu_seqlens offsets, and the mask as ≤ 2 key ranges per query row.
// Requires: nothing from core/ (kernels/ stands alone, DESIGN.md); storage is row-major float.
// Note: layouts — Q, O, dO: (total_q, Hq, d); K, V: (total_k, Hkv, d); LSE: (Hq, total_q).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cpbench::kernels {

// Keys a query row may attend to: [b0, e0) ∪ [b1, e1), positions RELATIVE TO ITS SEQUENCE'S first
// key (so a mask is written once per sequence, whatever its offset in the pack). Ranges are
// clipped to [0, len_k) by the kernels; empty ranges (b ≥ e) contribute nothing, and a row whose
// ranges are both empty is fully masked (O = 0, LSE = −inf). Mirrors core/workload/mask.h's
// KeyRanges as plain data, because kernels/ may not include core/.
struct KeyRanges {
  int64_t b0 = 0, e0 = 0, b1 = 0, e1 = 0;
};

// Head counts, head dim and the softmax scale. GQA: query head h reads KV head h / (Hq / Hkv).
struct AttentionDims {
  int64_t heads_q = 1;
  int64_t heads_kv = 1;
  int64_t head_dim = 64;
  double scale = 0.0;  // 0 means the usual 1/sqrt(head_dim) (Vaswani et al. 2017, eq. 1)

  double softmax_scale() const;
  int64_t group_size() const { return heads_q / heads_kv; }  // query heads per KV head
};

// A packed batch: sequence s owns query rows [cu_seqlens_q[s], cu_seqlens_q[s+1]) and key rows
// [cu_seqlens_k[s], cu_seqlens_k[s+1]); no attention crosses sequences. row_ranges has one entry
// per query row (total_q), relative to its own sequence's first key.
struct VarlenBatch {
  AttentionDims dims;
  std::vector<int64_t> cu_seqlens_q{0};
  std::vector<int64_t> cu_seqlens_k{0};
  std::vector<KeyRanges> row_ranges;

  int64_t sequences() const { return static_cast<int64_t>(cu_seqlens_q.size()) - 1; }
  int64_t total_q() const { return cu_seqlens_q.back(); }
  int64_t total_k() const { return cu_seqlens_k.back(); }
};

// Empty when the batch is well formed, else what is wrong (kernels do not include core/'s
// Expected; callers in core/ wrap the message). Checks head counts, head_dim ≥ 1, scale ≥ 0,
// monotone offsets starting at 0 with equal sequence counts, and one KeyRanges per query row.
std::string validate_batch(const VarlenBatch& batch);

// Keys of `row` that are allowed and inside [k_begin, k_end) (all positions sequence-relative),
// as two clipped half-open ranges; returns the number of allowed keys.
int64_t clip_ranges(const KeyRanges& row, int64_t k_begin, int64_t k_end, int64_t& b0, int64_t& e0,
                    int64_t& b1, int64_t& e1);

// Allowed (query, key) pairs of the whole batch, per head: the work unit of the FLOP counts
// (forward = 4·pairs·d·Hq, backward = 2.5× that; FlashAttention-2 paper, §4.1 convention).
int64_t allowed_pairs(const VarlenBatch& batch);

// One tile's inputs, as every backend's tile kernel takes them (kernels/cpu, kernels/cuda). Rows of Q belong to sequence positions the ranges are written against;
// keys are rows [key_begin, key_begin + rows_k) of the sequence. Row strides are Hq·d (Q, O, dO)
// and Hkv·d (K, V) — i.e. the tile points into a packed tensor without copies.
struct TileInput {
  AttentionDims dims;
  const float* q = nullptr;           // (rows_q, Hq, d)
  int64_t rows_q = 0;
  const KeyRanges* ranges = nullptr;  // (rows_q), key positions relative to the sequence start
  const float* k = nullptr;           // (rows_k, Hkv, d)
  const float* v = nullptr;           // (rows_k, Hkv, d)
  int64_t rows_k = 0;
  int64_t key_begin = 0;              // sequence position of k's first row
};

// A tile's (or a merge's) partial result over some keys of a query range.
struct PartialOutput {
  std::vector<float> out;  // (rows_q, Hq, d), normalised over this tile's keys
  std::vector<float> lse;  // (Hq, rows_q); −inf where the row has no allowed key in the tile
};

}  // namespace cpbench::kernels
