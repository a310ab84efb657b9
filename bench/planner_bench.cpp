// planner_bench.cpp — planning latency of the variable-length planners (packing.h, dynamic_cp.h)
// for the Dynamic-CP blog's batch shape: 2048 sequences of dynamic_cp_github (min 256, max 131072,
// seed 1), max_seqlen_per_dp_cp_rank 65536, over 64 and 512 DP×CP ranks: the three packers, Megatron
// main's and dev's Dynamic-CP schedulers and the blog's solver. Target: Megatron-main Dynamic-CP
// ≤ 5 ms at 64 ranks. Build: -DCPBENCH_BUILD_BENCH=ON, then run build/planner_bench.
// Note: the packers run at cp = 2 (the smallest static CP that holds a 131072-token sequence at
// 65536 tokens per rank), dp = ranks / 2; the FLOPs packer's cost is L + L²/4096 (illustrative:
// attention equals linear work at 4K tokens), not a calibrated model.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <map>

#include "core/experiment/registry.h"
#include "core/strategies/dynamic_cp_solver.h"
#include "core/strategies/dynamic_cp.h"
#include "core/strategies/dynamic_cp_dev.h"
#include "core/strategies/packing.h"
#include "core/workload/length_profile.h"
#include "core/workload/sampling.h"

namespace cpbench {
namespace {

constexpr int64_t kMaxSeqlenPerRank = 65536;
constexpr int64_t kStaticCp = 2;

// `sequences` lengths of the GitHub profile (2048: the blog's batch; 100,000: issue 14's scale).
const std::vector<int64_t>& batch(int64_t sequences = 2048) {
  static std::map<int64_t, std::vector<int64_t>> cache;
  auto it = cache.find(sequences);
  if (it != cache.end()) return it->second;
  auto profile = load_length_profile(CPBENCH_SOURCE_DIR "/experiments/datasets/dynamic_cp_github.json");
  if (!profile.ok()) std::abort();  // a benchmark binary, not library code: no batch, no numbers
  return cache[sequences] = sample_lengths(*profile, 1, sequences, 256, 131072);
}

void BM_DpBalanced(benchmark::State& state) {
  const int64_t ranks = state.range(0);
  size_t packs = 0;
  for (auto _ : state) {
    auto p = pack_dp_balanced(batch(), kMaxSeqlenPerRank * kStaticCp, ranks / kStaticCp);
    packs = p->size();
    benchmark::DoNotOptimize(p->data());
  }
  state.counters["packs"] = static_cast<double>(packs);
}

void BM_FirstFitDecreasing(benchmark::State& state) {
  const int64_t ranks = state.range(0);
  size_t packs = 0;
  for (auto _ : state) {
    auto p = pack_first_fit_decreasing(batch(), kMaxSeqlenPerRank * kStaticCp, ranks / kStaticCp);
    packs = p->size();
    benchmark::DoNotOptimize(p->data());
  }
  state.counters["packs"] = static_cast<double>(packs);
}

void BM_FlopsBalanced(benchmark::State& state) {
  const int64_t ranks = state.range(0);
  size_t packs = 0;
  for (auto _ : state) {
    auto p = pack_flops_balanced(batch(), kMaxSeqlenPerRank * kStaticCp, ranks / kStaticCp, 1.0, 1.0 / 4096);
    packs = p->size();
    benchmark::DoNotOptimize(p->data());
  }
  state.counters["packs"] = static_cast<double>(packs);
}

void BM_DynamicCpMain(benchmark::State& state) {
  const int64_t ranks = state.range(0);
  size_t rounds = 0;
  for (auto _ : state) {
    auto s = schedule_dynamic_cp_main(batch(state.range(1)), ranks, kMaxSeqlenPerRank);
    rounds = s->rounds.size();
    benchmark::DoNotOptimize(s->rounds.data());
  }
  state.counters["rounds"] = static_cast<double>(rounds);
}

void BM_DynamicCpDev(benchmark::State& state) {
  const int64_t ranks = state.range(0);
  size_t rounds = 0;
  for (auto _ : state) {
    auto s = schedule_dynamic_cp_dev(batch(state.range(1)), ranks, kMaxSeqlenPerRank);
    rounds = s->rounds.size();
    benchmark::DoNotOptimize(s->rounds.data());
  }
  state.counters["rounds"] = static_cast<double>(rounds);
}

// The blog's solver with the benchmark's pipeline: PP 8, full recompute, Llama-13B shape; it
// searches the micro-batch count over 8 × {1..6}.
void BM_DynamicCpSolver(benchmark::State& state) {
  static const ModelShape model = [] {
    auto m = load_model(default_experiments_dir() / "models" / "llama_13b_dynamic_cp.json");
    if (!m.ok()) std::abort();
    return *m;
  }();
  DynamicCpSolverOptions opt;
  opt.ranks = state.range(0);
  opt.max_seqlen_per_dp_cp_rank = kMaxSeqlenPerRank;
  opt.pp = 8;
  opt.full_recompute = true;
  int64_t m = 0;
  for (auto _ : state) {
    auto s = solve_dynamic_cp(batch(state.range(1)), model, opt);
    m = s->micro_batches;
    benchmark::DoNotOptimize(s->schedule.rounds.data());
  }
  state.counters["micro_batches"] = static_cast<double>(m);
}

BENCHMARK(BM_DpBalanced)->Arg(64)->Arg(512)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FirstFitDecreasing)->Arg(64)->Arg(512)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FlopsBalanced)->Arg(64)->Arg(512)->Unit(benchmark::kMillisecond);
// Args: DP×CP ranks, sequences in the batch.
BENCHMARK(BM_DynamicCpMain)->Args({64, 2048})->Args({512, 2048})->Args({512, 100000})->Args({64, 100000})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DynamicCpDev)->Args({64, 2048})->Args({512, 2048})->Args({512, 100000})->Args({64, 100000})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DynamicCpSolver)->Args({64, 2048})->Args({512, 2048})->Args({512, 100000})->Args({64, 100000})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cpbench

BENCHMARK_MAIN();
