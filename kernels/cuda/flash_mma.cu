// flash_mma.cu — the tensor-core attention forward and backward (flash_mma.h). In the forward each
// thread keeps two query rows of its warp's 16 (mma_c_coord: rows group and group + 8) with their
// running max and partial sum; the four lanes of a quad share a row and combine their partial
// maxima with shuffles. In the backward each thread keeps two keys of its warp's 16 the same way.
// Scores are kept in the log2 domain (scale·log2 e folded in, exp2 on the SFU), as
// FlashAttention-2 does.
#include "kernels/cuda/flash_mma.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

namespace cpbench::kernels {

namespace {

constexpr int kWarps = kMmaRowsPerBlock / 16;
constexpr int kThreads = 32 * kWarps;

// D += A·B, m16n8k16, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8×8 bf16 matrices from shared memory, transposed: lane l gives the address of row l % 8 of
// matrix l / 8; register m then holds, for lane (group, quad), rows 2·quad and 2·quad + 1 of column
// `group` of matrix m — the B fragment (mma_b_coord) of a row-major [key][d] tile.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* row) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low half
  return *reinterpret_cast<const uint32_t*>(&v);
}

// A fragment (mma_a_coord) of the 16 × 16 block at `block` of a row-major bf16 matrix in shared
// memory with row stride ld: two adjacent elements per register.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* block, int ld, int lane) {
  #pragma unroll
  for (int r = 0; r < 4; ++r) {
    const FragCoord c = mma_a_coord(lane, r);
    a[r] = *reinterpret_cast<const uint32_t*>(block + c.row * ld + c.col);
  }
}

