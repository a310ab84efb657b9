// bf16.h — bf16 as stored (the top 16 bits of an fp32) and its conversions, one definition for
// host and device code: the wire encoding of 16-bit plans (core/runtime's TensorOps) and the
// kernels' bf16 inputs read it alike.
// Requires: nothing (CPB_HD is __host__ __device__ under nvcc, empty elsewhere).
// Note: fp32 → bf16 rounds to nearest, ties to even; a NaN stays a NaN (its quiet bit set, since
// rounding could carry a NaN's low mantissa bits into the exponent); ±inf and ±0 are exact.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define CPB_HD __host__ __device__
#else
#define CPB_HD
#endif

namespace cpbench::kernels {

struct Bf16 {
  uint16_t bits;
};

CPB_HD inline uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

CPB_HD inline Bf16 to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return Bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return Bf16{static_cast<uint16_t>(u >> 16)};
}

CPB_HD inline float to_f32(float x) { return x; }
CPB_HD inline float to_f32(Bf16 x) {
  const uint32_t u = static_cast<uint32_t>(x.bits) << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace cpbench::kernels
