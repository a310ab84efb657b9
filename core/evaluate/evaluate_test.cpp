// evaluate_test.cpp — the backend table (one row per backend, dispatch by name, an unknown name an
// error listing the known ones) and the cpu backend on two thread ranks: it executes a static-CP
// point's attention, checks it against the reference beside the time (no wrong value, bytes as
// planned), and a planted wrong kernel result makes the point an error naming the plan, the rank
// and the tensor — through evaluate and through run_experiment, on every rank alike.
#include "core/evaluate/evaluate.h"

#include <atomic>
#include <cstring>
#include <filesystem>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/experiment/registry.h"
#include "core/experiment/runner.h"
#include "core/experiment/spec.h"
#include "core/experiment/strategy_registry.h"
#include "core/runtime/cpu_attention_kernels.h"
#include "core/runtime/device_runtime.h"
#include "core/runtime/thread_communicator.h"

namespace cpbench {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

TEST(Backends, OneRowPerBackendFoundByName) {
  std::set<std::string> names;
  for (const Backend& b : backends()) {
    EXPECT_TRUE(names.insert(b.name).second) << "two rows named " << b.name;
    EXPECT_NE(b.evaluate, nullptr) << b.name;
    EXPECT_EQ(find_backend(b.name), &b);
  }
  EXPECT_EQ(backend_names(), (std::vector<std::string>{"sim", "cpu", "cuda"}));
  EXPECT_FALSE(find_backend("sim")->executes);
  EXPECT_TRUE(find_backend("cpu")->executes);
  EXPECT_TRUE(find_backend("cpu")->every_rank_together);
  // cuda runs each plan on thread ranks of one GPU: under mpirun the points are spread, each rank on its GPU.
  EXPECT_FALSE(find_backend("cuda")->every_rank_together);
  EXPECT_FALSE(find_backend("cpu")->needs_devices);
  EXPECT_TRUE(find_backend("cuda")->executes);
  EXPECT_TRUE(find_backend("cuda")->needs_devices);
  EXPECT_EQ(find_backend("gpu?"), nullptr);
}

// The spec of the CLI's cpu backend test: TP 8, CP 2 (p2p and all_gather) on gpt_1.7b.
Spec cpu_spec() {
  auto spec = load_spec(CPBENCH_SOURCE_DIR "/apps/testdata/cpu_backend_spec.json", "cpu_backend_spec",
                        SpecOptions{default_experiments_dir(), {}, {}});
  EXPECT_TRUE(spec.ok()) << spec.error_str();
  return *spec;
}

Plan plan_of(const PointConfig& p, const GlobalBatch& batch) {
  PlanOutcome planned =
      find_strategy(p.strategy)->plan(StrategyInput{p.cluster, p.model, p.parallel, batch, &p.search});
  EXPECT_EQ(planned.status, "ok") << planned.reason;
  return planned.plan;
}

TEST(Backends, UnknownBackendIsAnErrorListingTheKnownOnes) {
  const Spec spec = cpu_spec();
  const PointConfig& p = spec.points.front();
  const GlobalBatch batch = p.workload.batch();
  const Evaluation e = evaluate(EvalInput{p.cluster, p.model, batch, p.flops_definition}, plan_of(p, batch), "gpu?");
  EXPECT_EQ(e.status, "error");
  EXPECT_THAT(e.reason, HasSubstr("unknown backend 'gpu?' (known: sim, cpu, cuda)"));
}

// A kernel that gets one value of one backward tile wrong on the rank it runs on.
class PlantedKernels final : public AttentionKernels {
 public:
  explicit PlantedKernels(bool wrong) : wrong_(wrong), cpu_(one_thread()) {}
  TensorOps& memory() override { return cpu_.memory(); }
  void tile_forward(const ForwardCall& call) override { cpu_.tile_forward(call); }
  void tile_backward(const BackwardCall& call) override {
    cpu_.tile_backward(call);
    if (wrong_ && !planted_) {
      call.dk[0] += 1.0f;
      planted_ = true;
    }
  }