// The A fragment of k-step kk taken from accumulators s (16 × 8·N, n-tiles of 8): n-tiles 2·kk and
// 2·kk + 1 are its 16 columns, rounded to bf16 (flash_mma_test: an accumulator pair is the A pair).
template <int N>
__device__ __forceinline__ void a_from_accumulators(uint32_t (&a)[4], const float (&s)[N][4], int kk) {
  a[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
  a[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
  a[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  a[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// acc (16 × D) += A (k-step kk) · B, B the rows kk·16 … kk·16 + 15 of a row-major [k][D] bf16 block
// in shared memory with row stride ld, read transposed by ldmatrix two n-tiles at a time.
template <int D>
__device__ __forceinline__ void mma_times_rows(float (&acc)[D / 8][4], const uint32_t (&a)[4], const uint16_t* rows,
                                               int ld, int kk, int lane) {
  const int matrix = lane / 8;
  #pragma unroll
  for (int dt = 0; dt < D / 8; dt += 2) {
    uint32_t b[4];
    ldmatrix_x4_trans(b, rows + (kk * 16 + (matrix & 1) * 8 + lane % 8) * ld + (dt + (matrix >> 1)) * 8);
    mma_bf16(acc[dt], a, b[0], b[1]);
    mma_bf16(acc[dt + 1], a, b[2], b[3]);
  }
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int D>
__global__ void __launch_bounds__(kThreads) mma_forward_kernel(SimtTile<Bf16> t, float* out, float* lse,
                                                               int64_t lse_stride) {
  constexpr int BN = kMmaKeysPerBlock;
  constexpr int LD = D + 8;  // shared row stride in elements: 16 bytes of padding, conflict-free reads
  __shared__ __align__(16) uint16_t ks[BN * LD];
  __shared__ __align__(16) uint16_t vs[BN * LD];
  __shared__ int span_lo, span_hi;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, quad = lane % 4;
  // The last query blocks first: under a causal mask they are the longest.
  const int64_t row0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kMmaRowsPerBlock;
  const int64_t h = blockIdx.y, g = h / (t.heads_q / t.heads_kv);
  const auto* q = reinterpret_cast<const uint16_t*>(t.q);
  const auto* k = reinterpret_cast<const uint16_t*>(t.k);
  const auto* v = reinterpret_cast<const uint16_t*>(t.v);

  // The key blocks this block of rows may see.
  if (threadIdx.x == 0) span_lo = INT_MAX, span_hi = 0;
  __syncthreads();
  if (threadIdx.x < kMmaRowsPerBlock && row0 + threadIdx.x < t.rows_q) {
    const KeySpan s = row_key_span(t.ranges[row0 + threadIdx.x], t.key_begin, t.rows_k);
    if (s.hi > s.lo) {
      atomicMin(&span_lo, static_cast<int>(s.lo));
      atomicMax(&span_hi, static_cast<int>(s.hi));
    }
  }
  __syncthreads();
  const int first_key = (span_lo / BN) * BN, end_key = span_hi;

  // This thread's two rows (mma_c_coord's group and group + 8) and their key ranges.
  int64_t row[2];
  KeyRanges range[2];
  #pragma unroll
  for (int i = 0; i < 2; ++i) {
    row[i] = row0 + warp * 16 + group + 8 * i;
    range[i] = row[i] < t.rows_q ? t.ranges[row[i]] : KeyRanges{};
  }
  // The warp's 16 query rows as A fragments, D/16 of them along the head dim.
  uint32_t qf[D / 16][4];
  #pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    #pragma unroll
    for (int r = 0; r < 4; ++r) {
      const FragCoord c = mma_a_coord(lane, r);
      const int64_t i = row0 + warp * 16 + c.row;
      qf[kk][r] = i < t.rows_q ? *reinterpret_cast<const uint32_t*>(q + (i * t.heads_q + h) * D + kk * 16 + c.col) : 0u;
    }

  const float scale_log2 = t.scale * 1.4426950408889634f;
  float acc[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int kb = first_key; kb < end_key; kb += BN) {
    __syncthreads();  // every warp is done with the previous block's K and V
    #pragma unroll
    for (int c = threadIdx.x; c < BN * D / 8; c += kThreads) {
      const int r = c / (D / 8), x = (c % (D / 8)) * 8;
      const int64_t j = kb + r;
      uint4 kv = {0, 0, 0, 0}, vv = {0, 0, 0, 0};
      if (j < t.rows_k) {
        kv = *reinterpret_cast<const uint4*>(k + (j * t.heads_kv + g) * D + x);
        vv = *reinterpret_cast<const uint4*>(v + (j * t.heads_kv + g) * D + x);
      }
      *reinterpret_cast<uint4*>(ks + r * LD + x) = kv;
      *reinterpret_cast<uint4*>(vs + r * LD + x) = vv;
    }
    __syncthreads();

    // S = Q·Kᵀ: 16 rows × 64 keys, eight n-tiles of 8 keys. B (k = head dim, n = key) is K's row,
    // two adjacent elements per register.
    float s[BN / 8][4] = {};
    #pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      #pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
        const uint16_t* key_row = ks + (nt * 8 + group) * LD + kk * 16 + 2 * quad;
        mma_bf16(s[nt], qf[kk], *reinterpret_cast<const uint32_t*>(key_row),
                 *reinterpret_cast<const uint32_t*>(key_row + 8));
      }

    // Mask, scale, and the running max of each row.
    float block_max[2] = {m[0], m[1]};
    #pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t j = kb + nt * 8 + mma_c_coord(lane, e).col;
        const bool allowed = j < t.rows_k && key_allowed(range[e >> 1], t.key_begin + j);
        s[nt][e] = allowed ? s[nt][e] * scale_log2 : -INFINITY;
        block_max[e >> 1] = fmaxf(block_max[e >> 1], s[nt][e]);
      }
    float base[2];
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float new_max = quad_max(block_max[i]);
      base[i] = new_max == -INFINITY ? 0.0f : new_max;  // a row without a key yet: every p is 0
      const float correction = exp2f(m[i] - base[i]);  // 0 while m = −inf
      m[i] = new_max;
      l[i] *= correction;
      #pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        acc[dt][2 * i] *= correction;
        acc[dt][2 * i + 1] *= correction;
      }
    }

    // P = 2^(s − max), summed per thread (the quad's sum is taken once, at the end), and packed as
    // the A fragments of P·V: n-tiles 2·kk and 2·kk + 1 of S are the 16 keys of k-step kk.
    #pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - base[e >> 1]);
        l[e >> 1] += s[nt][e];
      }

    // O += P·V: B (k = key, n = head dim) read transposed from V's rows.
    #pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t pf[4];
      a_from_accumulators(pf, s, kk);
      mma_times_rows<D>(acc, pf, vs, LD, kk, lane);
    }
  }

  #pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float sum = quad_sum(l[i]);
    if (row[i] >= t.rows_q) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    float* o = out + (row[i] * t.heads_q + h) * D + 2 * quad;
    #pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<float2*>(o + dt * 8) = make_float2(acc[dt][2 * i] * inv, acc[dt][2 * i + 1] * inv);
    if (quad == 0)
      lse[h * lse_stride + row[i]] = sum > 0.0f ? (m[i] + log2f(sum)) * 0.6931471805599453f : -INFINITY;
  }
}

