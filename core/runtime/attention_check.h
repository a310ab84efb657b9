// attention_check.h — inputs, the single-device reference, and the comparison that proves a
// distributed attention plan computed exactly the attention (O, LSE, dQ, dK, dV).
// Requires: kernels/reference (naive, double accumulation) and kernels/cpu. Inputs are drawn from
// a seed, identically on every rank. Tolerances are |x − ref| ≤ atol + rtol·|ref|, stated below.
// Note: the naive reference is O(T²·H·d); above kNaiveLimitPairs the single-rank CPU kernel (which
// kernels/cpu's tests check against the naive one) is the reference instead, and says so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/plan/attention_plan.h"
#include "core/runtime/executor.h"

namespace cpbench {

struct OwnedInputs {
  std::vector<float> q, k, v, dout;
  AttentionInputs view() const { return {q, k, v, dout}; }
};
OwnedInputs make_attention_inputs(const AttentionPlan& plan, uint64_t seed);

struct ReferenceAttention {
  std::vector<float> out, lse, dq, dk, dv;  // packed like the inputs; lse [Hq, T]
  std::string kind;                         // "naive (double accumulation)" or "cpu kernel, one rank"
};
inline constexpr double kNaiveLimitPairs = 1e7;  // allowed pairs × heads: about a second of naive work
// With `sequences` (one flag per sequence of the plan), only those are computed — the rows of the
// others are masked out and stay O = 0, LSE = −inf, gradients 0 — so a rank checking its home
// slices pays for the sequences it holds, not the whole batch (sequences never attend to each
// other, so the ones computed are exact).
ReferenceAttention reference_attention(const AttentionPlan& plan, const OwnedInputs& in, bool backward,
                                       const std::vector<char>* sequences = nullptr);
// The sequences `rank`'s home slices belong to, as reference_attention takes them.
std::vector<char> home_sequences(const AttentionPlan& plan, int rank);

// fp32 kernels against a double-accumulated reference (kernels/cpu tests use the same).
struct Tolerance {
  double atol, rtol;
};
inline constexpr Tolerance kOutTolerance{2e-5, 2e-4};
inline constexpr Tolerance kGradTolerance{1e-4, 1e-3};
// A plan with 16-bit values on the wire (value_bytes 2): transferred Q, K, V, O, dO and partial
// gradients are rounded to bf16 (8 significant bits, relative step 2^-8 ≈ 0.004) once per hop,
// so results may differ from the fp32 reference by a few such steps of the values involved.
inline constexpr Tolerance kBf16OutTolerance{2e-2, 2e-2};
inline constexpr Tolerance kBf16GradTolerance{5e-2, 5e-2};

// The worst |x − ref| / (atol + rtol·|ref|) over a home slice's results (≤ 1 passes), and where; a
// result of the wrong size or a NaN or infinite value (an infinite LSE only where the reference has it)
// is infinitely wrong. The tolerances follow the plan's value_bytes.
// `wrong` counts the values beyond their tolerance (as nccl-tests' #wrong), of `checked`.
struct CheckResult {
  double worst = 0;
  double max_abs_error = 0;
  std::string where;  // the worst value: "dK token 37 of sequence 1"
  int64_t wrong = 0, checked = 0;
};
CheckResult check_home(const AttentionPlan& plan, const HomeResult& home, const ReferenceAttention& ref, bool backward);

}  // namespace cpbench
