// tile_test_util.h — what the kernels' tests share on the host (CPU and GPU tests alike): fp32
// values as bf16 and back, a tile's view of host or device rows, and one sequence's tile with the
// SIMT kernel's host results that the tensor-core kernels' tests compare against.
// Requires: kernels/cuda/flash_simt.h, kernels/reference/attention_testing.h (for tests only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/bf16.h"
#include "kernels/cuda/flash_simt.h"
#include "kernels/reference/attention_testing.h"

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

// One sequence of L tokens under `mask` (Hq query heads, Hkv K/V heads, head dim D, bf16 inputs
// drawn from seeds seed … seed + 3), its tile over keys [key_begin, key_begin + rows_k), and the
// SIMT kernel's host results on it: O and LSE (lse_stride L), and dQ, dK, dV added to 0.5 each
// (grad0), as the kernels add gradients.
struct TileProblem {
  int64_t L = 0, key_begin = 0, rows_k = 0, D = 0, Hq = 0, Hkv = 0;
  std::string what;  // for SCOPED_TRACE
  VarlenBatch batch;
  std::vector<Bf16> q, k, v, dout;
  SimtTile<Bf16> tile;  // on the host vectors above
  std::vector<float> out, lse, dq, dk, dv;
  static constexpr float grad0 = 0.5f;
  // Where a kernel's gradients start: grad0 everywhere.
  std::vector<float> dq0() const { return std::vector<float>(dq.size(), grad0); }
  std::vector<float> dkv0() const { return std::vector<float>(dk.size(), grad0); }
};

inline TileProblem tile_problem(const std::string& mask, int64_t D, int64_t L, int64_t key_begin, int64_t rows_k,
                                int64_t Hq, int64_t Hkv, uint64_t seed) {
  TileProblem p;
  p.L = L, p.key_begin = key_begin, p.rows_k = rows_k, p.D = D, p.Hq = Hq, p.Hkv = Hkv;
  p.what = mask + " d" + std::to_string(D) + " L" + std::to_string(L) + " keys " + std::to_string(key_begin) + "+" +
           std::to_string(rows_k);
  p.batch = make_batch({Hq, Hkv, D, 0.0}, {L}, {L}, mask_by_name(mask));
  p.q = bf16(random_tensor(L * Hq * D, seed));
  p.k = bf16(random_tensor(L * Hkv * D, seed + 1));
  p.v = bf16(random_tensor(L * Hkv * D, seed + 2));
  p.dout = bf16(random_tensor(L * Hq * D, seed + 3));
  p.tile = tile_of(p.q.data(), p.k.data() + key_begin * Hkv * D, p.v.data() + key_begin * Hkv * D,
                   p.batch.row_ranges.data(), L, rows_k, key_begin, p.batch.dims);
  p.out.resize(L * Hq * D);
  p.lse.resize(Hq * L);
  simt_forward_host(p.tile, p.out.data(), p.lse.data(), L);
  p.dq.assign(L * Hq * D, TileProblem::grad0);
  p.dk.assign(rows_k * Hkv * D, TileProblem::grad0);
  p.dv = p.dk;
  simt_backward_host(p.tile, p.out.data(), p.lse.data(), L, p.dout.data(), p.dq.data(), p.dk.data(), p.dv.data());
  return p;
}

}  // namespace cpbench::kernels::testing
