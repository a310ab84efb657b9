// flash_attention.cpp — defines: flash_tile_forward, merge_partials, flash_tile_backward and the
// whole-batch wrappers. Letters: i = query row of the tile, j = key row of the tile, h = query head,
// g = KV head, D = head dim, Bq × Bk = block sizes; "cols" are key rows inside one key block.
// One variant: sgemm for every block product, AVX2 exp for the softmax. Measured with
// bench/attention_bench.cpp on a 2-core AMD EPYC (Zen 4) shared with other jobs (noisy, ±15%):
//   forward  d=128 full   L=8K: 71 GFLOP/s on 1 core (SGEMM 2048³: 68), 100 on 2 cores (SGEMM: 83)
//   forward  d=128 causal L=8K: 47 on 1 core, 73 on 2 cores (diagonal blocks do masked work)
//   backward d=128 causal L=8K: 62 on 1 core, 100 on 2 cores
#include "kernels/cpu/flash_attention.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/softmax_row.h"

namespace cpbench::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// OpenBLAS (pthread build) would start its own threads inside each of ours; one BLAS thread per
// OpenMP thread keeps both cores busy without oversubscription. Restored on exit.
class BlasSingleThread {
 public:
  BlasSingleThread() : saved_(openblas_get_num_threads()) { openblas_set_num_threads(1); }
  ~BlasSingleThread() { openblas_set_num_threads(saved_); }
  BlasSingleThread(const BlasSingleThread&) = delete;
  BlasSingleThread& operator=(const BlasSingleThread&) = delete;

 private:
  int saved_;
};

int team_size(const FlashConfig& config, int64_t work_items) {
  const int64_t wanted = config.threads > 0 ? config.threads : omp_get_max_threads();
  return static_cast<int>(std::max<int64_t>(1, std::min(wanted, work_items)));
}

// Allowed columns of each row of a (query block × key block), relative to the block's first key,
// and the union's column span [lo, hi) so the products skip fully masked columns at the edges.
struct BlockMask {
  std::vector<int64_t> c;  // 4 per row: [c0, c1) ∪ [c2, c3)
  int64_t lo = 0, hi = 0;
  bool any = false;

  void build(const KeyRanges* ranges, int64_t rows, int64_t key_pos0, int64_t cols) {
    c.resize(static_cast<size_t>(4 * rows));
    lo = cols;
    hi = 0;
    any = false;
    for (int64_t i = 0; i < rows; ++i) {
      int64_t b0, e0, b1, e1;
      const int64_t n = clip_ranges(ranges[i], key_pos0, key_pos0 + cols, b0, e0, b1, e1);
      int64_t* ci = c.data() + 4 * i;
      ci[0] = b0 - key_pos0;
      ci[1] = e0 - key_pos0;
      ci[2] = b1 - key_pos0;
      ci[3] = e1 - key_pos0;
      if (n == 0) continue;
      any = true;
      lo = std::min(lo, ci[0]);
      hi = std::max(hi, e1 > b1 ? ci[3] : ci[1]);
    }
  }
};

}  // namespace

