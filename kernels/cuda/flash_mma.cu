// flash_mma.cu — the tensor-core attention forward (flash_mma.h). Each thread keeps two query rows
// of its warp's 16 (mma_c_coord: rows group and group + 8) with their running max and partial sum;
// the four lanes of a quad share a row and combine their partial maxima with shuffles. Scores are
// kept in the log2 domain (scale·log2 e folded in, exp2 on the SFU), as FlashAttention-2 does.
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
    uint32_t pf[BN / 16][4];
    #pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - base[e >> 1]);
        l[e >> 1] += s[nt][e];
      }
    #pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      pf[kk][0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
      pf[kk][1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
      pf[kk][2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pf[kk][3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }

    // O += P·V: B (k = key, n = head dim) read transposed from V's rows, two n-tiles per ldmatrix.
    #pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
      #pragma unroll
      for (int dt = 0; dt < D / 8; dt += 2) {
        uint32_t b[4];
        const int matrix = lane / 8;
        ldmatrix_x4_trans(b, vs + (kk * 16 + (matrix & 1) * 8 + lane % 8) * LD + (dt + (matrix >> 1)) * 8);
        mma_bf16(acc[dt], pf[kk], b[0], b[1]);
        mma_bf16(acc[dt + 1], pf[kk], b[2], b[3]);
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

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

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

}  // namespace cpbench::kernels
