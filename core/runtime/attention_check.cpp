#include "core/runtime/attention_check.h"

#include <cmath>
#include <limits>

#include "core/workload/rng.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/reference/attention_ref.h"

namespace cpbench {
namespace {

// The plan's batch; a sequence not in `sequences` (when given) has every row masked out.
kernels::VarlenBatch varlen_batch(const AttentionPlan& p, const std::vector<char>* sequences) {
  kernels::VarlenBatch b;
  b.dims = {p.heads_q, p.heads_kv, p.head_dim, 0.0};
  for (size_t s = 0; s < p.seq_lengths.size(); ++s) {
    const int64_t L = p.seq_lengths[s];
    const bool computed = !sequences || (*sequences)[s];
    b.cu_seqlens_q.push_back(b.cu_seqlens_q.back() + L);
    b.cu_seqlens_k.push_back(b.cu_seqlens_k.back() + L);
    for (int64_t q = 0; q < L; ++q) {
      KeyRanges r = mask_row(p.mask, L, q);
      b.row_ranges.push_back(computed ? kernels::KeyRanges{r.begin0, r.end0, r.begin1, r.end1} : kernels::KeyRanges{});
    }
  }
  return b;
}

void fill_normal(std::vector<float>& x, size_t n, SplitMix64& rng) {
  x.resize(n);
  for (auto& v : x) v = static_cast<float>(rng.normal());
}

}  // namespace

OwnedInputs make_attention_inputs(const AttentionPlan& p, uint64_t seed) {
  int64_t T = 0;
  for (int64_t L : p.seq_lengths) T += L;
  SplitMix64 rng(seed);
  OwnedInputs in;
  fill_normal(in.q, static_cast<size_t>(T * p.heads_q * p.head_dim), rng);
  fill_normal(in.k, static_cast<size_t>(T * p.heads_kv * p.head_dim), rng);
  fill_normal(in.v, static_cast<size_t>(T * p.heads_kv * p.head_dim), rng);
  fill_normal(in.dout, static_cast<size_t>(T * p.heads_q * p.head_dim), rng);
  return in;
}

std::vector<char> home_sequences(const AttentionPlan& p, int rank) {
  std::vector<char> held(p.seq_lengths.size(), 0);
  for (const AttnSlice& s : p.home[static_cast<size_t>(rank)]) held[static_cast<size_t>(s.seq)] = 1;
  return held;
}

ReferenceAttention reference_attention(const AttentionPlan& p, const OwnedInputs& in, bool backward,
                                       const std::vector<char>* sequences) {
  if (sequences && sequences->size() != p.seq_lengths.size()) sequences = nullptr;  // not this plan's: all
  kernels::VarlenBatch b = varlen_batch(p, sequences);
  double pairs = 0;
  for (const auto& r : b.row_ranges) pairs += static_cast<double>((r.e0 - r.b0) + (r.e1 - r.b1));
  ReferenceAttention ref;
  if (pairs * p.heads_q <= kNaiveLimitPairs) {
    auto o = kernels::attention_forward_ref<float>(b, in.q, in.k, in.v);
    ref.out = o.out;
    ref.lse = o.lse;
    if (backward) {
      auto g = kernels::attention_backward_ref<float>(b, in.q, in.k, in.v, in.dout);
      ref.dq = g.dq;
      ref.dk = g.dk;
      ref.dv = g.dv;
    }
    ref.kind = "naive (double accumulation)";
    return ref;
  }
  auto o = kernels::flash_attention_forward(b, in.q, in.k, in.v);
  ref.out = o.out;
  ref.lse = o.lse;
  if (backward) {
    auto g = kernels::flash_attention_backward(b, in.q, in.k, in.v, o.out, o.lse, in.dout);
    ref.dq = g.dq;
    ref.dk = g.dk;
    ref.dv = g.dv;
  }
  ref.kind = "cpu kernel, one rank";
  return ref;
}

CheckResult check_home(const AttentionPlan& p, const HomeResult& h, const ReferenceAttention& ref, bool backward) {
  CheckResult r;
  const auto off = packed_offsets(p);
  int64_t T = off.back();
  const int64_t row0 = off[h.slice.seq] + h.slice.tok_begin, n = h.slice.tokens(), d = p.head_dim;
  // The home slice holds query heads [head_begin, head_end) (K/V heads of those / g) of the
  // reference's `heads`-head rows.
  const int64_t g = p.heads_q / p.heads_kv;
  // A missing value or a NaN is a failure, not a ratio that no comparison can exceed.
  auto fail = [&](const std::string& where) {
    r.worst = std::numeric_limits<double>::infinity();
    r.max_abs_error = std::numeric_limits<double>::infinity();
    r.where = where;
  };
  auto cmp = [&](const char* what, const std::vector<float>& got, const std::vector<float>& want, int64_t heads,
                 Tolerance tol) {
    const int64_t div = heads == p.heads_q ? 1 : g;
    const int64_t sh = h.slice.heads() / div, h0 = h.slice.head_begin / div;
    r.checked += n * sh * d;
    if (static_cast<int64_t>(got.size()) != n * sh * d) {
      fail(std::string(what) + ": " + std::to_string(got.size()) + " values, expected " + std::to_string(n * sh * d));
      r.wrong += n * sh * d;
      return;
    }
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < sh * d; ++i) {
        double x = got[t * sh * d + i], y = want[((row0 + t) * heads + h0) * d + i];
        double err = std::fabs(x - y), ratio = err / (tol.atol + tol.rtol * std::fabs(y));
        if (!std::isfinite(x)) {
          if (std::isfinite(r.worst))
            fail(std::string(what) + " token " + std::to_string(h.slice.tok_begin + t) + " of sequence " +
                 std::to_string(h.slice.seq) + " is " + std::to_string(x));
          ++r.wrong;
          continue;
        }
        r.wrong += ratio > 1;
        r.max_abs_error = std::max(r.max_abs_error, err);
        if (ratio > r.worst) {
          r.worst = ratio;
          r.where = std::string(what) + " token " + std::to_string(h.slice.tok_begin + t) + " of sequence " +
                    std::to_string(h.slice.seq);
        }
      }
  };
  const bool bf16 = p.value_bytes == 2;
  const Tolerance out_tol = bf16 ? kBf16OutTolerance : kOutTolerance;
  const Tolerance grad_tol = bf16 ? kBf16GradTolerance : kGradTolerance;
  cmp("O", h.out, ref.out, p.heads_q, out_tol);
  r.checked += h.slice.heads() * n;
  if (static_cast<int64_t>(h.lse.size()) != h.slice.heads() * n) {
    fail("LSE: " + std::to_string(h.lse.size()) + " values, expected " + std::to_string(h.slice.heads() * n));
    r.wrong += h.slice.heads() * n;
  }
  for (int64_t hd = 0; hd < h.slice.heads() && static_cast<int64_t>(h.lse.size()) == h.slice.heads() * n; ++hd)
    for (int64_t t = 0; t < n; ++t) {
      double x = h.lse[hd * n + t], y = ref.lse[(h.slice.head_begin + hd) * T + row0 + t];
      const std::string at = "LSE token " + std::to_string(h.slice.tok_begin + t) + " of sequence " + std::to_string(h.slice.seq);
      if (std::isnan(x) || ((std::isinf(x) || std::isinf(y)) && x != y)) {
        if (std::isfinite(r.worst)) fail(at + (std::isnan(x) ? " is NaN" : " (a fully masked row disagrees)"));
        ++r.wrong;
        continue;
      }
      if (std::isinf(x)) continue;  // a fully masked row, as in the reference
      double ratio = std::fabs(x - y) / (out_tol.atol + out_tol.rtol * std::fabs(y));
      r.wrong += ratio > 1;
      if (ratio > r.worst) {
        r.worst = ratio;
        r.where = at;
      }
    }
  if (backward) {
    cmp("dQ", h.dq, ref.dq, p.heads_q, grad_tol);
    cmp("dK", h.dk, ref.dk, p.heads_kv, grad_tol);
    cmp("dV", h.dv, ref.dv, p.heads_kv, grad_tol);
  }
  return r;
}

}  // namespace cpbench