void flash_tile_forward(const TileInput& t, float* out, float* lse, int64_t lse_stride, const FlashConfig& config) {
  const int64_t Hq = t.dims.heads_q, Hkv = t.dims.heads_kv, D = t.dims.head_dim, group = t.dims.group_size();
  const float scale = static_cast<float>(t.dims.softmax_scale());
  const int64_t Bq = config.block_q, Bk = config.block_k;
  const int64_t ldq = Hq * D, ldk = Hkv * D;
  const int64_t q_blocks = (t.rows_q + Bq - 1) / Bq, k_blocks = (t.rows_k + Bk - 1) / Bk;
  const int64_t items = Hq * q_blocks;
  if (items == 0) return;
  BlasSingleThread blas_guard;
#pragma omp parallel num_threads(team_size(config, items))
  {
    std::vector<float> s(static_cast<size_t>(Bq * Bk)), acc(static_cast<size_t>(Bq * D));  // (Bq, Bk), (Bq, D)
    std::vector<float> m(static_cast<size_t>(Bq)), l(static_cast<size_t>(Bq));
    BlockMask mask;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t h = item % Hq, i0 = (item / Hq) * Bq, g = h / group;
      const int64_t mq = std::min(Bq, t.rows_q - i0);
      const float* qb = t.q + i0 * ldq + h * D;  // (mq, D), ld ldq
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(l.begin(), l.end(), 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t kb = 0; kb < k_blocks; ++kb) {
        const int64_t j0 = kb * Bk, nk = std::min(Bk, t.rows_k - j0);
        mask.build(t.ranges + i0, mq, t.key_begin + j0, nk);
        if (!mask.any) continue;
        const int64_t w = mask.hi - mask.lo;
        const float* kb_ptr = t.k + (j0 + mask.lo) * ldk + g * D;  // (w, D), ld ldk
        const float* vb_ptr = t.v + (j0 + mask.lo) * ldk + g * D;
        float* sw = s.data() + mask.lo;                               // columns [lo, hi) of S
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mq, w, D, scale, qb, ldq, kb_ptr, ldk, 0.0f, sw, Bk);
        for (int64_t i = 0; i < mq; ++i) {
          const int64_t* c = mask.c.data() + 4 * i;
          float* row = s.data() + i * Bk;
          const float block_max = masked_row_max(row, c);
          if (block_max == kNegInf) {  // no allowed key in this block: P row = 0, state unchanged
            std::fill(row + mask.lo, row + mask.hi, 0.0f);
            continue;
          }
          const float m_new = std::max(m[i], block_max);
          const float correction = std::exp(m[i] - m_new);  // exp(−inf) = 0 on the first block
          l[i] = l[i] * correction + masked_exp_row(row, c, mask.lo, mask.hi, m_new);
          m[i] = m_new;
          if (correction != 1.0f) {
            float* a = acc.data() + i * D;
            for (int64_t x = 0; x < D; ++x) a[x] *= correction;
          }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mq, D, w, 1.0f, sw, Bk, vb_ptr, ldk, 1.0f,
                    acc.data(), D);
      }
      for (int64_t i = 0; i < mq; ++i) {
        float* o = out + (i0 + i) * ldq + h * D;
        const float* a = acc.data() + i * D;
        if (l[i] > 0.0f) {
          const float inv = 1.0f / l[i];
          for (int64_t x = 0; x < D; ++x) o[x] = a[x] * inv;
          lse[h * lse_stride + i0 + i] = m[i] + std::log(l[i]);
        } else {
          std::fill(o, o + D, 0.0f);
          lse[h * lse_stride + i0 + i] = kNegInf;
        }
      }
    }
  }
}

PartialOutput flash_tile_forward(const TileInput& tile, const FlashConfig& config) {
  PartialOutput part;
  part.out.assign(static_cast<size_t>(tile.rows_q * tile.dims.heads_q * tile.dims.head_dim), 0.0f);
  part.lse.assign(static_cast<size_t>(tile.dims.heads_q * tile.rows_q), kNegInf);
  flash_tile_forward(tile, part.out.data(), part.lse.data(), tile.rows_q, config);
  return part;
}

PartialOutput merge_partials(std::span<const PartialOutput> partials, const AttentionDims& dims) {
  PartialOutput merged;
  if (partials.empty()) return merged;
  const int64_t Hq = dims.heads_q, D = dims.head_dim;
  const int64_t rows = static_cast<int64_t>(partials.front().lse.size()) / Hq;
  merged.out.assign(partials.front().out.size(), 0.0f);
  merged.lse.assign(partials.front().lse.size(), kNegInf);
  for (int64_t h = 0; h < Hq; ++h) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t idx = h * rows + i;
      float m = kNegInf;
      for (const PartialOutput& p : partials) m = std::max(m, p.lse[idx]);
      if (m == kNegInf) continue;  // no partial saw an allowed key: stays O = 0, LSE = −inf
      double sum = 0.0;
      for (const PartialOutput& p : partials) sum += std::exp(static_cast<double>(p.lse[idx]) - m);
      const float lse = m + static_cast<float>(std::log(sum));
      merged.lse[idx] = lse;
      float* o = merged.out.data() + (i * Hq + h) * D;
      for (const PartialOutput& p : partials) {
        if (p.lse[idx] == kNegInf) continue;  // its O is 0 and weight exp(−inf) = 0
        const float weight = std::exp(p.lse[idx] - lse);
        const float* po = p.out.data() + (i * Hq + h) * D;
        for (int64_t x = 0; x < D; ++x) o[x] += weight * po[x];
      }
    }
  }
  return merged;
}

