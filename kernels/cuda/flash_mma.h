// flash_mma.h — our attention forward and backward on tensor cores (bf16 inputs, fp32
// accumulation): the fast kernels of our own, beside the SIMT correctness path (flash_simt.h) and
// cuDNN's fused attention (kernels/cudnn). FlashAttention-2's forward (Dao 2023, Algorithm 1): a
// block of 64 query rows of one head, four warps of 16 rows, walks the key blocks of 64 its rows
// may see; S = Q·Kᵀ and O += P·V run as mma.sync m16n8k16 (bf16 in, fp32 out), the online softmax
// in registers, P handed from the S accumulators to the P·V multiplication without leaving them.
// The backward is described below.
// Requires: sm_80 or newer (mma.sync with bf16); the tile's q, k, v and ranges in device memory.
// Note: any mask a tile can hold (per-row key ranges, two per row, rows without keys: O = 0,
// LSE = −inf, as the executor merges), GQA, head dims 64 and 128. A key block outside every row
// of a query block is skipped, so a causal tile costs half of a full one. The blocks' code is
// flash_mma_body.h's: CI runs it on the CPU (flash_mma_emulate.h) against the SIMT kernel, and
// checks the layout arithmetic below (which lane holds which element of a fragment, the query
// blocks' key spans); on a device it is checked against the SIMT kernel by flash_mma_gpu_test
// (scripts/device_check.sh).
#pragma once

#include <cstdint>

#include "kernels/cuda/flash_simt.h"