// D = Σ_d dO·O of every (row, head), at dvec[h·rows_q + i]: the backward's row term, computed once
// rather than once per key block.
__global__ void row_dot_kernel(SimtTile<Bf16> t, const Bf16* dout, const float* out, float* dvec) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // i·Hq + h
  if (item >= t.rows_q * t.heads_q) return;
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

template <int D>
__global__ void __launch_bounds__(kThreads) mma_backward_kernel(SimtTile<Bf16> t, const float* lse, int64_t lse_stride,
                                                                const float* dvec, const Bf16* dout_bf16, float* dq,
                                                                float* dk, float* dv) {
  constexpr int BM = kMmaRowsPerBlock, BN = kMmaKeysPerBlock;
  constexpr int LD = D + 8, LDS = BN + 8;
  extern __shared__ __align__(16) unsigned char smem[];
  auto* ks = reinterpret_cast<uint16_t*>(smem);
  uint16_t* vs = ks + BN * LD;
  uint16_t* qs = vs + BN * LD;
  uint16_t* dos = qs + BM * LD;
  uint16_t* dss = dos + BM * LD;
  auto* rs = reinterpret_cast<KeyRanges*>(dss + BM * LDS);  // every part above is a multiple of 16 bytes
  auto* lse2s = reinterpret_cast<float*>(rs + BM);
  float* drow = lse2s + BM;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, quad = lane % 4;
  const int64_t kb = static_cast<int64_t>(blockIdx.x) * BN, g = blockIdx.y, per_group = t.heads_q / t.heads_kv;
  const auto* q = reinterpret_cast<const uint16_t*>(t.q);
  const auto* k = reinterpret_cast<const uint16_t*>(t.k);
  const auto* v = reinterpret_cast<const uint16_t*>(t.v);
  const auto* dout = reinterpret_cast<const uint16_t*>(dout_bf16);
  constexpr float kLog2e = 1.4426950408889634f;
  const float scale_log2 = t.scale * kLog2e;

  // Rows r of a [rows][D] bf16 block from global rows first + r (zeros past `rows`), 8 at a time.
  auto load_rows = [&](uint16_t* dst, const uint16_t* src, int64_t first, int64_t rows, int64_t heads, int64_t head) {
    for (int c = threadIdx.x; c < 64 * D / 8; c += kThreads) {
      const int r = c / (D / 8), x = (c % (D / 8)) * 8;
      const int64_t i = first + r;
      uint4 val = {0, 0, 0, 0};
      if (i < rows) val = *reinterpret_cast<const uint4*>(src + (i * heads + head) * D + x);
      *reinterpret_cast<uint4*>(dst + r * LD + x) = val;
    }
  };
  load_rows(ks, k, kb, t.rows_k, t.heads_kv, g);
  load_rows(vs, v, kb, t.rows_k, t.heads_kv, g);

  // This thread's two keys: rows group and group + 8 of its warp's 16 in the accumulators.
  int64_t key[2];
  #pragma unroll
  for (int i = 0; i < 2; ++i) key[i] = kb + warp * 16 + group + 8 * i;
  float dk_acc[D / 8][4] = {}, dv_acc[D / 8][4] = {};

  for (int64_t h = g * per_group; h < (g + 1) * per_group; ++h)
    for (int64_t qb = 0; qb < t.rows_q; qb += BM) {
      __syncthreads();  // every warp is done with the previous query block
      bool meets = false;
      if (threadIdx.x < BM) {
        const int64_t i = qb + threadIdx.x;
        KeyRanges r{};
        float l2 = -INFINITY, d_i = 0.0f;
        if (i < t.rows_q) {
          r = t.ranges[i];
          l2 = lse[h * lse_stride + i] * kLog2e;
          d_i = dvec[h * t.rows_q + i];
          meets = span_meets(row_key_span(r, t.key_begin, t.rows_k), kb, kb + BN);
        }
        rs[threadIdx.x] = r;
        lse2s[threadIdx.x] = l2;
        drow[threadIdx.x] = d_i;
      }
      if (!__syncthreads_or(meets)) continue;  // no row of this block sees a key of ours
      load_rows(qs, q, qb, t.rows_q, t.heads_q, h);
      load_rows(dos, dout, qb, t.rows_q, t.heads_q, h);
      __syncthreads();

      // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: the warp's 16 keys × 64 rows. A: K's and V's rows; B (k = head
      // dim, n = query row): Q's and dO's rows, two adjacent elements per register.
      float st[BM / 8][4] = {}, dpt[BM / 8][4] = {};
      #pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t ka[4], va[4];
        load_a(ka, ks + warp * 16 * LD + kk * 16, LD, lane);
        load_a(va, vs + warp * 16 * LD + kk * 16, LD, lane);
        #pragma unroll
        for (int nt = 0; nt < BM / 8; ++nt) {
          const int at = (nt * 8 + group) * LD + kk * 16 + 2 * quad;
          mma_bf16(st[nt], ka, *reinterpret_cast<const uint32_t*>(qs + at), *reinterpret_cast<const uint32_t*>(qs + at + 8));
          mma_bf16(dpt[nt], va, *reinterpret_cast<const uint32_t*>(dos + at),
                   *reinterpret_cast<const uint32_t*>(dos + at + 8));
        }
      }

      // Pᵀ = 2^(Sᵀ·scale·log2 e − LSE₂) where the row may see the key, dSᵀ = Pᵀ∘(dPᵀ − D).
      #pragma unroll
      for (int nt = 0; nt < BM / 8; ++nt)
        #pragma unroll
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
      #pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
        uint32_t pa[4], sa[4];
        a_from_accumulators(pa, st, kk);
        a_from_accumulators(sa, dpt, kk);
        mma_times_rows<D>(dv_acc, pa, dos, LD, kk, lane);
        mma_times_rows<D>(dk_acc, sa, qs, LD, kk, lane);
      }

      // dS to shared memory as [row][key] (mma_bwd_row_key), then dQ += dS·K for the warp's 16
      // rows: A read from dS's rows, B transposed from K's rows; added to dq with atomics.
      #pragma unroll
      for (int nt = 0; nt < BM / 8; ++nt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
          const FragCoord c = mma_bwd_row_key(warp, lane, nt, e);
          const __nv_bfloat16 x = __float2bfloat16_rn(dpt[nt][e]);
          dss[c.row * LDS + c.col] = *reinterpret_cast<const uint16_t*>(&x);
        }
      __syncthreads();
      float dq_acc[D / 8][4] = {};
      #pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t a[4];
        load_a(a, dss + warp * 16 * LDS + kk * 16, LDS, lane);
        mma_times_rows<D>(dq_acc, a, ks, LD, kk, lane);
      }
      #pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
          const FragCoord c = mma_c_coord(lane, e);
          const int64_t i = qb + warp * 16 + c.row;
          if (i < t.rows_q) atomicAdd(dq + (i * t.heads_q + h) * D + dt * 8 + c.col, t.scale * dq_acc[dt][e]);
        }
    }

  // This block alone owns its keys' dK and dV (of KV head g): added without atomics.
  #pragma unroll
  for (int dt = 0; dt < D / 8; ++dt)
    #pragma unroll
    for (int e = 0; e < 4; ++e) {
      const FragCoord c = mma_c_coord(lane, e);
      const int64_t j = kb + warp * 16 + c.row;
      if (j >= t.rows_k) continue;
      const int64_t at = (j * t.heads_kv + g) * D + dt * 8 + c.col;
      dk[at] += t.scale * dk_acc[dt][e];
      dv[at] += dv_acc[dt][e];
    }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <int D>
