// sim_bench.cpp — simulate() on the shape of SC'21 Table 1's 1T row: a 64-stage pipeline with
// one representative device per stage and m = 512 micro-batches (1F1B, with P2P transfers),
// plus the interleaved schedule with v = 2 for a larger graph. Target: < 1 s per iteration. And
// the caching allocator replayed on one stage's step of variable lengths (Llama-2 7B, t 2 with SP,
// stage 0 of p 4, 32 micro-batches of 2K–14K tokens, selective recompute): what `cpbench compare`
// and the searches pay per stage of every plan on a stack that replays its allocator.
// Build: -DCPBENCH_BUILD_BENCH=ON, then run build/sim_bench.
#include <benchmark/benchmark.h>

#include <random>

#include "core/experiment/registry.h"
#include "core/sim/allocator_replay.h"
#include "core/sim/pipeline_schedule.h"

namespace cpbench {
namespace {

// Durations of the order of the 1T row's (per micro-batch ~0.1 s forward, 2x backward);
// the engine's cost does not depend on them.
void BM_SimulatePipeline(benchmark::State& state, const char* kind, int v) {
  const int p = 64, m = 512;
  const TaskGraph g = build_pipeline_graph(*pipeline_schedule(kind, p, m, v), 0.1 / v, 0.2 / v, 0.004);
  double makespan_s = 0;
  for (auto _ : state) {
    SimResult r = simulate(g);
    // The pointer, not the double: GCC mis-handles DoNotOptimize's "+m,r" asm on a double.
    benchmark::DoNotOptimize(r.end_s.data());
    makespan_s = r.makespan_s;
  }
  state.counters["makespan_s"] = makespan_s;
  state.counters["tasks"] = static_cast<double>(g.size());
  state.counters["tasks_per_s"] = benchmark::Counter(static_cast<double>(g.size()), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(BM_SimulatePipeline, one_f_one_b_p64_m512, "1f1b", 1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SimulatePipeline, interleaved_p64_m512_v2, "interleaved", 2)->Unit(benchmark::kMillisecond);

void BM_BuildPipelineGraph(benchmark::State& state) {
  const PipelineSchedule s = *pipeline_schedule("1f1b", 64, 512, 1);
  for (auto _ : state) {
    TaskGraph g = build_pipeline_graph(s, 0.1, 0.2, 0.004);
    benchmark::DoNotOptimize(g.size());
  }
}
BENCHMARK(BM_BuildPipelineGraph)->Unit(benchmark::kMillisecond);

void BM_ReplayAllocator(benchmark::State& state, bool expandable) {
  const ModelShape model = *load_model(default_experiments_dir() / "models" / "llama2_7b.json");
  ParallelConfig L;
  L.num_gpus = 8;
  L.tp = 2;
  L.pp = 4;
  L.sequence_parallel = true;
  L.recompute = "selective";
  L.attention_kernel = "flash";
  std::mt19937 rng(3);
  std::vector<PlanMicroBatch> mbs;
  for (int k = 0; k < 32; ++k) mbs.push_back(PlanMicroBatch{{2048 + 512 * static_cast<int64_t>(rng() % 25)}, 1, -1, 1});
  const PipelineSchedule schedule = *pipeline_schedule("1f1b", 4, 32, 1);
  double reserved = 0;
  for (auto _ : state) {
    const AllocatorReplay r = replay_stage_allocations(model, L, mbs, schedule, 0, expandable, 1e30);
    reserved = r.peak_reserved;
    benchmark::DoNotOptimize(&reserved);
  }
  state.counters["peak_reserved_gib"] = reserved / (1024.0 * 1024 * 1024);
}
BENCHMARK_CAPTURE(BM_ReplayAllocator, default_varlen, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ReplayAllocator, expandable_varlen, true)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cpbench

BENCHMARK_MAIN();