void flash_tile_backward(const TileInput& t, const float* out, const float* lse, int64_t lse_stride,
                         const float* dout, float* dq, float* dk, float* dv, const FlashConfig& config) {
  const int64_t Hq = t.dims.heads_q, Hkv = t.dims.heads_kv, D = t.dims.head_dim, group = t.dims.group_size();
  const float scale = static_cast<float>(t.dims.softmax_scale());
  const int64_t Bq = config.block_q, Bk = config.block_k;
  const int64_t ldq = Hq * D, ldk = Hkv * D;
  const int64_t q_blocks = (t.rows_q + Bq - 1) / Bq, k_blocks = (t.rows_k + Bk - 1) / Bk;
  const int64_t items = Hkv * k_blocks;  // each item owns its dK, dV rows exclusively
  if (items == 0 || t.rows_q == 0) return;
  BlasSingleThread blas_guard;
  // D_i = rowsum(dO∘O) per (h, i), from the final forward output (FlashAttention-2, Alg. 2 line 4).
  std::vector<float> row_d(static_cast<size_t>(Hq * t.rows_q));
  for (int64_t i = 0; i < t.rows_q; ++i) {
    for (int64_t h = 0; h < Hq; ++h) {
      const float* o = out + i * ldq + h * D;
      const float* go = dout + i * ldq + h * D;
      float acc = 0.0f;
      for (int64_t x = 0; x < D; ++x) acc += o[x] * go[x];
      row_d[h * t.rows_q + i] = acc;
    }
  }
  const int nt = team_size(config, items);
  // dQ gets contributions from every key block, so each thread but the first adds into a private
  // copy, reduced at the end; dK and dV need no copy.
  std::vector<std::vector<float>> dq_private(static_cast<size_t>(nt - 1));
#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num();
    float* dq_mine = dq;
    int64_t ldq_mine = ldq;
    if (tid > 0) {
      dq_private[tid - 1].assign(static_cast<size_t>(t.rows_q * ldq), 0.0f);
      dq_mine = dq_private[tid - 1].data();
    }
    std::vector<float> p(static_cast<size_t>(Bq * Bk)), dp(static_cast<size_t>(Bq * Bk));  // (Bq, Bk) each
    BlockMask mask;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t g = item % Hkv, j0 = (item / Hkv) * Bk, nk = std::min(Bk, t.rows_k - j0);
      for (int64_t qb = 0; qb < q_blocks; ++qb) {
        const int64_t i0 = qb * Bq, mq = std::min(Bq, t.rows_q - i0);
        mask.build(t.ranges + i0, mq, t.key_begin + j0, nk);
        if (!mask.any) continue;
        const int64_t lo = mask.lo, w = mask.hi - mask.lo;
        const float* kb_ptr = t.k + (j0 + lo) * ldk + g * D;  // (w, D), ld ldk
        const float* vb_ptr = t.v + (j0 + lo) * ldk + g * D;
        float* dkb = dk + (j0 + lo) * ldk + g * D;
        float* dvb = dv + (j0 + lo) * ldk + g * D;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const float* qb_ptr = t.q + i0 * ldq + h * D;  // (mq, D), ld ldq
          const float* dob = dout + i0 * ldq + h * D;
          float* dqb = dq_mine + i0 * ldq_mine + h * D;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mq, w, D, scale, qb_ptr, ldq, kb_ptr, ldk, 0.0f,
                      p.data() + lo, Bk);
          for (int64_t i = 0; i < mq; ++i) {
            const float row_lse = lse[h * lse_stride + i0 + i];
            float* row = p.data() + i * Bk;
            if (row_lse == kNegInf) {  // fully masked row: no probability mass, no gradient
              std::fill(row + lo, row + mask.hi, 0.0f);
              continue;
            }
            masked_exp_row(row, mask.c.data() + 4 * i, lo, mask.hi, row_lse);  // P = exp(S − LSE)
          }
          // dV += Pᵀ dO
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, w, D, mq, 1.0f, p.data() + lo, Bk, dob, ldq, 1.0f,
                      dvb, ldk);
          // dP = dO Vᵀ
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mq, w, D, 1.0f, dob, ldq, vb_ptr, ldk, 0.0f,
                      dp.data() + lo, Bk);
          for (int64_t i = 0; i < mq; ++i) {  // dS = P∘(dP − D), written over dP
            const float di = row_d[h * t.rows_q + i0 + i];
            const float* pr = p.data() + i * Bk;
            float* dsr = dp.data() + i * Bk;
            for (int64_t c = lo; c < mask.hi; ++c) dsr[c] = pr[c] * (dsr[c] - di);
          }
          // dQ += scale·dS K, dK += scale·dSᵀ Q
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mq, D, w, scale, dp.data() + lo, Bk, kb_ptr, ldk,
                      1.0f, dqb, ldq_mine);
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, w, D, mq, scale, dp.data() + lo, Bk, qb_ptr, ldq,
                      1.0f, dkb, ldk);
        }
      }
    }
  }
  const int64_t n = t.rows_q * ldq;
  for (const std::vector<float>& part : dq_private) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t x = 0; x < n; ++x) dq[x] += part[x];
  }
}

