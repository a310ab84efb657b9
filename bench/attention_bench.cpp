// attention_bench.cpp — CPU flash attention forward/backward GFLOP/s beside OpenBLAS SGEMM GFLOP/s
// (the machine's practical peak), so the kernel's efficiency reads as a ratio of two lines.
// Requires: kernels/cpu/flash_attention.h; run pinned (`taskset -c 0`) for one core, unpinned for all.
// Note: counted FLOPs are 4·pairs·d forward and 2.5× that backward (FlashAttention-2, Dao 2023,
// §4.1; DCP uses the same 2.5×), pairs = allowed (query, key) pairs, so masked work skipped is not
// credited and work done on masked entries of diagonal blocks is not either. One head, one sequence.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <random>
#include <vector>

#include "kernels/cpu/flash_attention.h"

namespace {

using namespace cpbench::kernels;

std::vector<float> random_tensor(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

// One sequence of L tokens, one head of dimension d; causal or full mask.
VarlenBatch one_head_batch(int64_t L, int64_t d, bool causal) {
  VarlenBatch b;
  b.dims = {1, 1, d, 0.0};
  b.cu_seqlens_q = {0, L};
  b.cu_seqlens_k = {0, L};
  for (int64_t i = 0; i < L; ++i) b.row_ranges.push_back(causal ? KeyRanges{0, i + 1, i + 1, i + 1} : KeyRanges{0, L, L, L});
  return b;
}

void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Args: L, d, causal (0/1).
void BM_FlashForward(benchmark::State& state) {
  const int64_t L = state.range(0), d = state.range(1);
  const VarlenBatch batch = one_head_batch(L, d, state.range(2) != 0);
  const auto q = random_tensor(L * d, 1), k = random_tensor(L * d, 2), v = random_tensor(L * d, 3);
  for (auto _ : state) {
    PartialOutput out = flash_attention_forward(batch, q, k, v);
    benchmark::DoNotOptimize(out.out.data());
  }
  set_flops(state, 4.0 * static_cast<double>(allowed_pairs(batch)) * static_cast<double>(d));
  state.SetLabel(state.range(2) ? "causal" : "full");
}

void BM_FlashBackward(benchmark::State& state) {
  const int64_t L = state.range(0), d = state.range(1);
  const VarlenBatch batch = one_head_batch(L, d, state.range(2) != 0);
  const auto q = random_tensor(L * d, 1), k = random_tensor(L * d, 2), v = random_tensor(L * d, 3);
  const auto dout = random_tensor(L * d, 4);
  const PartialOutput fwd = flash_attention_forward(batch, q, k, v);
  for (auto _ : state) {
    FlashGrads grads = flash_attention_backward(batch, q, k, v, fwd.out, fwd.lse, dout);
    benchmark::DoNotOptimize(grads.dq.data());
  }
  set_flops(state, 2.5 * 4.0 * static_cast<double>(allowed_pairs(batch)) * static_cast<double>(d));
  state.SetLabel(state.range(2) ? "causal" : "full");
}

// Args: M, N, K. OpenBLAS gets as many threads as OpenMP sees (which follows the CPU affinity).
void BM_Sgemm(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const auto a = random_tensor(M * K, 5), b = random_tensor(K * N, 6);
  std::vector<float> c(static_cast<size_t>(M * N));
  openblas_set_num_threads(omp_get_max_threads());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K));
}

void attention_args(benchmark::internal::Benchmark* b) {
  for (int64_t causal : {1, 0}) {
    for (int64_t d : {64, 128}) {
      for (int64_t L : {1024, 2048, 4096, 8192, 16384}) b->Args({L, d, causal});
    }
  }
  b->ArgNames({"L", "d", "causal"})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.3);
}

BENCHMARK(BM_Sgemm)
    ->Args({2048, 2048, 2048})
    ->Args({4096, 4096, 128})
    ->ArgNames({"M", "N", "K"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_FlashForward)->Apply(attention_args);
BENCHMARK(BM_FlashBackward)->Apply(attention_args);

}  // namespace

BENCHMARK_MAIN();
