// softmax_row.h — defines: masked_row_max, masked_exp_row: the element-wise half of a flash
// attention block (row max and exp over the allowed columns, zeros elsewhere), AVX2 when the CPU has it.
// Requires: c points at 4 columns [c0, c1) ∪ [c2, c3), sorted and disjoint, inside [lo, hi).
// Note: the AVX2 exp is the Cephes polynomial (|rel err| ≲ 2e-7 on x ≤ 0), chosen at run time with
// __builtin_cpu_supports so the binary needs no -march flag; the fallback is std::exp.
#pragma once

#include <cstdint>

namespace cpbench::kernels {

// max over row[c0..c1) ∪ row[c2..c3); −inf when both ranges are empty.
float masked_row_max(const float* row, const int64_t* c);

// row[x] = exp(row[x] − m) on the allowed columns, 0 on the other columns of [lo, hi); returns
// the sum of the exps (accumulated in float lanes, then summed).
float masked_exp_row(float* row, const int64_t* c, int64_t lo, int64_t hi, float m);

// exp(x) for one value with the same polynomial as the vector path (for tests of the polynomial).
float exp_poly(float x);

}  // namespace cpbench::kernels