int launch_backward(const SimtTile<Bf16>& t, const float* lse, int64_t lse_stride, const float* dvec, const Bf16* dout,
                    float* dq, float* dk, float* dv, cudaStream_t s) {
  constexpr size_t bytes = backward_smem_bytes<D>();
  // More than 48 KB of dynamic shared memory needs the function's opt-in, set once.
  static const cudaError_t opted_in = cudaFuncSetAttribute(
      mma_backward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (opted_in != cudaSuccess) return static_cast<int>(opted_in);
  const dim3 grid(static_cast<unsigned>((t.rows_k + kMmaKeysPerBlock - 1) / kMmaKeysPerBlock),
                  static_cast<unsigned>(t.heads_kv));
  mma_backward_kernel<D><<<grid, kThreads, bytes, s>>>(t, lse, lse_stride, dvec, dout, dq, dk, dv);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

bool mma_forward_supports(const SimtTile<Bf16>& t) {
  return (t.head_dim == 64 || t.head_dim == 128) && t.heads_kv > 0 && t.heads_q % t.heads_kv == 0 && aligned16(t.q) &&
         aligned16(t.k) && aligned16(t.v) && t.rows_k < INT_MAX && t.key_begin + t.rows_k < INT64_MAX / 2;
}

int mma_forward_cuda(const SimtTile<Bf16>& t, float* out, float* lse, int64_t lse_stride, void* stream) {
  if (!mma_forward_supports(t)) return static_cast<int>(cudaErrorInvalidValue);
  if (t.rows_q == 0) return 0;
  const dim3 grid(static_cast<unsigned>((t.rows_q + kMmaRowsPerBlock - 1) / kMmaRowsPerBlock),
                  static_cast<unsigned>(t.heads_q));
  auto s = static_cast<cudaStream_t>(stream);
  if (t.head_dim == 64)
    mma_forward_kernel<64><<<grid, kThreads, 0, s>>>(t, out, lse, lse_stride);
  else
    mma_forward_kernel<128><<<grid, kThreads, 0, s>>>(t, out, lse, lse_stride);
  return static_cast<int>(cudaGetLastError());
}

bool mma_backward_supports(const SimtTile<Bf16>& t, const Bf16* dout) { return mma_forward_supports(t) && aligned16(dout); }

int mma_backward_cuda(const SimtTile<Bf16>& t, const float* out, const float* lse, int64_t lse_stride,
                      const Bf16* dout, float* dq, float* dk, float* dv, void* stream) {
  if (!mma_backward_supports(t, dout)) return static_cast<int>(cudaErrorInvalidValue);
  if (t.rows_q == 0 || t.rows_k == 0) return 0;  // no pair: every gradient term is zero
  auto s = static_cast<cudaStream_t>(stream);
  const int64_t items = t.rows_q * t.heads_q;
  float* dvec = nullptr;
  if (const cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&dvec), items * sizeof(float), s); e != cudaSuccess)
    return static_cast<int>(e);
  row_dot_kernel<<<static_cast<unsigned>((items + kThreads - 1) / kThreads), kThreads, 0, s>>>(t, dout, out, dvec);
  int rc = static_cast<int>(cudaGetLastError());
  if (rc == 0)
    rc = t.head_dim == 64 ? launch_backward<64>(t, lse, lse_stride, dvec, dout, dq, dk, dv, s)
                          : launch_backward<128>(t, lse, lse_stride, dvec, dout, dq, dk, dv, s);
  const cudaError_t freed = cudaFreeAsync(dvec, s);
  return rc != 0 ? rc : static_cast<int>(freed);
}

}  // namespace cpbench::kernels
