// flash_mma_body.h — the tensor-core kernels' code (flash_mma.h), one definition for the GPU and
// the CPU. Each block's work is a function of a Ctx that supplies what a CUDA thread has: its thread
// and block indices, the block's barriers, warp shuffles, mma.sync, ldmatrix and atomics.
// flash_mma.cu instantiates the bodies with the device's own instructions (DeviceCtx, inline PTX);
// flash_mma_emulate.cpp with a host emulation that runs a block's 128 threads as threads of the
// process and computes each warp instruction from the PTX ISA's fragment layouts — how CI runs
// these kernels' own code, not a copy of it, against the reference on a machine without a GPU.
// Requires: flash_mma.h. A Ctx provides: int thread(), block_x(), block_y(), grid_x(); void sync();
// bool sync_or(bool); float shfl_xor(float, int lane_mask); void mma(float (&d)[4], const
// uint32_t (&a)[4], uint32_t b0, uint32_t b1) (D += A·B, m16n8k16, bf16 in, fp32 out); void
// ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* row); void atomic_add(float*, float);
// void atomic_min(int*, int); void atomic_max(int*, int).
// Note: on the host, loads and stores of several bf16 at once go through memcpy (no aliasing).
#pragma once

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/flash_mma.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#define CPB_HD_INLINE __host__ __device__ __forceinline__
#define CPB_UNROLL _Pragma("unroll")
#else
#define CPB_HD_INLINE inline
#define CPB_UNROLL
#endif

namespace cpbench::kernels::mma_body {

constexpr int kWarps = kMmaRowsPerBlock / 16;
constexpr int kThreads = 32 * kWarps;

// The forward's shared row stride in elements: 16 bytes of padding, conflict-free reads.
template <int D>
inline constexpr int kForwardLd = D + 8;

// Two bf16 at p as one 32-bit register (the low half first).
CPB_HD_INLINE uint32_t load32(const uint16_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t u;
  std::memcpy(&u, p, sizeof u);
  return u;
#endif
}

// Eight bf16 (16 bytes) from src to dst, zeros when src is null.
CPB_HD_INLINE void copy16(uint16_t* dst, const uint16_t* src) {
#if defined(__CUDA_ARCH__)
  uint4 v = {0, 0, 0, 0};
  if (src) v = *reinterpret_cast<const uint4*>(src);
  *reinterpret_cast<uint4*>(dst) = v;
#else
  if (src) std::memcpy(dst, src, 16);
  else std::memset(dst, 0, 16);
#endif
}

// Two floats at p (8-byte aligned on the device).
CPB_HD_INLINE void store2(float* p, float a, float b) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
#else
  p[0] = a;
  p[1] = b;
#endif
}

// fp32 to bf16 bits, rounded to nearest even; two of them packed, lo in the low half.
CPB_HD_INLINE uint16_t bf16_bits(float x) {
#if defined(__CUDA_ARCH__)
  const __nv_bfloat16 b = __float2bfloat16_rn(x);
  return *reinterpret_cast<const uint16_t*>(&b);
#else
  return to_bf16(x).bits;
#endif
}
CPB_HD_INLINE uint32_t pack_bf16(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low half
  return *reinterpret_cast<const uint32_t*>(&v);
#else
  return static_cast<uint32_t>(to_bf16(lo).bits) | (static_cast<uint32_t>(to_bf16(hi).bits) << 16);
#endif
}

// A fragment (mma_a_coord) of the 16 × 16 block at `block` of a row-major bf16 matrix in shared
// memory with row stride ld: two adjacent elements per register.
CPB_HD_INLINE void load_a(uint32_t (&a)[4], const uint16_t* block, int ld, int lane) {
  CPB_UNROLL
  for (int r = 0; r < 4; ++r) {
    const FragCoord c = mma_a_coord(lane, r);
    a[r] = load32(block + c.row * ld + c.col);
  }
}

