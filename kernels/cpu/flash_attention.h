// flash_attention.h — defines: flash_tile_forward, merge_partials, flash_tile_backward,
// flash_attention_forward, flash_attention_backward. Tiled (FlashAttention-2 style) attention on CPU, fp32.
// Requires: shapes as in kernels/reference/attention_problem.h; one tile call = a query range × key
// range of ONE sequence. Tile products go through OpenBLAS cblas_sgemm; OpenMP threads split
// (head, query block) in forward and (KV head, key block) in backward.
// Note: OpenBLAS's own threads are set to 1 for the duration of a call (restored after), because
// BLAS threads inside our OpenMP team oversubscribe the cores; calls are not re-entrant w.r.t. that.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/reference/attention_problem.h"

namespace cpbench::kernels {

// Block sizes of the inner loop. Forward, 1 core of an AMD EPYC (Zen 4, 1 MiB L2), L=4K, d=128,
// full mask (GFLOP/s): 64×128 42, 128×128 50, 128×256 51, 256×256 53, 256×512 54. 128×256 is
// kept: within noise of the best, and twice the query blocks (work items) of 256 for short sequences.
struct FlashConfig {
  int64_t block_q = 128;
  int64_t block_k = 256;
  int threads = 0;  // OpenMP threads; 0 = omp_get_max_threads()
};

// Forward of one tile into caller buffers: out (rows_q, Hq, d) with row stride Hq·d, lse at
// lse[h·lse_stride + row]. Rows with no allowed key get O = 0 and LSE = −inf.
void flash_tile_forward(const TileInput& tile, float* out, float* lse, int64_t lse_stride,
                        const FlashConfig& config = {});

// Same, returning owned buffers (lse_stride = rows_q): what a rank sends for an LSE merge.
PartialOutput flash_tile_forward(const TileInput& tile, const FlashConfig& config = {});

// LSE merge of partials over disjoint key sets of the same query rows (context_parallel.md):
//   lse = m + log Σ_k exp(lse_k − m), m = max_k lse_k;  O = Σ_k exp(lse_k − lse)·O_k.
// Partials with lse = −inf contribute nothing; if all are −inf the row stays O = 0, LSE = −inf.
// Requires: every partial has the same sizes (rows_q·Hq·d and Hq·rows_q).
PartialOutput merge_partials(std::span<const PartialOutput> partials, const AttentionDims& dims);

// Gradients of one tile, ADDED into dq (rows_q, Hq, d) and dk, dv (rows_k, Hkv, d) with the same
// strides as the inputs. out and lse are the FINAL (merged over all keys) forward results of these
// query rows, dout the incoming gradient; D = rowsum(dO∘O) is computed here from them
// (FlashAttention-2, Dao 2023, Algorithm 2): P = exp(scale·S − LSE), dV += Pᵀ dO, dP = dO Vᵀ,
// dS = P∘(dP − D), dQ += scale·dS K, dK += scale·dSᵀ Q.
void flash_tile_backward(const TileInput& tile, const float* out, const float* lse, int64_t lse_stride,
                         const float* dout, float* dq, float* dk, float* dv, const FlashConfig& config = {});

// Whole packed batch (each sequence one tile over all its keys). Requires validate_batch(batch) empty.
PartialOutput flash_attention_forward(const VarlenBatch& batch, std::span<const float> q,
                                      std::span<const float> k, std::span<const float> v,
                                      const FlashConfig& config = {});

struct FlashGrads {
  std::vector<float> dq, dk, dv;  // shapes of q, k, v
};

FlashGrads flash_attention_backward(const VarlenBatch& batch, std::span<const float> q, std::span<const float> k,
                                    std::span<const float> v, std::span<const float> out,
                                    std::span<const float> lse, std::span<const float> dout,
                                    const FlashConfig& config = {});

}  // namespace cpbench::kernels
