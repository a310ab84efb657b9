// flash_simt.h — our attention kernel's arithmetic, one query row (forward, dQ) or one key row
// (dK, dV) at a time, written once for the GPU and the CPU: the CUDA kernels (flash_simt.cu) run
// these functions in one thread per row, and the host driver (flash_simt_host.cpp) runs the very
// same functions in a loop, which is how CI (no GPU) checks the kernel's arithmetic against the
// reference for every mask.
// Requires: attention_problem.h's KeyRanges (sequence-relative key ranges per query row). Inputs
// fp32 or bf16 (bf16.h's Bf16, converted exactly to fp32); every sum and output in fp32.
// Note: SIMT, no tensor cores: the correctness path for any tile a plan can hold (per-row key
// ranges, GQA, rows without keys). O = 0 and LSE = −inf for a row with no allowed key, as the
// executor's merge expects. Online softmax (FlashAttention, Dao et al. 2022): per key j,
// m' = max(m, s_j), l' = l·e^(m−m') + e^(s_j−m'), acc' = acc·e^(m−m') + e^(s_j−m')·v_j.
// Backward (FlashAttention-2, Algorithm 2): P = e^(s − LSE), D_i = dO_i·O_i,
// dS = P∘(dO·Vᵀ − D); dQ = scale·dS K, dK = scale·dSᵀ Q, dV = Pᵀ dO.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/bf16.h"
#include "kernels/reference/attention_problem.h"


