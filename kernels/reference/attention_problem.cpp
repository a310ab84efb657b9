// attention_problem.cpp — validation and range clipping of packed attention batches.
#include "kernels/reference/attention_problem.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace cpbench::kernels {

double AttentionDims::softmax_scale() const {
  return scale > 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

std::string validate_batch(const VarlenBatch& batch) {
  const AttentionDims& d = batch.dims;
  if (d.heads_q < 1 || d.heads_kv < 1) return "heads_q and heads_kv must be ≥ 1";
  if (d.heads_q % d.heads_kv != 0) {
    return "heads_q (" + std::to_string(d.heads_q) + ") must be a multiple of heads_kv (" +
           std::to_string(d.heads_kv) + ")";
  }
  if (d.head_dim < 1) return "head_dim must be ≥ 1";
  if (!(d.scale >= 0.0) || !std::isfinite(d.scale)) return "scale must be finite and ≥ 0 (0 = 1/sqrt(d))";
  if (batch.cu_seqlens_q.empty() || batch.cu_seqlens_k.empty()) return "cu_seqlens must hold at least {0}";
  if (batch.cu_seqlens_q.size() != batch.cu_seqlens_k.size()) {
    return "cu_seqlens_q and cu_seqlens_k must describe the same number of sequences";
  }
  for (const auto* cu : {&batch.cu_seqlens_q, &batch.cu_seqlens_k}) {
    if (cu->front() != 0) return "cu_seqlens must start at 0";
    for (size_t i = 1; i < cu->size(); ++i) {
      if ((*cu)[i] < (*cu)[i - 1]) return "cu_seqlens must be non-decreasing (at index " + std::to_string(i) + ")";
    }
  }
  if (static_cast<int64_t>(batch.row_ranges.size()) != batch.total_q()) {
    return "row_ranges has " + std::to_string(batch.row_ranges.size()) + " rows, expected total_q = " +
           std::to_string(batch.total_q());
  }
  return "";
}

int64_t clip_ranges(const KeyRanges& row, int64_t k_begin, int64_t k_end, int64_t& b0, int64_t& e0,
                    int64_t& b1, int64_t& e1) {
  std::pair<int64_t, int64_t> a{std::max(row.b0, k_begin), std::min(row.e0, k_end)};
  std::pair<int64_t, int64_t> b{std::max(row.b1, k_begin), std::min(row.e1, k_end)};
  if (a.second <= a.first) a = {k_begin, k_begin};
  if (b.second <= b.first) b = {k_begin, k_begin};
  if (a.second == a.first) std::swap(a, b);  // a non-empty range first
  if (b.second > b.first && b.first < a.first) std::swap(a, b);
  if (b.second > b.first && b.first <= a.second) {  // overlapping or touching: merge into one
    a.second = std::max(a.second, b.second);
    b = {a.second, a.second};
  }
  if (b.second <= b.first) b = {a.second, a.second};
  b0 = a.first;
  e0 = a.second;
  b1 = b.first;
  e1 = b.second;
  return (e0 - b0) + (e1 - b1);
}

int64_t allowed_pairs(const VarlenBatch& batch) {
  int64_t pairs = 0;
  for (int64_t s = 0; s < batch.sequences(); ++s) {
    const int64_t len_k = batch.cu_seqlens_k[s + 1] - batch.cu_seqlens_k[s];
    for (int64_t r = batch.cu_seqlens_q[s]; r < batch.cu_seqlens_q[s + 1]; ++r) {
      int64_t b0, e0, b1, e1;
      pairs += clip_ranges(batch.row_ranges[r], 0, len_k, b0, e0, b1, e1);
    }
  }
  return pairs;
}

}  // namespace cpbench::kernels