// The A fragment of k-step kk taken from accumulators s (16 × 8·N, n-tiles of 8): n-tiles 2·kk and
// 2·kk + 1 are its 16 columns, rounded to bf16 (flash_mma_test: an accumulator pair is the A pair).
template <int N>
CPB_HD_INLINE void a_from_accumulators(uint32_t (&a)[4], const float (&s)[N][4], int kk) {
  a[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
  a[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
  a[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  a[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// acc (16 × D) += A (k-step kk) · B, B the rows kk·16 … kk·16 + 15 of a row-major [k][D] bf16 block
// in shared memory with row stride ld, read transposed by ldmatrix two n-tiles at a time.
template <int D, class Ctx>
CPB_HD_INLINE void mma_times_rows(Ctx& ctx, float (&acc)[D / 8][4], const uint32_t (&a)[4], const uint16_t* rows, int ld,
                                  int kk, int lane) {
  const int matrix = lane / 8;
  CPB_UNROLL
  for (int dt = 0; dt < D / 8; dt += 2) {
    uint32_t b[4];
    ctx.ldmatrix_x4_trans(b, rows + (kk * 16 + (matrix & 1) * 8 + lane % 8) * ld + (dt + (matrix >> 1)) * 8);
    ctx.mma(acc[dt], a, b[0], b[1]);
    ctx.mma(acc[dt + 1], a, b[2], b[3]);
  }
}

// Over the four lanes of a quad (the lanes holding one accumulator row).
template <class Ctx>
CPB_HD_INLINE float quad_max(Ctx& ctx, float x) {
  x = fmaxf(x, ctx.shfl_xor(x, 1));
  return fmaxf(x, ctx.shfl_xor(x, 2));
}
template <class Ctx>
CPB_HD_INLINE float quad_sum(Ctx& ctx, float x) {
  x += ctx.shfl_xor(x, 1);
  return x + ctx.shfl_xor(x, 2);
}

// The forward of one block of 64 query rows of head ctx.block_y() (the grid's last block first):
// ks and vs are shared [64][kForwardLd<D>] bf16 blocks, span two shared ints.
template <int D, class Ctx>
CPB_HD_INLINE void forward_block(Ctx& ctx, const SimtTile<Bf16>& t, float* out, float* lse, int64_t lse_stride,
                                 uint16_t* ks, uint16_t* vs, int* span) {
  constexpr int BN = kMmaKeysPerBlock;
  constexpr int LD = kForwardLd<D>;
  int& span_lo = span[0];
  int& span_hi = span[1];

  const int warp = ctx.thread() / 32, lane = ctx.thread() % 32, group = lane / 4, quad = lane % 4;
  // The last query blocks first: under a causal mask they are the longest.
  const int64_t row0 = static_cast<int64_t>(ctx.grid_x() - 1 - ctx.block_x()) * kMmaRowsPerBlock;
  const int64_t h = ctx.block_y(), g = h / (t.heads_q / t.heads_kv);
  const auto* q = reinterpret_cast<const uint16_t*>(t.q);
  const auto* k = reinterpret_cast<const uint16_t*>(t.k);
  const auto* v = reinterpret_cast<const uint16_t*>(t.v);

  // The key blocks this block of rows may see.
  if (ctx.thread() == 0) span_lo = INT_MAX, span_hi = 0;
  ctx.sync();
  if (ctx.thread() < kMmaRowsPerBlock && row0 + ctx.thread() < t.rows_q) {
    const KeySpan s = row_key_span(t.ranges[row0 + ctx.thread()], t.key_begin, t.rows_k);
    if (s.hi > s.lo) {
      ctx.atomic_min(&span_lo, static_cast<int>(s.lo));
      ctx.atomic_max(&span_hi, static_cast<int>(s.hi));
    }
  }
  ctx.sync();
  const int first_key = (span_lo / BN) * BN, end_key = span_hi;

  // This thread's two rows (mma_c_coord's group and group + 8) and their key ranges.
  int64_t row[2];
  KeyRanges range[2];
  CPB_UNROLL
  for (int i = 0; i < 2; ++i) {
    row[i] = row0 + warp * 16 + group + 8 * i;
    range[i] = row[i] < t.rows_q ? t.ranges[row[i]] : KeyRanges{};
  }
  // The warp's 16 query rows as A fragments, D/16 of them along the head dim.
  uint32_t qf[D / 16][4];
  CPB_UNROLL
  for (int kk = 0; kk < D / 16; ++kk)
    CPB_UNROLL
    for (int r = 0; r < 4; ++r) {
      const FragCoord c = mma_a_coord(lane, r);
      const int64_t i = row0 + warp * 16 + c.row;
      qf[kk][r] = i < t.rows_q ? load32(q + (i * t.heads_q + h) * D + kk * 16 + c.col) : 0u;
    }

  const float scale_log2 = t.scale * 1.4426950408889634f;
  float acc[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int kb = first_key; kb < end_key; kb += BN) {
    ctx.sync();  // every warp is done with the previous block's K and V
    CPB_UNROLL
    for (int c = ctx.thread(); c < BN * D / 8; c += kThreads) {
      const int r = c / (D / 8), x = (c % (D / 8)) * 8;
      const int64_t j = kb + r;
      copy16(ks + r * LD + x, j < t.rows_k ? k + (j * t.heads_kv + g) * D + x : nullptr);
      copy16(vs + r * LD + x, j < t.rows_k ? v + (j * t.heads_kv + g) * D + x : nullptr);
    }
    ctx.sync();

    // S = Q·Kᵀ: 16 rows × 64 keys, eight n-tiles of 8 keys. B (k = head dim, n = key) is K's row,
    // two adjacent elements per register.
    float s[BN / 8][4] = {};
    CPB_UNROLL
    for (int kk = 0; kk < D / 16; ++kk)
      CPB_UNROLL
      for (int nt = 0; nt < BN / 8; ++nt) {
        const uint16_t* key_row = ks + (nt * 8 + group) * LD + kk * 16 + 2 * quad;
        ctx.mma(s[nt], qf[kk], load32(key_row),
                 load32(key_row + 8));
      }

    // Mask, scale, and the running max of each row.
    float block_max[2] = {m[0], m[1]};
    CPB_UNROLL
    for (int nt = 0; nt < BN / 8; ++nt)
      CPB_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int64_t j = kb + nt * 8 + mma_c_coord(lane, e).col;
        const bool allowed = j < t.rows_k && key_allowed(range[e >> 1], t.key_begin + j);
        s[nt][e] = allowed ? s[nt][e] * scale_log2 : -INFINITY;
        block_max[e >> 1] = fmaxf(block_max[e >> 1], s[nt][e]);
      }
    float base[2];
    CPB_UNROLL
    for (int i = 0; i < 2; ++i) {
      const float new_max = quad_max(ctx, block_max[i]);
      base[i] = new_max == -INFINITY ? 0.0f : new_max;  // a row without a key yet: every p is 0
      const float correction = exp2f(m[i] - base[i]);  // 0 while m = −inf
      m[i] = new_max;
      l[i] *= correction;
      CPB_UNROLL
      for (int dt = 0; dt < D / 8; ++dt) {
        acc[dt][2 * i] *= correction;
        acc[dt][2 * i + 1] *= correction;
      }
    }

    // P = 2^(s − max), summed per thread (the quad's sum is taken once, at the end), and packed as
    // the A fragments of P·V: n-tiles 2·kk and 2·kk + 1 of S are the 16 keys of k-step kk.
    CPB_UNROLL
    for (int nt = 0; nt < BN / 8; ++nt)
      CPB_UNROLL
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - base[e >> 1]);
        l[e >> 1] += s[nt][e];
      }

    // O += P·V: B (k = key, n = head dim) read transposed from V's rows.
    CPB_UNROLL
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t pf[4];
      a_from_accumulators(pf, s, kk);
      mma_times_rows<D>(ctx, acc, pf, vs, LD, kk, lane);
    }
  }

  CPB_UNROLL
  for (int i = 0; i < 2; ++i) {
    const float sum = quad_sum(ctx, l[i]);
    if (row[i] >= t.rows_q) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    float* o = out + (row[i] * t.heads_q + h) * D + 2 * quad;
    CPB_UNROLL
    for (int dt = 0; dt < D / 8; ++dt)
      store2(o + dt * 8, acc[dt][2 * i] * inv, acc[dt][2 * i + 1] * inv);
    if (quad == 0)
      lse[h * lse_stride + row[i]] = sum > 0.0f ? (m[i] + log2f(sum)) * 0.6931471805599453f : -INFINITY;
  }
}

// D = Σ_d dO·O of (row, head) item = i·Hq + h, at dvec[h·rows_q + i]: the backward's row term,
// computed once rather than once per key block.
CPB_HD_INLINE void row_dot(const SimtTile<Bf16>& t, const Bf16* dout, const float* out, float* dvec, int64_t item) {
  const Bf16* g = dout + item * t.head_dim;
  const float* o = out + item * t.head_dim;
  float s = 0.0f;
  for (int64_t x = 0; x < t.head_dim; ++x) s += to_f32(g[x]) * o[x];
  dvec[(item % t.heads_q) * t.rows_q + item / t.heads_q] = s;
}

// Shared memory of the backward, in elements of 16 bits: K and V of the key block, Q and dO of the
// query block (rows padded to D + 8), dS as [row][key] (rows padded to 64 + 8); then the query
// rows' key ranges, LSE (log2) and D.
template <int D>
constexpr size_t backward_smem_bytes() {
  return 2 * (2 * kMmaKeysPerBlock * (D + 8) + 2 * kMmaRowsPerBlock * (D + 8) + kMmaRowsPerBlock * (kMmaKeysPerBlock + 8)) +
         kMmaRowsPerBlock * (sizeof(KeyRanges) + 2 * sizeof(float));
}

// The backward of one block of 64 keys (ctx.block_x()) of KV head ctx.block_y(): smem is
// backward_smem_bytes<D>() of shared memory, 16-byte aligned; dvec from row_dot.
template <int D, class Ctx>
CPB_HD_INLINE void backward_block(Ctx& ctx, const SimtTile<Bf16>& t, const float* lse, int64_t lse_stride,
                                  const float* dvec, const Bf16* dout_bf16, float* dq, float* dk, float* dv,
                                  unsigned char* smem) {
  constexpr int BM = kMmaRowsPerBlock, BN = kMmaKeysPerBlock;
  constexpr int LD = D + 8, LDS = BN + 8;
  auto* ks = reinterpret_cast<uint16_t*>(smem);
  uint16_t* vs = ks + BN * LD;
  uint16_t* qs = vs + BN * LD;
  uint16_t* dos = qs + BM * LD;
  uint16_t* dss = dos + BM * LD;
  auto* rs = reinterpret_cast<KeyRanges*>(dss + BM * LDS);  // every part above is a multiple of 16 bytes
  auto* lse2s = reinterpret_cast<float*>(rs + BM);
  float* drow = lse2s + BM;

  const int warp = ctx.thread() / 32, lane = ctx.thread() % 32, group = lane / 4, quad = lane % 4;
  const int64_t kb = static_cast<int64_t>(ctx.block_x()) * BN, g = ctx.block_y(), per_group = t.heads_q / t.heads_kv;
  const auto* q = reinterpret_cast<const uint16_t*>(t.q);
  const auto* k = reinterpret_cast<const uint16_t*>(t.k);
  const auto* v = reinterpret_cast<const uint16_t*>(t.v);
  const auto* dout = reinterpret_cast<const uint16_t*>(dout_bf16);
  constexpr float kLog2e = 1.4426950408889634f;
  const float scale_log2 = t.scale * kLog2e;

  // Rows r of a [rows][D] bf16 block from global rows first + r (zeros past `rows`), 8 at a time.
  auto load_rows = [&](uint16_t* dst, const uint16_t* src, int64_t first, int64_t rows, int64_t heads, int64_t head) {
    for (int c = ctx.thread(); c < 64 * D / 8; c += kThreads) {
      const int r = c / (D / 8), x = (c % (D / 8)) * 8;
      const int64_t i = first + r;
      copy16(dst + r * LD + x, i < rows ? src + (i * heads + head) * D + x : nullptr);
    }
  };
  load_rows(ks, k, kb, t.rows_k, t.heads_kv, g);
  load_rows(vs, v, kb, t.rows_k, t.heads_kv, g);

  // This thread's two keys: rows group and group + 8 of its warp's 16 in the accumulators.
  int64_t key[2];
  CPB_UNROLL
  for (int i = 0; i < 2; ++i) key[i] = kb + warp * 16 + group + 8 * i;
  float dk_acc[D / 8][4] = {}, dv_acc[D / 8][4] = {};

  for (int64_t h = g * per_group; h < (g + 1) * per_group; ++h)
    for (int64_t qb = 0; qb < t.rows_q; qb += BM) {
      ctx.sync();  // every warp is done with the previous query block
      bool meets = false;
      if (ctx.thread() < BM) {
        const int64_t i = qb + ctx.thread();
        KeyRanges r{};
        float l2 = -INFINITY, d_i = 0.0f;
        if (i < t.rows_q) {
          r = t.ranges[i];
          l2 = lse[h * lse_stride + i] * kLog2e;
          d_i = dvec[h * t.rows_q + i];
          meets = span_meets(row_key_span(r, t.key_begin, t.rows_k), kb, kb + BN);
        }
        rs[ctx.thread()] = r;
        lse2s[ctx.thread()] = l2;
        drow[ctx.thread()] = d_i;
      }
      if (!ctx.sync_or(meets)) continue;  // no row of this block sees a key of ours
      load_rows(qs, q, qb, t.rows_q, t.heads_q, h);
      load_rows(dos, dout, qb, t.rows_q, t.heads_q, h);
      ctx.sync();

      // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: the warp's 16 keys × 64 rows. A: K's and V's rows; B (k = head
      // dim, n = query row): Q's and dO's rows, two adjacent elements per register.
      float st[BM / 8][4] = {}, dpt[BM / 8][4] = {};
      CPB_UNROLL
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t ka[4], va[4];
        load_a(ka, ks + warp * 16 * LD + kk * 16, LD, lane);
        load_a(va, vs + warp * 16 * LD + kk * 16, LD, lane);
        CPB_UNROLL
        for (int nt = 0; nt < BM / 8; ++nt) {
          const int at = (nt * 8 + group) * LD + kk * 16 + 2 * quad;
          ctx.mma(st[nt], ka, load32(qs + at), load32(qs + at + 8));
          ctx.mma(dpt[nt], va, load32(dos + at),
                   load32(dos + at + 8));
        }
      }

      // Pᵀ = 2^(Sᵀ·scale·log2 e − LSE₂) where the row may see the key, dSᵀ = Pᵀ∘(dPᵀ − D).
      CPB_UNROLL
      for (int nt = 0; nt < BM / 8; ++nt)
        CPB_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int r = nt * 8 + mma_c_coord(lane, e).col;
          const int64_t j = key[e >> 1];
          const bool allowed = j < t.rows_k && lse2s[r] != -INFINITY && key_allowed(rs[r], t.key_begin + j);
          const float p = allowed ? exp2f(st[nt][e] * scale_log2 - lse2s[r]) : 0.0f;
          st[nt][e] = p;
          dpt[nt][e] = p * (dpt[nt][e] - drow[r]);
        }

      // dV += Pᵀ·dO and dK += dSᵀ·Q: A from the accumulators (k = query rows, as the forward hands P
      // to P·V), B read transposed from dO's and Q's rows.
      CPB_UNROLL
      for (int kk = 0; kk < BM / 16; ++kk) {
        uint32_t pa[4], sa[4];
        a_from_accumulators(pa, st, kk);
        a_from_accumulators(sa, dpt, kk);
        mma_times_rows<D>(ctx, dv_acc, pa, dos, LD, kk, lane);
        mma_times_rows<D>(ctx, dk_acc, sa, qs, LD, kk, lane);
      }

      // dS to shared memory as [row][key] (mma_bwd_row_key), then dQ += dS·K for the warp's 16
      // rows: A read from dS's rows, B transposed from K's rows; added to dq with atomics.
      CPB_UNROLL
      for (int nt = 0; nt < BM / 8; ++nt)
        CPB_UNROLL
        for (int e = 0; e < 4; ++e) {
          const FragCoord c = mma_bwd_row_key(warp, lane, nt, e);
          dss[c.row * LDS + c.col] = bf16_bits(dpt[nt][e]);
        }
      ctx.sync();
      float dq_acc[D / 8][4] = {};
      CPB_UNROLL
      for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t a[4];
        load_a(a, dss + warp * 16 * LDS + kk * 16, LDS, lane);
        mma_times_rows<D>(ctx, dq_acc, a, ks, LD, kk, lane);
      }
      CPB_UNROLL
      for (int dt = 0; dt < D / 8; ++dt)
        CPB_UNROLL
        for (int e = 0; e < 4; ++e) {
          const FragCoord c = mma_c_coord(lane, e);
          const int64_t i = qb + warp * 16 + c.row;
          if (i < t.rows_q) ctx.atomic_add(dq + (i * t.heads_q + h) * D + dt * 8 + c.col, t.scale * dq_acc[dt][e]);
        }
    }

  // This block alone owns its keys' dK and dV (of KV head g): added without atomics.
  CPB_UNROLL
  for (int dt = 0; dt < D / 8; ++dt)
    CPB_UNROLL
    for (int e = 0; e < 4; ++e) {
      const FragCoord c = mma_c_coord(lane, e);
      const int64_t j = kb + warp * 16 + c.row;
      if (j >= t.rows_k) continue;
      const int64_t at = (j * t.heads_kv + g) * D + dt * 8 + c.col;
      dk[at] += t.scale * dk_acc[dt][e];
      dv[at] += dv_acc[dt][e];
    }
}

}  // namespace cpbench::kernels::mma_body
