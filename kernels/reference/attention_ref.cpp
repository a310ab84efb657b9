// attention_ref.cpp — defines: attention_forward_ref, attention_backward_ref (naive, double accumulation).
// Dimension letters: r = query row in the pack, j = key row, h = query head, g = KV head, d = head dim.
#include "kernels/reference/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace cpbench::kernels {
namespace {

// The allowed keys of one query row as absolute key rows of the pack.
struct RowKeys {
  int64_t b0, e0, b1, e1;
  template <typename F>
  void for_each(F&& f) const {
    for (int64_t j = b0; j < e0; ++j) f(j);
    for (int64_t j = b1; j < e1; ++j) f(j);
  }
};

RowKeys row_keys(const VarlenBatch& batch, int64_t s, int64_t r) {
  const int64_t k0 = batch.cu_seqlens_k[s];
  const int64_t len_k = batch.cu_seqlens_k[s + 1] - k0;
  RowKeys keys{};
  clip_ranges(batch.row_ranges[r], 0, len_k, keys.b0, keys.e0, keys.b1, keys.e1);
  keys.b0 += k0;
  keys.e0 += k0;
  keys.b1 += k0;
  keys.e1 += k0;
  return keys;
}

template <typename Real>
double dot(const Real* a, const Real* b, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return acc;
}

}  // namespace

template <typename Real>
AttentionOutput<Real> attention_forward_ref(const VarlenBatch& batch, std::span<const Real> q,
                                            std::span<const Real> k, std::span<const Real> v) {
  const int64_t Hq = batch.dims.heads_q, Hkv = batch.dims.heads_kv, D = batch.dims.head_dim;
  const int64_t group = batch.dims.group_size();
  const double scale = batch.dims.softmax_scale();
  const int64_t total_q = batch.total_q();
  AttentionOutput<Real> result;
  result.out.assign(static_cast<size_t>(total_q * Hq * D), Real(0));
  result.lse.assign(static_cast<size_t>(Hq * total_q), -std::numeric_limits<Real>::infinity());
  std::vector<double> scores, acc(static_cast<size_t>(D));
  for (int64_t s = 0; s < batch.sequences(); ++s) {
    for (int64_t r = batch.cu_seqlens_q[s]; r < batch.cu_seqlens_q[s + 1]; ++r) {
      const RowKeys keys = row_keys(batch, s, r);
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t g = h / group;
        const Real* qr = q.data() + (r * Hq + h) * D;
        scores.clear();
        double m = -std::numeric_limits<double>::infinity();
        keys.for_each([&](int64_t j) {
          scores.push_back(scale * dot(qr, k.data() + (j * Hkv + g) * D, D));
          m = std::max(m, scores.back());
        });
        if (scores.empty()) continue;  // fully masked row: O = 0, LSE = −inf
        double l = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        size_t idx = 0;
        keys.for_each([&](int64_t j) {
          const double p = std::exp(scores[idx++] - m);
          l += p;
          const Real* vj = v.data() + (j * Hkv + g) * D;
          for (int64_t c = 0; c < D; ++c) acc[c] += p * static_cast<double>(vj[c]);
        });
        Real* o = result.out.data() + (r * Hq + h) * D;
        for (int64_t c = 0; c < D; ++c) o[c] = static_cast<Real>(acc[c] / l);
        result.lse[h * total_q + r] = static_cast<Real>(m + std::log(l));
      }
    }
  }
  return result;
}

template <typename Real>
AttentionGrads<Real> attention_backward_ref(const VarlenBatch& batch, std::span<const Real> q,
                                            std::span<const Real> k, std::span<const Real> v,
                                            std::span<const Real> dout) {
  const int64_t Hq = batch.dims.heads_q, Hkv = batch.dims.heads_kv, D = batch.dims.head_dim;
  const int64_t group = batch.dims.group_size();
  const double scale = batch.dims.softmax_scale();
  std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
  std::vector<double> scores, dp;
  for (int64_t s = 0; s < batch.sequences(); ++s) {
    for (int64_t r = batch.cu_seqlens_q[s]; r < batch.cu_seqlens_q[s + 1]; ++r) {
      const RowKeys keys = row_keys(batch, s, r);
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t g = h / group;
        const Real* qr = q.data() + (r * Hq + h) * D;
        const Real* dor = dout.data() + (r * Hq + h) * D;
        scores.clear();
        dp.clear();
        double m = -std::numeric_limits<double>::infinity();
        keys.for_each([&](int64_t j) {
          scores.push_back(scale * dot(qr, k.data() + (j * Hkv + g) * D, D));
          dp.push_back(dot(dor, v.data() + (j * Hkv + g) * D, D));  // dP_j = dO · v_j
          m = std::max(m, scores.back());
        });
        if (scores.empty()) continue;  // a fully masked row has no gradient
        double l = 0.0;
        for (double x : scores) l += std::exp(x - m);
        const double lse = m + std::log(l);
        double row_d = 0.0;  // D = Σ_j P_j dP_j
        for (size_t i = 0; i < scores.size(); ++i) {
          scores[i] = std::exp(scores[i] - lse);  // now P_j
          row_d += scores[i] * dp[i];
        }
        size_t idx = 0;
        keys.for_each([&](int64_t j) {
          const double p = scores[idx];
          const double ds = p * (dp[idx] - row_d);  // dS_j = P_j (dP_j − D)
          ++idx;
          const Real* kj = k.data() + (j * Hkv + g) * D;
          double* dqr = dq.data() + (r * Hq + h) * D;
          double* dkj = dk.data() + (j * Hkv + g) * D;
          double* dvj = dv.data() + (j * Hkv + g) * D;
          for (int64_t c = 0; c < D; ++c) {
            dqr[c] += scale * ds * static_cast<double>(kj[c]);
            dkj[c] += scale * ds * static_cast<double>(qr[c]);
            dvj[c] += p * static_cast<double>(dor[c]);
          }
        });
      }
    }
  }
  AttentionGrads<Real> grads;
  grads.dq.assign(dq.begin(), dq.end());
  grads.dk.assign(dk.begin(), dk.end());
  grads.dv.assign(dv.begin(), dv.end());
  return grads;
}

template AttentionOutput<float> attention_forward_ref<float>(const VarlenBatch&, std::span<const float>,
                                                             std::span<const float>, std::span<const float>);
template AttentionOutput<double> attention_forward_ref<double>(const VarlenBatch&, std::span<const double>,
                                                               std::span<const double>, std::span<const double>);
template AttentionGrads<float> attention_backward_ref<float>(const VarlenBatch&, std::span<const float>,
                                                             std::span<const float>, std::span<const float>,
                                                             std::span<const float>);
template AttentionGrads<double> attention_backward_ref<double>(const VarlenBatch&, std::span<const double>,
                                                               std::span<const double>, std::span<const double>,
                                                               std::span<const double>);

}  // namespace cpbench::kernels