namespace cpbench::kernels {

inline constexpr int kMmaRowsPerBlock = 64;  // query rows per thread block: 4 warps × 16
inline constexpr int kMmaKeysPerBlock = 64;  // keys per step of the walk

// Where an element of an m16n8k16 fragment lives (PTX ISA, "Matrix fragments for mma.m16n8k16",
// .bf16 inputs, fp32 accumulators): lane = 4·group + quad.
struct FragCoord {
  int row = 0, col = 0;
};
// A, 16×16 row-major: 32-bit register r (0..3) of a lane holds (row, col) and (row, col + 1).
CPB_HD constexpr FragCoord mma_a_coord(int lane, int reg) {
  return {lane / 4 + 8 * (reg & 1), 2 * (lane % 4) + 8 * (reg >> 1)};
}
// B, 16×8 (k × n): register r (0..1) holds (row, col) and (row + 1, col).
CPB_HD constexpr FragCoord mma_b_coord(int lane, int reg) { return {2 * (lane % 4) + 8 * reg, lane / 4}; }
// C and D, 16×8 fp32: element e (0..3).
CPB_HD constexpr FragCoord mma_c_coord(int lane, int e) { return {lane / 4 + 8 * (e >> 1), 2 * (lane % 4) + (e & 1)}; }

// The tile keys [lo, hi) (tile-local) that query rows [row0, row0 + rows) may see, over all of them
// (lo = hi when none): the key blocks the walk visits for that block of query rows.
struct KeySpan {
  int64_t lo = 0, hi = 0;
};
CPB_HD inline KeySpan merge_key_span(KeySpan a, int64_t b, int64_t e) {
  if (e <= b) return a;
  if (a.hi <= a.lo) return {b, e};
  return {b < a.lo ? b : a.lo, e > a.hi ? e : a.hi};
}
CPB_HD inline KeySpan row_key_span(const KeyRanges& r, int64_t key_begin, int64_t rows_k) {
  const TileKeySpans s = tile_key_spans(r, key_begin, rows_k);
  return merge_key_span(merge_key_span({}, s.b0, s.e0), s.b1, s.e1);
}
inline KeySpan block_key_span(const KeyRanges* ranges, int64_t row0, int64_t rows, int64_t key_begin, int64_t rows_k) {
  KeySpan span;
  for (int64_t i = row0; i < row0 + rows; ++i) {
    const KeySpan r = row_key_span(ranges[i], key_begin, rows_k);
    span = merge_key_span(span, r.lo, r.hi);
  }
  return span;
}

// The backward (FlashAttention-2, Algorithm 2): a block of 64 keys of one KV head, four warps of
// 16 keys, holds its dK and dV in registers and walks the blocks of 64 query rows (of every query
// head of its group) that may see its keys. Per query block: Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ on tensor
// cores, Pᵀ = 2^(Sᵀ − LSE), dSᵀ = Pᵀ∘(dPᵀ − D) with D = rowsum(dO∘O) (a pass of its own before),
// dV += Pᵀ·dO and dK += dSᵀ·Q from the accumulators, and dQ += dS·K after dSᵀ is stored
// transposed to shared memory, added to global memory with atomics (key blocks run in parallel).
//
// Where warp w's Sᵀ accumulator (n-tile nt of 8 query rows, element e) lies in the 64-row × 64-key
// block: the dQ multiplication reads dS from shared memory at (row, key) as its A fragments.
CPB_HD constexpr FragCoord mma_bwd_row_key(int warp, int lane, int nt, int e) {
  return {nt * 8 + mma_c_coord(lane, e).col, warp * 16 + mma_c_coord(lane, e).row};
}
// Whether a query row's key span (row_key_span) meets the tile keys [k_lo, k_hi): the backward
// skips a query block none of whose rows does. Conservative: the span is the hull of a row's two
// ranges, so a block may be visited for keys in the gap between them (its P is 0 there).
CPB_HD inline bool span_meets(KeySpan s, int64_t k_lo, int64_t k_hi) { return s.lo < s.hi && s.lo < k_hi && s.hi > k_lo; }

// Whether the tensor-core forward takes the tile: head dim 64 or 128, whole GQA groups, q, k and v
// 16-byte aligned (rows are read 8 elements at a time), fewer than 2³¹ keys.
inline bool mma_aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
inline bool mma_forward_supports(const SimtTile<Bf16>& t) {
  return (t.head_dim == 64 || t.head_dim == 128) && t.heads_kv > 0 && t.heads_q % t.heads_kv == 0 &&
         mma_aligned16(t.q) && mma_aligned16(t.k) && mma_aligned16(t.v) && t.rows_k < INT32_MAX &&
         t.key_begin + t.rows_k < INT64_MAX / 2;
}

// The forward of the tile: out (rows_q, Hq, d) fp32, normalised over the tile's keys; LSE at
// lse[h·lse_stride + i]. Returns the CUDA error of the launch (0 = success; cudaErrorInvalidValue
// for a tile mma_forward_supports refuses); asynchronous on `stream` (a cudaStream_t).
int mma_forward_cuda(const SimtTile<Bf16>& t, float* out, float* lse, int64_t lse_stride, void* stream);

// Whether the tensor-core backward takes the tile: what the forward takes, and dO 16-byte aligned.
inline bool mma_backward_supports(const SimtTile<Bf16>& t, const Bf16* dout) {
  return mma_forward_supports(t) && mma_aligned16(dout);
}

// The backward of the tile, gradients ADDED as the SIMT backward adds them: dq (rows_q, Hq, d) by
// atomics, dk and dv (rows_k, Hkv, d). out (rows_q, Hq, d) fp32 and lse (natural log, at
// lse[h·lse_stride + i]) are the rows' final forward results; dout (rows_q, Hq, d) bf16. Returns
// the CUDA error (cudaErrorInvalidValue for a tile mma_backward_supports refuses); asynchronous
// on `stream`, with D in a stream-ordered allocation (cudaMallocAsync) freed after the kernel.
int mma_backward_cuda(const SimtTile<Bf16>& t, const float* out, const float* lse, int64_t lse_stride,
                      const Bf16* dout, float* dq, float* dk, float* dv, void* stream);

}  // namespace cpbench::kernels
