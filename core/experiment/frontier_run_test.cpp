// frontier_run_test.cpp — a spec with "frontier" runs as TensorOpt's frontier tracking: the
// points it marks pareto_optimal are exactly the Pareto set of running every point (objectives:
// step time, memory, bytes, GPUs), each pruned point is dominated by a simulated one, simulated
// points carry the same metrics as in a plain run, and fewer points are simulated than can run.
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "core/experiment/registry.h"
#include "core/experiment/runner.h"
#include "core/experiment/spec.h"
#include "core/search/frontier.h"

namespace cpbench {
namespace {

namespace fs = std::filesystem;

TEST(FrontierRun, MarksExactlyTheParetoSetOfRunningEveryPoint) {
  const fs::path dir = fs::temp_directory_path() / ("cpbench_frontier_run_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  json j = {
      {"description", "frontier test"},
      {"hardware", "h100_dgx"},
      {"model", "gpt_1.7b"},
      {"workload", {{"dataset", "fixed_2048"}, {"global_batch_sequences", 64}}},
      {"parallel", {{"num_gpus", 8}}},
      {"grid",
       {{"parallel.num_gpus", {8, 16}}, {"parallel.tp", {1, 2}}, {"parallel.pp", {1, 2}}, {"parallel.recompute", {"none", "full"}}}},
      {"strategies", {{{"name", "ptdp"}, {"label", "DDP"}}, {{"name", "zero3"}, {"label", "ZeRO-3"}}}},
      {"frontier", json::object()},
      {"metrics", {"step_time_s", "peak_memory_gib", "comm_bytes_per_gpu", "pareto_optimal"}},
  };
  std::ofstream(dir / "frontier.json") << j.dump(2);
  auto spec = load_spec(dir / "frontier.json", "t/frontier", SpecOptions{default_experiments_dir(), {}, {}});
  ASSERT_TRUE(spec.ok()) << spec.error_str();
  ASSERT_EQ(spec->frontier_objectives,
            (std::vector<std::string>{"step_time_s", "peak_memory_gib", "comm_bytes_per_gpu", "num_gpus"}));
  RunOptions options;
  options.out_dir = dir / "out";
  options.jobs = 2;
  auto tracked = run_experiment(*spec, options);
  ASSERT_TRUE(tracked.ok()) << tracked.error_str();
  ASSERT_TRUE(fs::exists(dir / "out" / "t/frontier" / "results.json"));

  // Every point run plainly, one at a time.
  std::vector<PointResult> plain;
  for (const PointConfig& p : spec->points) plain.push_back(run_point(p, {}));
  auto vec = [&](size_t i, const std::map<std::string, double>& m) {
    return Objectives{m.at("step_time_s"), m.at("peak_memory_gib"), m.at("comm_bytes_per_gpu"),
                      static_cast<double>(spec->points[i].parallel.num_gpus)};
  };
  size_t ran = 0, simulated = 0, pruned = 0, on_frontier = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const PointResult& r = *(*tracked)[i];
    if (plain[i].status != "ok") {
      EXPECT_EQ(r.status, plain[i].status) << r.id;
      continue;
    }
    ++ran;
    bool pareto = true;
    for (size_t k = 0; k < plain.size(); ++k)
      if (plain[k].status == "ok" && dominates(vec(k, plain[k].metrics), vec(i, plain[i].metrics))) pareto = false;
    if (r.status == "pruned") {
      ++pruned;
      EXPECT_FALSE(pareto) << r.id;
      EXPECT_EQ(r.reason.rfind("dominated by ", 0), 0u) << r.reason;
      continue;
    }
    ASSERT_EQ(r.status, "ok") << r.id << ": " << r.reason;
    ++simulated;
    for (const auto& [k, v] : plain[i].metrics) EXPECT_DOUBLE_EQ(r.metrics.at(k), v) << r.id << " " << k;
    EXPECT_EQ(r.metrics.at("pareto_optimal"), pareto ? 1.0 : 0.0) << r.id;
    on_frontier += pareto;
  }
  EXPECT_GT(ran, 10u);
  EXPECT_GT(pruned, 0u);
  EXPECT_EQ(simulated + pruned, ran);
  EXPECT_GT(on_frontier, 1u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cpbench
