// attention_ref.h — naive attention forward and backward of a packed varlen batch, accumulated in
// double: the oracle every attention kernel (kernels/cpu, kernels/cuda, the runtime) is tested against.
// Requires: validate_batch(batch) is empty; spans hold (total_q, Hq, d) / (total_k, Hkv, d) values.
// Note: O(total pairs · d) time, no tiling; instantiated for float (normal use) and double (finite differences).
#pragma once

#include <span>
#include <vector>

#include "kernels/reference/attention_problem.h"

namespace cpbench::kernels {

template <typename Real>
struct AttentionOutput {
  std::vector<Real> out;  // (total_q, Hq, d); 0 on fully masked rows
  std::vector<Real> lse;  // (Hq, total_q), natural log of Σ exp(scale·q·k); −inf on fully masked rows
};

template <typename Real>
struct AttentionGrads {
  std::vector<Real> dq;  // (total_q, Hq, d)
  std::vector<Real> dk;  // (total_k, Hkv, d), summed over the Hq/Hkv query heads sharing a KV head
  std::vector<Real> dv;  // (total_k, Hkv, d), same
};

// O = softmax(scale·Q Kᵀ + mask) V per sequence and head, LSE = log Σ_allowed exp(scale·q·k).
template <typename Real>
AttentionOutput<Real> attention_forward_ref(const VarlenBatch& batch, std::span<const Real> q,
                                            std::span<const Real> k, std::span<const Real> v);

// Gradients of Σ dO∘O. Recomputes P from scratch in double; D = Σ_j P_j·dP_j (= rowsum(dO∘O)).
template <typename Real>
AttentionGrads<Real> attention_backward_ref(const VarlenBatch& batch, std::span<const Real> q,
                                            std::span<const Real> k, std::span<const Real> v,
                                            std::span<const Real> dout);

}  // namespace cpbench::kernels