 private:
  static kernels::FlashConfig one_thread() {
    kernels::FlashConfig c;
    c.threads = 1;
    return c;
  }
  bool wrong_, planted_ = false;
  CpuAttentionKernels cpu_;
};

// Evaluates the spec's first point (p2p CP 2) on the cpu backend on two thread ranks; rank
// `planted` (−1: none) runs the faulty kernel.
std::vector<Evaluation> evaluate_on_two_threads(int planted) {
  const Spec spec = cpu_spec();
  const PointConfig& p = spec.points.front();
  const GlobalBatch batch = p.workload.batch();
  const Plan plan = plan_of(p, batch);
  std::vector<Evaluation> out(2);
  auto st = run_thread_ranks(
      2,
      [&](Communicator& comm) -> Status {
        PlantedKernels kernels(comm.rank() == planted);
        EvalInput in{p.cluster, p.model, batch, p.flops_definition, {},
                     default_experiments_dir() / "hardware" / "cpu_local.json", 60};
        in.world = &comm;
        in.kernels = &kernels;
        out[static_cast<size_t>(comm.rank())] = evaluate(in, plan, "cpu");
        return ok_status();
      },
      std::chrono::seconds(120));
  for (const Status& s : st) EXPECT_TRUE(s) << s.error_str();
  return out;
}

TEST(CpuBackend, ExecutesOnThreadRanksCheckedAgainstTheReference) {
  for (const Evaluation& e : evaluate_on_two_threads(-1)) {
    ASSERT_EQ(e.status, "ok") << e.reason;
    EXPECT_EQ(e.metrics.at("cpu_attention_plans_executed"), 1);
    EXPECT_EQ(e.metrics.at("cpu_bytes_match_plan"), 1);
    EXPECT_EQ(e.metrics.at("cpu_wrong_values"), 0);
    EXPECT_GT(e.metrics.at("cpu_max_error_fraction"), 0);  // fp32 kernels are not bit-exact: it is measured
    EXPECT_LE(e.metrics.at("cpu_max_error_fraction"), 1);
    EXPECT_GT(e.timings.at("cpu_attention_measured_s"), 0);
  }
}

TEST(CpuBackend, APlantedWrongKernelResultFailsNamingPlanRankAndTensor) {
  for (const Evaluation& e : evaluate_on_two_threads(1)) {
    EXPECT_EQ(e.status, "error");
    EXPECT_THAT(e.reason, HasSubstr("cpu backend: attention plan 0 (zigzag, 2 ranks) computed wrong values: world rank "));
    EXPECT_THAT(e.reason, HasSubstr("'s dK token "));
    EXPECT_THAT(e.reason, HasSubstr("times its tolerance; "));
    EXPECT_THAT(e.reason, HasSubstr("; 1 value wrong"));
  }
}

// The same through the runner, as `cpbench run --backend cpu` runs it: the point is an error with
// that reason in results.json (the CLI then exits 1, naming the point).
TEST(CpuBackend, APlantedWrongKernelResultIsAnErrorPointOfTheRun) {
  Spec spec = cpu_spec();
  spec.points.resize(1);
  const fs::path out = fs::path(testing::TempDir()) / "evaluate_test_planted";
  fs::remove_all(out);
  std::vector<Expected<PointResults>> results(2, PointResults{});
  auto st = run_thread_ranks(
      2,
      [&](Communicator& comm) -> Status {
        PlantedKernels kernels(comm.rank() == 0);
        RunOptions options;
        options.out_dir = out;
        options.backend = "cpu";
        options.experiments_dir = default_experiments_dir();
        options.progress_every_s = 0;
        options.world = &comm;
        options.kernels = &kernels;
        results[static_cast<size_t>(comm.rank())] = run_experiment(spec, options);
        return ok_status();
      },
      std::chrono::seconds(120));
  for (const Status& s : st) ASSERT_TRUE(s) << s.error_str();
  ASSERT_TRUE(results[0].ok()) << results[0].error_str();
  ASSERT_EQ(results[0]->size(), 1u);
  const PointResult& r = *(*results[0])[0];
  EXPECT_EQ(r.status, "error");
  EXPECT_THAT(r.reason, HasSubstr("attention plan 0 (zigzag, 2 ranks) computed wrong values"));
  EXPECT_TRUE(fs::exists(out / spec.name / "results.json"));
}

// The cuda backend's walk with the device stood in for by the host: every rank a thread with its
// own kernels (CPU ones; the second made planted when asked), bytes moved by the runtime's copy.
// It is the path `run --backend cuda` takes on a GPU, short of the CUDA kernels and cudaMemcpy
// (those run in the GPU tests of scripts/device_check.sh).
std::atomic<int> g_host_copies{0};
std::atomic<int> g_kernels_made{0};
bool g_plant = false;
const DeviceRuntime& host_standin() {
  static const DeviceRuntime rt{
      "host stand-in", [] { return std::string(); }, [] { return std::string("the host"); },
      []() -> std::unique_ptr<AttentionKernels> {
        const int n = g_kernels_made++;
        return std::make_unique<PlantedKernels>(g_plant && n == 1);
      },
      nullptr,
      [](void* dst, const void* src, std::size_t bytes) -> Status {
        ++g_host_copies;
        std::memcpy(dst, src, bytes);
        return ok_status();
      },
      nullptr, nullptr};
  return rt;
}

Evaluation evaluate_on_standin(bool plant, const DeviceRuntime* device) {
  const Spec spec = cpu_spec();
  const PointConfig& p = spec.points.front();
  const GlobalBatch batch = p.workload.batch();
  EvalInput in{p.cluster, p.model, batch, p.flops_definition, {},
               default_experiments_dir() / "hardware" / "cpu_local.json", 60};
  in.device = device;
  g_plant = plant;
  g_kernels_made = 0;
  g_host_copies = 0;
  return evaluate(in, plan_of(p, batch), "cuda");
}

TEST(CudaBackend, RunsEveryRankAsAThreadOnTheDeviceCheckedAgainstTheReference) {
  const Evaluation e = evaluate_on_standin(false, &host_standin());
  ASSERT_EQ(e.status, "ok") << e.reason;
  EXPECT_EQ(e.metrics.at("cuda_attention_plans_executed"), 1);
  EXPECT_EQ(e.metrics.at("cuda_bytes_match_plan"), 1);
  EXPECT_EQ(e.metrics.at("cuda_wrong_values"), 0);
  EXPECT_GT(e.metrics.at("cuda_max_error_fraction"), 0);
  EXPECT_LE(e.metrics.at("cuda_max_error_fraction"), 1);
  EXPECT_GT(e.metrics.at("cuda_attention_predicted_s"), 0);  // the point's own GPU, every rank's kernels
  EXPECT_GT(e.timings.at("cuda_attention_measured_s"), 0);
  EXPECT_EQ(g_kernels_made.load(), 2);  // one per rank of the CP-2 plan
  EXPECT_GT(g_host_copies.load(), 0);   // the ranks' messages went through the runtime's copy
}

TEST(CudaBackend, AWrongValueIsAnErrorNamingTheRankAndTensor) {
  const Evaluation e = evaluate_on_standin(true, &host_standin());
  EXPECT_EQ(e.status, "error");
  EXPECT_THAT(e.reason, HasSubstr("cuda backend: attention plan 0 (zigzag, 2 ranks) computed wrong values: world rank "));
  EXPECT_THAT(e.reason, HasSubstr("'s dK token "));
  EXPECT_THAT(e.reason, HasSubstr("; 1 value wrong"));
}

TEST(CudaBackend, WithoutARuntimeOrADeviceEveryPointIsAnErrorSayingSo) {
  EXPECT_THAT(evaluate_on_standin(false, nullptr).reason, HasSubstr("cuda backend: this cpbench was built without CUDA"));
  DeviceRuntime none = host_standin();
  none.unavailable = [] { return std::string("no CUDA device here"); };
  const Evaluation e = evaluate_on_standin(false, &none);
  EXPECT_EQ(e.status, "error");
  EXPECT_EQ(e.reason, "cuda backend: no CUDA device here");
  EXPECT_EQ(g_kernels_made.load(), 0);
}

}  // namespace
}  // namespace cpbench
