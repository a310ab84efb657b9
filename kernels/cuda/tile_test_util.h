// tile_test_util.h — what the kernels' tests share on the host (CPU and GPU tests alike): fp32
// values as bf16 and back, and a tile's view of host or device rows.
// Requires: kernels/cuda/flash_simt.h (for tests only).
#pragma once

#include <vector>

#include "kernels/cuda/bf16.h"
#include "kernels/cuda/flash_simt.h"

namespace cpbench::kernels::testing {

inline std::vector<Bf16> bf16(const std::vector<float>& x) {
  std::vector<Bf16> out;
  for (float v : x) out.push_back(to_bf16(v));
  return out;
}

inline std::vector<float> f32(const std::vector<Bf16>& x) {
  std::vector<float> out;
  for (Bf16 v : x) out.push_back(to_f32(v));
  return out;
}

// rows_q query rows at q against rows_k keys at k and v (already at the tile's first key,
// key_begin of the sequence), query row i seeing ranges[i]; heads, head dim and scale of `dims`.
template <class T>
SimtTile<T> tile_of(const T* q, const T* k, const T* v, const KeyRanges* ranges, int64_t rows_q, int64_t rows_k,
                    int64_t key_begin, const AttentionDims& dims) {
  SimtTile<T> t;
  t.q = q, t.k = k, t.v = v, t.ranges = ranges;
  t.rows_q = rows_q, t.rows_k = rows_k, t.key_begin = key_begin;
  t.heads_q = dims.heads_q, t.heads_kv = dims.heads_kv, t.head_dim = dims.head_dim;
  t.scale = static_cast<float>(dims.softmax_scale());
  return t;
}

}  // namespace cpbench::kernels::testing
