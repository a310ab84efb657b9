// dcp_bench.cpp — DCP's planner (core/strategies/dcp.h) on the micro-benchmark batches of
// experiments/dcp/micro_causal (causal, each point's first batch; 32 GPUs in 4 nodes for its first
// two cases, 16 in 4 for the third) and on one 131,072-token sequence: the time to plan one batch (blocks,
// hypergraph, Zoltan partitioning with its 8 seeds and the balance refinement, stages).
// `dcp_bench --hypergraphs DIR` instead writes each batch's hypergraph in hMetis format
// (DIR/NAME.hgr, the partitioner's combined vertex weight scaled to integers) with its true weights
// and Zoltan's one-level 16-way result (DIR/NAME.json) for scripts/compare_partitioners.py, which
// runs Mt-KaHyPar on the same files. Results: docs/performance.md.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/cost/cost_model.h"
#include "core/experiment/registry.h"
#include "core/experiment/spec.h"
#include "core/strategies/dcp.h"
#include "core/workload/batch.h"

namespace cpbench {
namespace {

struct BenchCase {
  std::string name;
  DcpRequest request;
  ClusterSpec cluster;
};

// Every (dataset, length scale) batch of dcp/micro_causal, at block size `block`.
std::vector<BenchCase> cases(int64_t block) {
  const auto dir = default_experiments_dir();
  auto spec = load_spec(dir / "dcp" / "micro_causal.json", "dcp/micro_causal", SpecOptions{dir, {}, {}});
  std::vector<BenchCase> out;
  if (!spec) return out;
  for (const PointConfig& p : spec->points) {
    if (p.strategy != "dcp_attention") continue;
    const std::string name = p.case_name + "_x" + p.params["workload.length_scale"].dump() + "_B" + std::to_string(block);
    bool seen = false;
    for (const auto& c : out) seen |= c.name == name;
    if (seen) continue;
    const auto& w = p.workload;
    const GlobalBatch batch = w.batch();
    DcpRequest r;
    r.seq_lengths = batch.lengths;
    r.mask = w.mask;
    r.heads_q = static_cast<int32_t>(p.model.heads);
    r.heads_kv = static_cast<int32_t>(p.model.kv_heads);
    r.head_dim = static_cast<int32_t>(p.model.hidden / p.model.heads);
    r.ranks = static_cast<int32_t>(p.parallel.num_gpus);
    r.gpus_per_node = p.cluster.gpus_per_node;
    r.block_tokens = block;
    out.push_back({name, r, p.cluster});
  }
  return out;
}

// The worst case: one 131,072-token sequence on the first case's 32 GPUs (the most
// computation blocks a 131,072-token batch has under the causal mask).
BenchCase one_sequence(int64_t block) {
  BenchCase one = cases(block).front();
  one.name = "one_131072_sequence_B" + std::to_string(block);
  one.request.seq_lengths = {131072};
  return one;
}

void plan_one(benchmark::State& state, const BenchCase& c) {
  auto cost = CostModel::create(c.cluster);
  int64_t blocks = 0;
  for (auto _ : state) {
    auto d = plan_dcp(c.request, *cost);
    if (!d) {
      state.SkipWithError(d.error_str().c_str());
      return;
    }
    blocks = d->compute_blocks;
  }
  state.SetLabel(c.name);
  state.counters["compute_blocks"] = static_cast<double>(blocks);
}

void BM_DcpPlan(benchmark::State& state) {
  const auto all = cases(state.range(1));
  if (static_cast<size_t>(state.range(0)) >= all.size()) {
    state.SkipWithError("experiments/dcp/micro_causal.json did not load");
    return;
  }
  plan_one(state, all[state.range(0)]);
}

void BM_DcpPlanOneSequence(benchmark::State& state) {
  if (cases(state.range(0)).empty()) {
    state.SkipWithError("experiments/dcp/micro_causal.json did not load");
    return;
  }
  plan_one(state, one_sequence(state.range(0)));
}
// The first batches of dcp/micro_causal's first two cases (32 GPUs in 4 nodes of 8):
// Long-Data-Collections ×0.5 (0) and ×2 (2), LongAlign ×1 (5), at each block size it tries; and
// one 131,072-token sequence.
BENCHMARK(BM_DcpPlan)
    ->ArgsProduct({{0, 2, 5}, {1024, 2048, 4096}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DcpPlanOneSequence)->Arg(1024)->Arg(2048)->Arg(4096)->Unit(benchmark::kMillisecond);

// Writes the hypergraphs and Zoltan's one-level result; returns the process exit code.
int write_hypergraphs(const std::string& dir) {
  for (int64_t block : {1024, 4096}) {
    std::vector<BenchCase> all = cases(block);
    if (all.empty()) return 1;
    all.push_back(one_sequence(block));
    for (const BenchCase& c : all) {
      auto cost = CostModel::create(c.cluster);
      auto h = dcp_hypergraph(c.request, *cost);
      if (!cost || !h) return 1;
      double total_m = 0, total_c = 0;
      for (int32_t v = 0; v < h->vertices(); ++v) {
        total_m += h->memory[v];
        total_c += h->compute[v];
      }
      std::ofstream hgr(dir + "/" + c.name + ".hgr");
      hgr << h->nets() << " " << h->vertices() << " 11\n";
      for (int32_t e = 0; e < h->nets(); ++e) {
        hgr << std::max<int64_t>(1, std::llround(h->net_weight[e] / 1e3));
        for (int64_t j = h->net_begin[e]; j < h->net_begin[e + 1]; ++j) hgr << " " << h->pins[j] + 1;
        hgr << "\n";
      }
      for (int32_t v = 0; v < h->vertices(); ++v)
        hgr << std::max<int64_t>(1, std::llround(1e6 * (h->memory[v] / total_m + h->compute[v] / total_c))) << "\n";
      const BalanceLimits limits{c.request.ranks, c.request.eps_mem, c.request.eps_comp};
      const auto start = std::chrono::steady_clock::now();
      auto part = partition_hypergraph(*h, limits);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!part) return 1;
      nlohmann::json j = {{"k", c.request.ranks},           {"eps_memory", limits.eps_memory},
                          {"eps_compute", limits.eps_compute}, {"net_weight", h->net_weight},
                          {"memory", h->memory},             {"compute", h->compute},
                          {"zoltan", {{"km1", km1(*h, *part)}, {"seconds", seconds}, {"balanced", balanced(*h, *part, limits)},
                                      {"partition", *part}}}};
      std::ofstream(dir + "/" + c.name + ".json") << j.dump();
      std::printf("%s: %d vertices, %d nets, Zoltan km1 %.4g B in %.3f s\n", c.name.c_str(), h->vertices(), h->nets(),
                  km1(*h, *part), seconds);
    }
  }
  return 0;
}

}  // namespace
}  // namespace cpbench

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--hypergraphs") == 0) return cpbench::write_hypergraphs(argv[2]);
  ::benchmark::Initialize(&argc, argv);
  ::benchmark::RunSpecifiedBenchmarks();
  ::benchmark::Shutdown();
  return 0;
}