PartialOutput flash_attention_forward(const VarlenBatch& batch, std::span<const float> q, std::span<const float> k,
                                      std::span<const float> v, const FlashConfig& config) {
  const int64_t Hq = batch.dims.heads_q, Hkv = batch.dims.heads_kv, D = batch.dims.head_dim;
  const int64_t total_q = batch.total_q();
  PartialOutput result;
  result.out.assign(static_cast<size_t>(total_q * Hq * D), 0.0f);
  result.lse.assign(static_cast<size_t>(Hq * total_q), kNegInf);
  for (int64_t s = 0; s < batch.sequences(); ++s) {
    const int64_t r0 = batch.cu_seqlens_q[s], k0 = batch.cu_seqlens_k[s];
    TileInput tile{batch.dims,      q.data() + r0 * Hq * D, batch.cu_seqlens_q[s + 1] - r0,
                   batch.row_ranges.data() + r0, k.data() + k0 * Hkv * D, v.data() + k0 * Hkv * D,
                   batch.cu_seqlens_k[s + 1] - k0, 0};
    flash_tile_forward(tile, result.out.data() + r0 * Hq * D, result.lse.data() + r0, total_q, config);
  }
  return result;
}

FlashGrads flash_attention_backward(const VarlenBatch& batch, std::span<const float> q, std::span<const float> k,
                                    std::span<const float> v, std::span<const float> out,
                                    std::span<const float> lse, std::span<const float> dout,
                                    const FlashConfig& config) {
  const int64_t Hq = batch.dims.heads_q, Hkv = batch.dims.heads_kv, D = batch.dims.head_dim;
  const int64_t total_q = batch.total_q();
  FlashGrads grads;
  grads.dq.assign(q.size(), 0.0f);
  grads.dk.assign(k.size(), 0.0f);
  grads.dv.assign(v.size(), 0.0f);
  for (int64_t s = 0; s < batch.sequences(); ++s) {
    const int64_t r0 = batch.cu_seqlens_q[s], k0 = batch.cu_seqlens_k[s];
    TileInput tile{batch.dims,      q.data() + r0 * Hq * D, batch.cu_seqlens_q[s + 1] - r0,
                   batch.row_ranges.data() + r0, k.data() + k0 * Hkv * D, v.data() + k0 * Hkv * D,
                   batch.cu_seqlens_k[s + 1] - k0, 0};
    flash_tile_backward(tile, out.data() + r0 * Hq * D, lse.data() + r0, total_q, dout.data() + r0 * Hq * D,
                        grads.dq.data() + r0 * Hq * D, grads.dk.data() + k0 * Hkv * D,
                        grads.dv.data() + k0 * Hkv * D, config);
  }
  return grads;
}

}  // namespace cpbench::kernels
