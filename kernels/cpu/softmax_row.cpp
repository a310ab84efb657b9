// softmax_row.cpp — masked row max and exp for flash attention blocks; AVX2+FMA or scalar.
#include "kernels/cpu/softmax_row.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace cpbench::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Cephes expf constants (S. Moshier, Cephes Math Library, expf.c): exp(x) = 2^n · p(r),
// n = round(x·log2 e), r = x − n·ln 2 split in two parts for accuracy.
constexpr float kExpHi = 88.3762626647949f, kExpLo = -88.3762626647949f;
constexpr float kLog2e = 1.44269504088896341f, kC1 = 0.693359375f, kC2 = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f;
constexpr float kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

__attribute__((target("avx2,fma"))) inline __m256 exp_avx2(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(kExpHi)), _mm256_set1_ps(kExpLo));
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(kLog2e), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(kC1), x);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(kC2), x);
  __m256 y = _mm256_set1_ps(kP0);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(kP1));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(kP2));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(kP3));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(kP4));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(kP5));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

__attribute__((target("avx2,fma"))) float range_max_avx2(const float* row, int64_t b, int64_t e, float m) {
  __m256 vm = _mm256_set1_ps(m);
  int64_t x = b;
  for (; x + 8 <= e; x += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(row + x));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vm);
  for (float lane : lanes) m = std::max(m, lane);
  for (; x < e; ++x) m = std::max(m, row[x]);
  return m;
}

__attribute__((target("avx2,fma"))) float range_exp_avx2(float* row, int64_t b, int64_t e, float m) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256 vsum = _mm256_setzero_ps();
  int64_t x = b;
  for (; x + 8 <= e; x += 8) {
    const __m256 p = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(row + x), vm));
    _mm256_storeu_ps(row + x, p);
    vsum = _mm256_add_ps(vsum, p);
  }
  if (x < e) {  // the tail through a masked load: no scalar path with a different polynomial
    alignas(32) int32_t mask_bits[8];
    for (int lane = 0; lane < 8; ++lane) mask_bits[lane] = (x + lane < e) ? -1 : 0;
    const __m256i lane_mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(mask_bits));
    const __m256 p = exp_avx2(_mm256_sub_ps(_mm256_maskload_ps(row + x, lane_mask), vm));
    const __m256 kept = _mm256_and_ps(p, _mm256_castsi256_ps(lane_mask));
    _mm256_maskstore_ps(row + x, lane_mask, kept);
    vsum = _mm256_add_ps(vsum, kept);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vsum);
  float sum = 0.0f;
  for (float lane : lanes) sum += lane;
  return sum;
}

float range_max_scalar(const float* row, int64_t b, int64_t e, float m) {
  for (int64_t x = b; x < e; ++x) m = std::max(m, row[x]);
  return m;
}

float range_exp_scalar(float* row, int64_t b, int64_t e, float m) {
  float sum = 0.0f;
  for (int64_t x = b; x < e; ++x) {
    row[x] = std::exp(row[x] - m);
    sum += row[x];
  }
  return sum;
}

bool have_avx2() {
  static const bool yes = [] {
    __builtin_cpu_init();  // needed when first called before constructors have run (GCC manual)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return yes;
}

void zero(float* row, int64_t b, int64_t e) {
  if (e > b) std::memset(row + b, 0, static_cast<size_t>(e - b) * sizeof(float));
}

}  // namespace

float masked_row_max(const float* row, const int64_t* c) {
  auto range_max = have_avx2() ? range_max_avx2 : range_max_scalar;
  return range_max(row, c[2], c[3], range_max(row, c[0], c[1], kNegInf));
}

float masked_exp_row(float* row, const int64_t* c, int64_t lo, int64_t hi, float m) {
  auto range_exp = have_avx2() ? range_exp_avx2 : range_exp_scalar;
  if (c[1] <= c[0] && c[3] <= c[2]) {
    zero(row, lo, hi);
    return 0.0f;
  }
  zero(row, lo, c[0]);
  float sum = range_exp(row, c[0], c[1], m);
  zero(row, c[1], std::max(c[1], c[2]));
  sum += range_exp(row, c[2], c[3], m);
  zero(row, std::max(c[1], c[3]), hi);
  return sum;
}

float exp_poly(float x) {
  x = std::max(std::min(x, kExpHi), kExpLo);
  const float n = std::floor(std::fma(x, kLog2e, 0.5f));
  x = std::fma(-n, kC1, x);
  x = std::fma(-n, kC2, x);
  float y = kP0;
  for (float p : {kP1, kP2, kP3, kP4, kP5}) y = std::fma(y, x, p);
  y = std::fma(y, x * x, x + 1.0f);
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

}  // namespace cpbench::kernels