namespace cpbench::kernels {

// The longest head dim the SIMT kernel takes (its per-row accumulator).
inline constexpr int64_t kSimtMaxHeadDim = 256;

// One tile: rows_q query rows (rows_q, Hq, d) against keys [key_begin, key_begin + rows_k) of
// their sequence (rows_k, Hkv, d); query row i may see the keys in ranges[i].
template <class T>
struct SimtTile {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  const KeyRanges* ranges = nullptr;
  int64_t rows_q = 0, rows_k = 0, key_begin = 0;
  int64_t heads_q = 1, heads_kv = 1, head_dim = 64;
  float scale = 0.125f;
};

CPB_HD inline bool key_allowed(const KeyRanges& r, int64_t key) {
  return (key >= r.b0 && key < r.e0) || (key >= r.b1 && key < r.e1);
}

// The tile's keys allowed for a row, as at most two half-open index ranges into the tile's rows.
struct TileKeySpans {
  int64_t b0 = 0, e0 = 0, b1 = 0, e1 = 0;
};
CPB_HD inline TileKeySpans tile_key_spans(const KeyRanges& r, int64_t key_begin, int64_t rows_k) {
  auto clip = [&](int64_t b, int64_t e, int64_t& ob, int64_t& oe) {
    ob = (b > key_begin ? b : key_begin) - key_begin;
    oe = (e < key_begin + rows_k ? e : key_begin + rows_k) - key_begin;
    if (oe < ob) oe = ob;
  };
  TileKeySpans s;
  clip(r.b0, r.e0, s.b0, s.e0);
  clip(r.b1, r.e1, s.b1, s.e1);
  return s;
}

// Calls f(j) for every tile key row j query row i may see, in key order.
template <class T, class F>
CPB_HD inline void for_allowed_keys(const SimtTile<T>& t, int64_t i, F f) {
  const TileKeySpans s = tile_key_spans(t.ranges[i], t.key_begin, t.rows_k);
  for (int64_t j = s.b0; j < s.e0; ++j) f(j);
  for (int64_t j = s.b1; j < s.e1; ++j) f(j);
}

template <class T>
CPB_HD inline float dot_row(const T* a, const T* b, int64_t d) {
  float s = 0.0f;
  for (int64_t x = 0; x < d; ++x) s += to_f32(a[x]) * to_f32(b[x]);
  return s;
}

// Forward of query row i, head h: out (d floats), *lse. acc: d floats of scratch.
template <class T>
CPB_HD inline void simt_forward_row(const SimtTile<T>& t, int64_t i, int64_t h, float* acc, float* out, float* lse) {
  const int64_t d = t.head_dim, g = h / (t.heads_q / t.heads_kv);
  const T* q = t.q + (i * t.heads_q + h) * d;
  for (int64_t x = 0; x < d; ++x) acc[x] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for_allowed_keys(t, i, [&](int64_t j) {
    const T* k = t.k + (j * t.heads_kv + g) * d;
    const T* v = t.v + (j * t.heads_kv + g) * d;
    const float score = t.scale * dot_row(q, k, d);
    const float m_new = score > m ? score : m;
    const float correction = expf(m - m_new);  // 0 on the first key (m = −inf)
    const float p = expf(score - m_new);
    l = l * correction + p;
    for (int64_t x = 0; x < d; ++x) acc[x] = acc[x] * correction + p * to_f32(v[x]);
    m = m_new;
  });
  if (l > 0.0f) {
    const float inv = 1.0f / l;
    for (int64_t x = 0; x < d; ++x) out[x] = acc[x] * inv;
    *lse = m + logf(l);
  } else {
    for (int64_t x = 0; x < d; ++x) out[x] = 0.0f;
    *lse = -INFINITY;
  }
}

// dQ of query row i, head h, ADDED into dq (d floats). out, lse, dout: the row's final forward
// output (merged over all keys), its LSE and the incoming gradient.
template <class T>
CPB_HD inline void simt_dq_row(const SimtTile<T>& t, int64_t i, int64_t h, const float* out, float lse, const T* dout,
                               float* dq) {
  if (lse == -INFINITY) return;  // no key anywhere: no gradient
  const int64_t d = t.head_dim, g = h / (t.heads_q / t.heads_kv);
  const T* q = t.q + (i * t.heads_q + h) * d;
  float D = 0.0f;
  for (int64_t x = 0; x < d; ++x) D += to_f32(dout[x]) * out[x];
  for_allowed_keys(t, i, [&](int64_t j) {
    const T* k = t.k + (j * t.heads_kv + g) * d;
    const T* v = t.v + (j * t.heads_kv + g) * d;
    const float p = expf(t.scale * dot_row(q, k, d) - lse);
    const float ds = p * (dot_row(dout, v, d) - D);
    for (int64_t x = 0; x < d; ++x) dq[x] += t.scale * ds * to_f32(k[x]);
  });
}

// dK and dV of the tile's key row j, KV head g (every query head of its group, every query row
// that may see the key), ADDED into dk and dv (d floats each). out, lse, dout: the tile's query
// rows' final outputs (rows_q, Hq, d), LSE at lse[h·lse_stride + i] and incoming gradients.
template <class T>
CPB_HD inline void simt_dkv_row(const SimtTile<T>& t, int64_t j, int64_t g, const float* out, const float* lse,
                                int64_t lse_stride, const T* dout, float* dk, float* dv) {
  const int64_t d = t.head_dim, group = t.heads_q / t.heads_kv, key = t.key_begin + j;
  const T* k = t.k + (j * t.heads_kv + g) * d;
  const T* v = t.v + (j * t.heads_kv + g) * d;
  for (int64_t h = g * group; h < (g + 1) * group; ++h)
    for (int64_t i = 0; i < t.rows_q; ++i) {
      if (!key_allowed(t.ranges[i], key)) continue;
      const float row_lse = lse[h * lse_stride + i];
      if (row_lse == -INFINITY) continue;
      const T* q = t.q + (i * t.heads_q + h) * d;
      const T* dO = dout + (i * t.heads_q + h) * d;
      const float* o = out + (i * t.heads_q + h) * d;
      float D = 0.0f;
      for (int64_t x = 0; x < d; ++x) D += to_f32(dO[x]) * o[x];
      const float p = expf(t.scale * dot_row(q, k, d) - row_lse);
      const float ds = p * (dot_row(dO, v, d) - D);
      for (int64_t x = 0; x < d; ++x) {
        dk[x] += t.scale * ds * to_f32(q[x]);
        dv[x] += p * to_f32(dO[x]);
      }
    }
}

// The SIMT view of an executor tile (fp32), its key ranges at `ranges` (the tile's own on the host,
// a device copy on the GPU).
inline SimtTile<float> simt_tile(const TileInput& t, const KeyRanges* ranges) {
  SimtTile<float> s;
  s.q = t.q;
  s.k = t.k;
  s.v = t.v;
  s.ranges = ranges;
  s.rows_q = t.rows_q;
  s.rows_k = t.rows_k;
  s.key_begin = t.key_begin;
  s.heads_q = t.dims.heads_q;
  s.heads_kv = t.dims.heads_kv;
  s.head_dim = t.dims.head_dim;
  s.scale = static_cast<float>(t.dims.softmax_scale());
  return s;
}

// The whole tile on the host, row by row through the functions above (what the CUDA kernels run
// per thread): out (rows_q, Hq, d), lse at lse[h·lse_stride + i]; gradients ADDED into dq
// (rows_q, Hq, d), dk and dv (rows_k, Hkv, d).
template <class T>
void simt_forward_host(const SimtTile<T>& t, float* out, float* lse, int64_t lse_stride);
template <class T>
void simt_backward_host(const SimtTile<T>& t, const float* out, const float* lse, int64_t lse_stride, const T* dout,
                        float* dq, float* dk, float* dv);

}  // namespace cpbench::kernels
