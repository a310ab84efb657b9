// ptdp_bench.cpp — simulating one PTD-P training iteration end to end (plan, layer costs,
// lowering, discrete-event run) for SC'21 Table 1's 1T row: 3072 GPUs, t = 8, p = 64, d = 6,
// micro-batch 1, global batch 3072 → m = 512 micro-batches per pipeline.
// Target (issue 3): under 1 s on one core. Results are recorded in docs/performance.md.
#include <benchmark/benchmark.h>

#include "core/experiment/registry.h"
#include "core/strategies/ptdp.h"
#include "core/strategies/strategy_test_util.h"
#include "core/workload/length_profile.h"

namespace cpbench {
namespace {

void BM_SimulateIteration1T(benchmark::State& state) {
  const auto dir = default_experiments_dir();
  auto cluster = load_hardware(dir / "hardware" / "a100_80gb_dgx.json");
  auto model = load_model(dir / "models" / "gpt_1008b.json");
  if (!cluster || !model) {
    state.SkipWithError("presets failed to load");
    return;
  }
  ParallelConfig layout;
  layout.num_gpus = 3072;
  layout.tp = 8;
  layout.pp = 64;
  layout.micro_batch_size = 1;
  layout.recompute = "full";
  layout.attention_kernel = "unfused";
  layout.overlap_grad_reduce = false;
  layout.gradient_accumulation_fusion = false;
  layout.dtype = "fp16";  // Table 1's settings: fp16 with 16-bit gradient reduction
  layout.grad_reduce_in_fp32 = false;
  GlobalBatch batch;
  batch.lengths.assign(3072, 2048);
  StrategyInput in{*cluster, *model, layout, batch};
  double tflops = 0;
  for (auto _ : state) {
    Evaluation out = plan_and_evaluate(plan_ptdp, in, "sc21");
    tflops = out.metrics["tflops_per_gpu"];
    benchmark::DoNotOptimize(&out);
  }
  state.counters["tflops_per_gpu"] = tflops;
}
BENCHMARK(BM_SimulateIteration1T)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cpbench

BENCHMARK_MAIN();
