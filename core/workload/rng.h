// rng.h — the one random-number source of cpbench workloads: SplitMix64 plus our own uniform,
// normal and integer draws, so the same seed gives the same lengths on every platform.
// Requires: nothing. std::*_distribution are implementation-defined (libstdc++ and libc++ give
// different lognormal samples for the same engine), so none of them is used anywhere here.
// Note: SplitMix64 is Steele, Lea & Flood, "Fast splittable pseudorandom number generators"
// (OOPSLA 2014), in the form Vigna publishes as splitmix64.c; seed 0 yields 0xE220A8397B1DCDAF first.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace cpbench {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  // The next 64 random bits: a Weyl sequence (golden-ratio increment) passed through a
  // variant-13 MurmurHash3 finaliser.
  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

  // Uniform on [0, 1): the top 53 bits, so every value is an exact double k·2^-53.
  double uniform01() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  // Uniform on (0, 1]: safe for log() and for x^(-1/alpha).
  double uniform_open01() { return static_cast<double>((next_u64() >> 11) + 1) * 0x1.0p-53; }

  // Uniform integer in [0, n), n > 0: Lemire's multiply-shift, bias ≤ n / 2^64.
  uint64_t uniform_below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next_u64()) * n) >> 64);
  }

  // Standard normal by the Box–Muller transform (two uniforms per draw; the sine partner is
  // dropped so that the generator carries no hidden cached state).
  double normal() {
    double u1 = uniform_open01();
    double u2 = uniform01();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace cpbench
