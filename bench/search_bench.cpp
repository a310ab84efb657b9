// search_bench.cpp — the configuration search (core/search) over issue 11's 256-GPU space: the
// first point of experiments/kwai/gpt175b_8k (Llama-like 175B, s = 8,192, 256 H800s, global
// batch 256) with the default SearchSpace (t, c ∈ {1, 2, 4, 8}, p ∈ {1, …, 32}, l ∈ {none, 1, 2,
// 4}, three checkpointing modes, α ∈ {0, …, 1}), top 5, on the machine's threads.
// Target (issue 11): ≤ 10 s on 2 cores. Also a variable-length search (issue 33) and the frontier
// search (issue 13) below. Results are
// recorded in docs/performance.md.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <thread>

#include <unistd.h>

#include "core/experiment/registry.h"
#include "core/experiment/runner.h"
#include "core/experiment/spec.h"
#include "core/search/search.h"
#include "core/workload/batch.h"

namespace cpbench {
namespace {

// `cpbench search NAME --top top` on the machine's threads, timed: the default space around the
// registered experiment's first point.
SearchResult time_search(benchmark::State& state, const std::string& name, size_t top) {
  const auto dir = default_experiments_dir();
  auto spec = load_spec(dir / (name + ".json"), name, SpecOptions{dir, {}, {}});
  if (!spec || spec->points.empty()) {
    state.SkipWithError(("experiments/" + name + ".json failed to load").c_str());
    return {};
  }
  const PointConfig& p = spec->points.front();
  const GlobalBatch batch = p.workload.batch();
  const int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  SearchResult found;
  for (auto _ : state) {
    found = search_configurations(p.cluster, p.model, batch, p.parallel, p.flops_definition, SearchSpace{}, top, {}, jobs);
    benchmark::DoNotOptimize(&found);
  }
  state.counters["threads"] = jobs;
  return found;
}

void BM_SearchKwai175B8K(benchmark::State& state) {
  const SearchResult found = time_search(state, "kwai/gpt175b_8k", 5);
  state.counters["enumerated"] = static_cast<double>(found.enumerated);
  state.counters["out_of_memory"] = static_cast<double>(found.out_of_memory);
  state.counters["simulated"] = static_cast<double>(found.simulated);
  state.counters["pruned"] = static_cast<double>(found.pruned);
  state.counters["best_mfu"] = found.top.empty() ? 0 : found.top.front().metrics.at("mfu");
}
BENCHMARK(BM_SearchKwai175B8K)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1)->Repetitions(3);

// The same search on a variable-length batch (issue 33): the first point of
// experiments/dynamic_cp/github (Llama-13B shape, 64 H100s, 2,048 sequences of 256–131,072
// tokens), top 3. Every candidate packs the batch into hundreds of distinct micro-batches, each
// with its own attention plan. Target: ≤ 60 s and ≤ 1 GB on 2 cores (peak memory: /usr/bin/time
// around `cpbench search`, docs/performance.md).
void BM_SearchDynamicCpGithub(benchmark::State& state) {
  const SearchResult found = time_search(state, "dynamic_cp/github", 3);
  state.counters["out_of_memory"] = static_cast<double>(found.out_of_memory);
  state.counters["simulated"] = static_cast<double>(found.simulated);
  state.counters["pruned"] = static_cast<double>(found.pruned);
  state.counters["best_step_s"] = found.top.empty() ? 0 : found.top.front().metrics.at("step_time_s");
}
BENCHMARK(BM_SearchDynamicCpGithub)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1)->Repetitions(1);

// TensorOpt's frontier tracking over experiments/tensoropt/frontier_gpt (18.4B GPT, 8-64 H100s:
// 1,728 points of GPU count × TP × PP × recompute × micro-batch × DDP / ZeRO-1 / ZeRO-3), the whole
// run_experiment including writing results.json. Target (issue 13): ≤ 10 s on 2 cores, with the
// candidates simulated against the space's size.
void BM_FrontierGpt(benchmark::State& state) {
  const auto dir = default_experiments_dir();
  auto spec = load_spec(dir / "tensoropt" / "frontier_gpt.json", "tensoropt/frontier_gpt", SpecOptions{dir, {}, {}});
  if (!spec) {
    state.SkipWithError("experiments/tensoropt/frontier_gpt.json failed to load");
    return;
  }
  RunOptions options;
  options.out_dir = std::filesystem::temp_directory_path() / ("cpbench_frontier_bench_" + std::to_string(::getpid()));
  options.jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  PointResults results;
  for (auto _ : state) {
    auto r = run_experiment(*spec, options);
    if (!r) {
      state.SkipWithError(r.error_str().c_str());
      return;
    }
    results = std::move(*r);
  }
  std::filesystem::remove_all(options.out_dir);
  size_t simulated = 0, pruned = 0, cannot = 0, frontier = 0;
  for (const auto& r : results) {
    if (r->status == "pruned") ++pruned;
    else if (r->status != "ok") ++cannot;
    else {
      ++simulated;
      frontier += r->metrics.at("pareto_optimal") == 1.0;
    }
  }
  state.counters["space"] = static_cast<double>(results.size());
  state.counters["cannot_run"] = static_cast<double>(cannot);
  state.counters["simulated"] = static_cast<double>(simulated);
  state.counters["pruned"] = static_cast<double>(pruned);
  state.counters["on_frontier"] = static_cast<double>(frontier);
  state.counters["threads"] = options.jobs;
}
BENCHMARK(BM_FrontierGpt)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1)->Repetitions(3);

}  // namespace
}  // namespace cpbench

BENCHMARK_MAIN();
