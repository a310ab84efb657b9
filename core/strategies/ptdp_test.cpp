// ptdp_test.cpp — PTD-P planning and simulation: every sequence placed once, infeasible layouts
// with reasons, the schedule effects the SC'21 paper describes, determinism.
#include "core/strategies/ptdp.h"
#include "core/strategies/strategy_test_util.h"

#include <gtest/gtest.h>

#include "core/experiment/registry.h"
#include "core/common/json_reader.h"
#include "core/cost/cost_model.h"
#include "core/model/formulas.h"
#include "core/sim/deepspeed_zero3.h"
#include "core/sim/layer_cost.h"
#include "core/sim/memory.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <unistd.h>
#include <utility>

namespace cpbench {
namespace {

class PtdpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = default_experiments_dir();
    cluster_ = *load_hardware(dir / "hardware" / "a100_80gb_dgx.json");
    model_ = *load_model(dir / "models" / "gpt_39.1b.json");
    layout_.num_gpus = 64;
    layout_.tp = 8;
    layout_.pp = 2;
    layout_.micro_batch_size = 2;
    layout_.recompute = "full";
  }
  Evaluation run(int64_t sequences, int64_t length = 2048) {
    batch_.lengths.assign(sequences, length);
    return plan_and_evaluate(plan_ptdp, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  }
  // ZeRO-3 of a 1.7B GPT on one node (dp 8, 16-bit gradients, one 2048-token sequence per rank):
  // FSDP1's flat sharding, then `sharding` (left set in layout_).
  std::pair<Evaluation, Evaluation> zero3_flat_and(const std::string& sharding) {
    model_ = *load_model(default_experiments_dir() / "models" / "gpt_1.7b.json");
    layout_ = ParallelConfig{};
    layout_.num_gpus = 8;
    layout_.grad_reduce_in_fp32 = false;
    batch_.lengths.assign(8, 2048);
    const Evaluation flat = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
    layout_.zero3_sharding = sharding;
    const Evaluation other = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
    EXPECT_EQ(flat.status, "ok") << flat.reason;
    EXPECT_EQ(other.status, "ok") << other.reason;
    return {flat, other};
  }

  // GPT-3 175B under ZeRO-3 with no model parallelism: TP 1, PP 1, full recompute, 16-bit
  // gradients, `sequences` of 2048 tokens on as many GPUs (flat sharding until a test sets it).
  void zero3_175b(int64_t sequences) {
    model_ = *load_model(default_experiments_dir() / "models" / "gpt3_175b.json");
    layout_ = ParallelConfig{};
    layout_.num_gpus = sequences;
    layout_.grad_reduce_in_fp32 = false;
    layout_.recompute = "full";
    batch_.lengths.assign(sequences, 2048);
  }

  ClusterSpec cluster_;
  ModelShape model_;
  ParallelConfig layout_;
  GlobalBatch batch_;
};

TEST_F(PtdpTest, PlanPlacesEverySequenceOnce) {
  batch_.lengths.clear();
  for (int i = 0; i < 128; ++i) batch_.lengths.push_back(100 + i);  // distinct lengths identify sequences
  PlanOutcome planned = plan_ptdp(StrategyInput{cluster_, model_, layout_, batch_});
  ASSERT_EQ(planned.status, "ok") << planned.reason;
  const Plan& plan = planned.plan;
  ASSERT_EQ(plan.micro_batches.size(), 4u);  // dp = 64 / (8·2)
  std::vector<int64_t> seen;
  for (const auto& replica : plan.micro_batches) {
    EXPECT_EQ(replica.size(), 16u);  // 128 / (4 · 2)
    for (const auto& mb : replica) {
      EXPECT_EQ(mb.lengths.size(), 2u);
      seen.insert(seen.end(), mb.lengths.begin(), mb.lengths.end());
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, batch_.lengths);
}

TEST_F(PtdpTest, LayoutsThatCannotRunAreInfeasibleWithAReason) {
  auto out = run(100);  // 100 sequences over dp·mbs = 8
  EXPECT_EQ(out.status, "infeasible");
  EXPECT_NE(out.reason.find("not a multiple of dp·micro_batch_size 8"), std::string::npos) << out.reason;

  layout_.vp = 2;  // interleaving needs m % p == 0: m = 8 / (4·2) = 1
  out = run(8);
  EXPECT_EQ(out.status, "infeasible");
  EXPECT_NE(out.reason.find("interleaved 1F1B needs the micro-batch count 1"), std::string::npos) << out.reason;

  layout_ = ParallelConfig{};
  layout_.num_gpus = 8;
  layout_.tp = 8;
  model_ = *load_model(default_experiments_dir() / "models" / "gpt_1008b.json");
  out = run(8);
  EXPECT_EQ(out.status, "infeasible");
  EXPECT_NE(out.reason.find("out of memory"), std::string::npos) << out.reason;
}

TEST_F(PtdpTest, ReportsConsistentMetrics) {
  auto out = run(256);
  ASSERT_EQ(out.status, "ok") << out.reason;
  const auto& m = out.metrics;
  EXPECT_NEAR(m.at("tflops_per_gpu"), m.at("flops_per_iteration") / m.at("step_time_s") / 64 / 1e12, 1e-9);
  EXPECT_NEAR(m.at("mfu"), m.at("tflops_per_gpu") / 312, 1e-12);
  EXPECT_GT(m.at("mfu"), 0.2);
  EXPECT_LT(m.at("mfu"), 0.8);  // below peak, by the cost model's efficiencies
  EXPECT_GT(m.at("bubble_fraction"), 0);
  EXPECT_LT(m.at("peak_memory_gib"), 80);
  // Device memory = allocated + the allocator's fragmentation of the activation pool + reserved.
  const double f = cluster_.memory.allocator_fragmentation;
  EXPECT_GT(f, 0);
  EXPECT_NEAR(m.at("fragmentation_memory_gib"), m.at("activation_memory_gib") * f / (1 - f), 1e-9);
  EXPECT_NEAR(m.at("peak_memory_gib"), m.at("weights_optimizer_gib") + m.at("activation_memory_gib") +
                                           m.at("fragmentation_memory_gib") + cluster_.memory.reserved_gib,
              1e-9);
}

// What Perfetto's JSON importer needs: on every track (pid = device, tid = stream) the slices
// follow one another without partial overlap, and every used track is named.
TEST_F(PtdpTest, TraceTracksAreNamedAndTheirSlicesDoNotOverlap) {
  layout_.vp = 2;
  layout_.overlap_grad_reduce = true;
  batch_.lengths.assign(64, 2048);
  const auto path = std::filesystem::temp_directory_path() / ("cpbench_ptdp_trace_" + std::to_string(::getpid()) + ".json");
  auto out = plan_and_evaluate(plan_ptdp, StrategyInput{cluster_, model_, layout_, batch_}, "sc21", path);
  ASSERT_EQ(out.status, "ok") << out.reason;
  auto trace = load_json_file(path);
  ASSERT_TRUE(trace.ok()) << trace.error_str();
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;  // (ts, dur) per track
  std::set<std::pair<int, int>> named_threads;
  std::set<int> named_processes;
  std::set<std::string> stream_names;
  std::map<int, double> memory_max;  // device -> the largest sample of its memory counter
  for (const json& e : (*trace)["traceEvents"]) {
    if (e["ph"] == "C") {
      EXPECT_EQ(e["name"], "memory GiB");
      const double v = e["args"]["value"].get<double>();
      memory_max[e["pid"].get<int>()] = std::max(memory_max[e["pid"].get<int>()], v);
      continue;
    }
    const std::pair<int, int> track{e["pid"], e["tid"]};
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      named_threads.insert(track);
      stream_names.insert(e["args"]["name"].get<std::string>());
    }
    if (e["ph"] == "M" && e["name"] == "process_name") named_processes.insert(track.first);
    if (e["ph"] == "X") tracks[track].push_back({e["ts"].get<double>(), e["dur"].get<double>()});
  }
  ASSERT_GE(tracks.size(), 4u);  // compute and communication streams of both stages at least
  size_t slices = 0;
  for (auto& [track, xs] : tracks) {
    EXPECT_TRUE(named_threads.count(track)) << track.first << "/" << track.second;
    EXPECT_TRUE(named_processes.count(track.first)) << track.first;
    std::sort(xs.begin(), xs.end());
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_GE(xs[i].first, 0);
      EXPECT_GE(xs[i].second, 0);
      // In whole nanoseconds, as the trace writes them (µs with 3 decimals).
      auto ns = [](double us) { return std::llround(us * 1000); };
      if (i + 1 < xs.size())
        EXPECT_LE(ns(xs[i].first) + ns(xs[i].second), ns(xs[i + 1].first))
            << "track " << track.first << "/" << track.second << " slice " << i;
    }
    slices += xs.size();
  }
  EXPECT_GT(slices, 2u * 8 * 2 * 2);  // 2 stages × 8 micro-batches × 2 chunks × (fwd, bwd)
  // Named streams: compute, the TP collectives (t = 8), pipeline sends and DP reduction.
  for (const char* name : {"compute", "tp", "pp send fwd", "pp send bwd", "dp"})
    EXPECT_TRUE(stream_names.count(name)) << name;
  // Each stage's memory counter: its weights and optimizer state, plus the activations in flight,
  // never above what the memory estimate allows (which adds the recompute workspace).
  ASSERT_EQ(memory_max.size(), 2u);
  double highest = 0;
  for (const auto& [device, gib] : memory_max) {
    EXPECT_GT(gib, 0) << device;
    highest = std::max(highest, gib);
  }
  EXPECT_GE(highest, out.metrics.at("weights_optimizer_gib"));
  EXPECT_LE(highest, out.metrics.at("weights_optimizer_gib") + out.metrics.at("activation_memory_gib") + 1e-6);
  std::filesystem::remove(path);

  // Beside it, one layer's ops (two layers forward on device 0, backward on device 1): GEMMs and
  // element-wise kernels on compute, the blocking TP collectives between them on tp, the host
  // issuing them; on each track the slices follow one another.
  auto layer_path = path;
  layer_path.replace_extension(".layer.json");
  auto layer = load_json_file(layer_path);
  ASSERT_TRUE(layer.ok()) << layer.error_str();
  std::map<std::pair<int, int>, std::vector<std::pair<long long, long long>>> ops;
  std::map<std::pair<int, int>, std::string> track_name;
  std::set<std::string> op_names;
  for (const json& e : (*layer)["traceEvents"]) {
    const std::pair<int, int> track{e["pid"], e["tid"]};
    if (e["ph"] == "M" && e["name"] == "thread_name") track_name[track] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    ops[track].push_back({std::llround(e["ts"].get<double>() * 1000), std::llround(e["dur"].get<double>() * 1000)});
    op_names.insert(e["name"].get<std::string>());
  }
  std::set<std::string> used;
  for (auto& [track, xs] : ops) {
    used.insert(track_name.at(track));
    std::sort(xs.begin(), xs.end());
    for (size_t i = 0; i + 1 < xs.size(); ++i) EXPECT_LE(xs[i].first + xs[i].second, xs[i + 1].first);
  }
  EXPECT_EQ(used, (std::set<std::string>{"compute", "tp", "host"}));
  for (const char* op : {"qkv", "attention", "fc2", "tp all-reduce", "fc1 dgrad", "fc1 wgrad", "attention bwd"})
    EXPECT_TRUE(op_names.count(op)) << op;
  std::filesystem::remove(layer_path);
}

// Kwai's activation offloading: each offloaded chunk's copy out and back run on the two copy
// streams (their own trace tracks), the backward waits for the copy back. With the GPU's PCIe
// link they hide under compute; on a link 1000× slower they cannot, and the step grows by the
// exposed copies. Memory falls with the ratio on 8 stages (on 4, stage 0's peak stays: memory.h);
// α = 0 is no offloading.
TEST_F(PtdpTest, OffloadingCopiesRunOnTheCopyStreamsAndHideUnlessThePcieLinkIsSlow) {
  layout_.num_gpus = 64;  // dp 1
  layout_.pp = 8;
  layout_.recompute = "none";
  layout_.sequence_parallel = true;
  layout_.distributed_optimizer = true;
  auto with = [&](double alpha, const std::filesystem::path& trace = {}) {
    layout_.activation_offload_ratio = alpha;
    batch_.lengths.assign(32, 2048);  // m = 16
    return plan_and_evaluate(plan_ptdp, StrategyInput{cluster_, model_, layout_, batch_}, "sc21", trace);
  };
  const Evaluation none = with(0), half = with(0.5), all = with(1);
  ASSERT_EQ(none.status, "ok") << none.reason;
  ASSERT_EQ(all.status, "ok") << all.reason;
  EXPECT_EQ(none.metrics.at("offload_bytes_pcie"), 0);
  EXPECT_GT(all.metrics.at("offload_bytes_pcie"), 0);
  EXPECT_NEAR(half.metrics.at("offload_bytes_pcie"), 0.5 * all.metrics.at("offload_bytes_pcie"),
              1e-9 * all.metrics.at("offload_bytes_pcie"));
  EXPECT_LT(half.metrics.at("peak_allocated_bytes"), none.metrics.at("peak_allocated_bytes"));
  EXPECT_LT(all.metrics.at("peak_allocated_bytes"), half.metrics.at("peak_allocated_bytes"));
  EXPECT_EQ(all.metrics.at("weights_optimizer_gib"), none.metrics.at("weights_optimizer_gib"));
  // Hidden: a 2-layer chunk of 2 sequences moves ~0.2 GB per direction in ~10 ms at PCIe Gen4
  // rates, under forwards and backwards of tens of ms.
  EXPECT_NEAR(all.metrics.at("step_time_s"), none.metrics.at("step_time_s"), 0.01 * none.metrics.at("step_time_s"));

  const auto path = std::filesystem::temp_directory_path() / ("cpbench_offload_trace_" + std::to_string(::getpid()) + ".json");
  ASSERT_EQ(with(1, path).status, "ok");
  auto trace = load_json_file(path);
  ASSERT_TRUE(trace.ok()) << trace.error_str();
  std::map<std::pair<int, int>, std::string> track_name;
  std::map<std::string, int> slices;
  for (const json& e : (*trace)["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") track_name[{e["pid"], e["tid"]}] = e["args"]["name"];
  for (const json& e : (*trace)["traceEvents"])
    if (e["ph"] == "X") ++slices[track_name[{e["pid"], e["tid"]}]];
  EXPECT_GT(slices["copy d2h"], 0);
  EXPECT_EQ(slices["copy d2h"], slices["copy h2d"]);  // every chunk copied out comes back
  std::filesystem::remove(path);
  auto layer_path = path;
  std::filesystem::remove(layer_path.replace_extension(".layer.json"));

  cluster_.gpu.pcie_bandwidth_GBps /= 1000;
  const Evaluation slow = with(1), slow_none = with(0);
  ASSERT_EQ(slow.status, "ok") << slow.reason;
  EXPECT_EQ(slow_none.metrics.at("step_time_s"), none.metrics.at("step_time_s"));  // no copies, no change
  EXPECT_GT(slow.metrics.at("step_time_s"), 1.5 * none.metrics.at("step_time_s"));
  EXPECT_GT(slow.metrics.at("exposed_comm_s"), none.metrics.at("exposed_comm_s") + 0.4 * none.metrics.at("step_time_s"));
}

// ZeRO-3 moves what its formulas say: per step, each layer's 16-bit parameters gathered twice
// (forward, and again before the backward) and its gradients reduce-scattered once — three
// parameter volumes against DDP's all-reduce of two — each a ring's (d − 1)/d share per GPU; and
// it holds 1/d of the parameters, gradients and optimizer state plus two gathered layers.
// FSDP2 (zero3_sharding per_parameter) moves the same bytes as FSDP1's flat parameters; it also
// copies every gathered layer out of its all-gather's output (2·2 bytes per parameter, forward and
// again before the backward) and every layer's gradients into the reduce-scatter's input (2 + 2),
// all on the compute stream, and holds one gathered layer and one layer's 16-bit gradients more.
// Its root unit (the parameters outside the layers) is copied out once, at the forward's start
// (it is not resharded), and its gradients copied in once.
TEST_F(PtdpTest, Zero3PerParameterShardingCopiesEveryGatherAndGradientOnTheComputeStream) {
  const auto [flat, fsdp2] = zero3_flat_and("per_parameter");
  ASSERT_EQ(flat.status, "ok");
  ASSERT_EQ(fsdp2.status, "ok");
  EXPECT_EQ(fsdp2.metrics.at("comm_bytes_nvlink"), flat.metrics.at("comm_bytes_nvlink"));
  const ParamCount pc = param_count(model_, 2048);
  const double gib = 1024.0 * 1024 * 1024;
  // One layer more gathered and its gradients copied; the root unit's gradients without the
  // position table's, which FSDP2 makes last, where FSDP1 makes its flat parameter's whole.
  EXPECT_NEAR((fsdp2.metrics.at("weights_optimizer_gib") - flat.metrics.at("weights_optimizer_gib")) * gib,
              (2 + 2) * pc.per_layer - 2 * pc.position, 1e-6 * pc.total());
  // The copies are HBM passes of 12 bytes per layer parameter per step (copy-out 4 + 4, copy-in
  // 4) on the compute stream: the step grows by at least their time at the datasheet's bandwidth
  // and by less than three times it (the stack's HBM efficiency, launches, contention); they are
  // not communication.
  const double copies_s = 12 * pc.per_layer * static_cast<double>(model_.layers) / (cluster_.gpu.hbm_bandwidth_GBps * 1e9);
  EXPECT_GE(fsdp2.metrics.at("step_time_s") - flat.metrics.at("step_time_s"), copies_s);
  EXPECT_LE(fsdp2.metrics.at("step_time_s") - flat.metrics.at("step_time_s"), 3 * copies_s);
  EXPECT_NEAR(fsdp2.metrics.at("exposed_comm_s"), flat.metrics.at("exposed_comm_s"), 0.05 * flat.metrics.at("exposed_comm_s") + 1e-4);

  // The root's copies (4 + 4 bytes per parameter, once per micro-batch): on a two-layer model,
  // doubling the vocabulary adds its word table's copies to FSDP2's step beyond FSDP1's, at least
  // at the datasheet's bandwidth.
  model_.layers = 2;
  auto fsdp2_over_flat = [&](int64_t vocab) {
    model_.vocab = vocab;
    layout_.zero3_sharding = "per_parameter";
    const Evaluation two = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
    layout_.zero3_sharding = "flat";
    const Evaluation one = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
    EXPECT_EQ(two.status, "ok") << two.reason;
    EXPECT_EQ(one.status, "ok") << one.reason;
    return two.metrics.at("step_time_s") - one.metrics.at("step_time_s");
  };
  const int64_t vocab = model_.vocab;
  const double more_s = fsdp2_over_flat(2 * vocab) - fsdp2_over_flat(vocab);
  const double table_copies_s = 8 * static_cast<double>(vocab * model_.hidden) / (cluster_.gpu.hbm_bandwidth_GBps * 1e9);
  EXPECT_GE(more_s, table_copies_s);
  EXPECT_LE(more_s, 3 * table_copies_s);
}

// DeepSpeed's stage 3 (zero3_sharding deepspeed) releases a layer's parameters after its forward
// unless the modules run next use them again within stage3_max_reuse_distance (1e9) elements: the
// last layers, whose backward follows after the later layers' and the output layer's, stay
// gathered, and each of them is gathered once instead of twice. Its gathers leave out the
// persistent norms and biases. A model whose layers exceed the live-parameter limit keeps none;
// with pipeline stages it is infeasible.
TEST_F(PtdpTest, Zero3DeepSpeedKeepsTheLastLayersGatheredAcrossTheTurn) {
  const auto [flat, ds] = zero3_flat_and("deepspeed");
  ASSERT_EQ(flat.status, "ok");
  ASSERT_EQ(ds.status, "ok");
  const ParamCount pc = param_count(model_, 2048);
  ParallelConfig planned = layout_;
  planned.zero3 = true;  // as plan_zero3 sets it
  const DeepSpeedGathered g = deepspeed_gathered(model_, planned, 2048);
  ASSERT_GT(g.layers_kept, 0);
  ASSERT_LT(g.layers_kept, model_.layers) << "a 1.7B model keeps some of its layers, not all";
  // The all-gathers' 16-bit bytes a ring of 8 sends, fewer by what DeepSpeed does not gather:
  // the persistent tensors in both passes and the kept layers' backward.
  double not_gathered = 0;
  for (double b : g.backward_gathered) not_gathered += 2 * pc.per_layer - g.layer_partitioned - b;
  const double ring = 7.0 / 8.0, gib = 1024.0 * 1024 * 1024;
  // FSDP also gathers its root unit, the parameters outside the layers, once in each forward;
  // DeepSpeed gathers the embedding's tables and the output layer's as its trace does (each
  // micro-batch's embedding forward and backward, its output layer's forward). Both reduce the
  // gradients outside the layers in every micro-batch.
  const double outside = pc.total() - static_cast<double>(model_.layers) * pc.per_layer;
  const double ds_outside = g.embedding_forward + g.output_forward + g.output_backward + g.embedding_backward;
  EXPECT_NEAR(flat.metrics.at("comm_bytes_nvlink") - ds.metrics.at("comm_bytes_nvlink"),
              ring * 2 * (not_gathered + outside - ds_outside), 1e-6 * pc.total());
  EXPECT_GT(not_gathered, static_cast<double>(g.layers_kept) * g.layer_partitioned);
  // Its memory is its coordinator's (memory_test): here more than flat's two layers, since the
  // prefetch runs up to 1e9 live elements ahead of layers of 64M.
  EXPECT_GT((ds.metrics.at("weights_optimizer_gib") - flat.metrics.at("weights_optimizer_gib")) * gib,
            2 * static_cast<double>(g.layers_kept) * pc.per_layer);
  // Its streams copy what they move (docs/strategies.md): each gathered element rebuilt (4 bytes
  // of HBM traffic), each gradient copied into the bucket and re-interleaved (8). On one node
  // those passes cost more than the kept layers' NVLink gathers save: the step is longer than
  // flat's, by less than three times the copies' time at the datasheet's HBM bandwidth.
  double gathered = 0;
  for (double b : g.backward_gathered) gathered += g.layer_partitioned + b;
  const double copies_s = (4 * gathered + 8 * static_cast<double>(model_.layers) * pc.per_layer) /
                          (cluster_.gpu.hbm_bandwidth_GBps * 1e9);
  EXPECT_GT(ds.metrics.at("step_time_s"), flat.metrics.at("step_time_s"));
  EXPECT_LE(ds.metrics.at("step_time_s") - flat.metrics.at("step_time_s"), 3 * copies_s);

  // Layers of more than 1e9 elements on a rank (175B at TP 1): none kept, every layer gathered
  // again for its backward as flat ZeRO-3 does (the step: the next test).
  model_ = *load_model(default_experiments_dir() / "models" / "gpt3_175b.json");
  planned.zero3_sharding = "deepspeed";
  const DeepSpeedGathered big = deepspeed_gathered(model_, planned, 2048);
  EXPECT_EQ(big.layers_kept, 0);
  for (double b : big.backward_gathered) EXPECT_DOUBLE_EQ(b, big.layer_partitioned);

  model_ = *load_model(default_experiments_dir() / "models" / "gpt_1.7b.json");
  layout_.num_gpus = 8;
  batch_.lengths.assign(8, 2048);
  layout_.pp = 2;
  const Evaluation piped = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  EXPECT_EQ(piped.status, "infeasible");
  EXPECT_NE(piped.reason.find("deepspeed needs pp = 1"), std::string::npos) << piped.reason;
}

// Under full recomputation DeepSpeed gathers a layer of 175B (TP 1) one and two-thirds times for
// its backward: the recomputed forward gathers it all, and its QKV, projection and FC1, released
// after the recomputation because FC2's two uses pass the reuse distance before their backward
// (memory_test), are gathered again. FSDP's flat units gather it once. On 384 GPUs the step moves
// those bytes more (a ring's 383/384 of them), and is no shorter.
TEST_F(PtdpTest, Zero3DeepSpeedGathersAgainWhatTheRecomputationReleased) {
  zero3_175b(384);
  const Evaluation flat = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  layout_.zero3_sharding = "deepspeed";
  const Evaluation ds = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  ASSERT_EQ(flat.status, "ok") << flat.reason;
  ASSERT_EQ(ds.status, "ok") << ds.reason;
  ParallelConfig planned = layout_;
  planned.zero3 = true;
  const DeepSpeedGathered g = deepspeed_gathered(model_, planned, 2048);
  const double per_layer = param_count(model_, 2048).per_layer, h = static_cast<double>(model_.hidden);
  double more = 0;  // gathered beyond flat's two gathers of each layer
  for (double b : g.backward_gathered) {
    EXPECT_NEAR(b, 2 * g.layer_partitioned - 4 * h * h, 1);  // all but FC2 twice
    more += g.layer_partitioned + b - 2 * per_layer;
  }
  EXPECT_GT(more, 0.6 * static_cast<double>(model_.layers) * per_layer);
  // (less FSDP's gather of its root unit in the forward, one micro-batch here, and with
  // DeepSpeed's gathers for the modules outside the layers)
  const ParamCount pc = param_count(model_, 2048);
  const double outside = pc.total() - static_cast<double>(model_.layers) * per_layer;
  more += g.embedding_forward + g.output_forward + g.output_backward + g.embedding_backward;
  EXPECT_NEAR(ds.metrics.at("comm_bytes_per_gpu") - flat.metrics.at("comm_bytes_per_gpu"), 383.0 / 384 * 2 * (more - outside),
              1e-6 * more);
  EXPECT_GE(ds.metrics.at("step_time_s"), flat.metrics.at("step_time_s"));
}

// DeepSpeed of 2021 waits for each module's gathers with the host in step with the device
// (deepspeed_zero3.h deepspeed_synchronous_times): what DeepSpeed 0.6 and FSDP hide beside the
// compute is exposed, and more of the step as the GPUs double at a fixed batch (each GPU still
// gathers the whole model per micro-batch while its compute halves): 175B, TP 1, full
// recompute, 768 sequences of 2048 on 384 and then 768 GPUs.
TEST_F(PtdpTest, Zero3DeepSpeed2021ExposesItsGathersAndScalesWorseThanFlat) {
  zero3_175b(768);
  std::map<std::string, std::pair<double, double>> step;  // sharding: (384 GPUs, 768 GPUs)
  std::map<std::string, double> exposed;
  for (const char* sharding : {"flat", "deepspeed", "deepspeed_2021"})
    for (int64_t gpus : {384, 768}) {
      layout_.zero3_sharding = sharding;
      layout_.num_gpus = gpus;
      const Evaluation e = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
      ASSERT_EQ(e.status, "ok") << sharding << " " << gpus << ": " << e.reason;
      (gpus == 384 ? step[sharding].first : step[sharding].second) = e.metrics.at("step_time_s");
      if (gpus == 768) exposed[sharding] = e.metrics.at("exposed_comm_s") / e.metrics.at("step_time_s");
    }
  EXPECT_LT(exposed["deepspeed"], 0.01);
  EXPECT_GT(exposed["deepspeed_2021"], 0.05);
  EXPECT_GT(step["deepspeed_2021"].second, step["deepspeed"].second);
  const auto halving = [&](const std::string& s) { return step[s].second / step[s].first; };
  EXPECT_GT(halving("deepspeed_2021"), halving("flat") + 0.01);
  // The 2021 coordinator's memory: what its replay gathered at once, and its reduce bucket
  // double-buffered (5e8 16-bit elements more than 0.6's).
  Plan plan;
  plan.layout = layout_;
  plan.layout.zero3 = true;
  plan.micro_batches.assign(768, std::vector<PlanMicroBatch>(1, PlanMicroBatch{{2048}, 1, -1, 1}));
  plan.layout.zero3_sharding = "deepspeed";
  const double peak06 = deepspeed_gathered(model_, plan.layout, 2048).peak, bytes06 = stage_weight_bytes(model_, plan, 0);
  plan.layout.zero3_sharding = "deepspeed_2021";
  const double peak21 = deepspeed_gathered(model_, plan.layout, 2048).peak, bytes21 = stage_weight_bytes(model_, plan, 0);
  EXPECT_NEAR(bytes21 - bytes06, 2 * (peak21 - peak06) + 2 * 5e8, 1e3);
  // Without resharding after the forward DeepSpeed has no equivalent: infeasible, with the reason.
  layout_.zero3_reshard_after_forward = false;
  const Evaluation kept = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  EXPECT_EQ(kept.status, "infeasible");
  EXPECT_NE(kept.reason.find("zero3_reshard_after_forward false"), std::string::npos) << kept.reason;
}

TEST_F(PtdpTest, TorchsLossRunsOnlyWhereTheVocabularyIsWhole) {
  // FSDP at t = 1 with torch's cross-entropy: a step that fits, longer and higher in memory than
  // with Megatron's loss (its extra fp32 passes and gradients); at t = 2 the layout is infeasible
  // for every strategy (check_parallel_config, which the runner and the search apply first).
  model_ = *load_model(default_experiments_dir() / "models" / "gpt_1.7b.json");
  layout_ = ParallelConfig{};
  layout_.num_gpus = 8;
  batch_.lengths.assign(8, 2048);
  const Evaluation megatron = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  layout_.loss = "torch";
  const Evaluation torch = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  ASSERT_EQ(megatron.status, "ok") << megatron.reason;
  ASSERT_EQ(torch.status, "ok") << torch.reason;
  EXPECT_GT(torch.metrics.at("step_time_s"), megatron.metrics.at("step_time_s"));
  EXPECT_GT(torch.metrics.at("peak_memory_gib"), megatron.metrics.at("peak_memory_gib"));
  layout_.num_gpus = 16;
  layout_.tp = 2;
  EXPECT_NE(check_parallel_config(layout_).find("loss torch needs tp = 1"), std::string::npos) << check_parallel_config(layout_);
  layout_.loss = "vocab_parallel";
  EXPECT_EQ(check_parallel_config(layout_), "");
}

// DeepSpeed before v0.4.3 (contiguous_gradients false by default: stage3.py reduce_ipg_grads →
// buffered_reduce_fallback) all-reduces each full bucket as one flattened tensor instead of
// reduce-scattering it tensor by tensor: every gradient's 16-bit bytes sent twice over, a ring's
// 2·(d − 1)/d of them per GPU on one node, where the reduce-scatter sends (d − 1)/d; the
// gathers are the same. Only DeepSpeed 2021 takes the setting.
TEST_F(PtdpTest, Zero3DeepSpeed2021WithoutContiguousGradientsAllReducesEachBucket) {
  model_ = *load_model(default_experiments_dir() / "models" / "gpt_1.7b.json");
  layout_ = ParallelConfig{};
  layout_.num_gpus = 8;
  layout_.grad_reduce_in_fp32 = false;
  layout_.zero3_sharding = "deepspeed_2021";
  batch_.lengths.assign(16, 2048);  // two micro-batches per rank
  const Evaluation scattered = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  layout_.zero3_contiguous_gradients = false;
  const Evaluation reduced = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  ASSERT_EQ(scattered.status, "ok") << scattered.reason;
  ASSERT_EQ(reduced.status, "ok") << reduced.reason;
  const double P = param_count(model_, 2048).total();
  EXPECT_NEAR(reduced.metrics.at("comm_bytes_per_gpu") - scattered.metrics.at("comm_bytes_per_gpu"), 2 * 7.0 / 8 * 2 * P,
              1e-6 * reduced.metrics.at("comm_bytes_per_gpu"));
  EXPECT_NE(reduced.metrics.at("step_time_s"), scattered.metrics.at("step_time_s"));
  EXPECT_EQ(check_parallel_config(layout_), "");
  for (const char* other : {"flat", "per_parameter", "deepspeed"}) {  // checked for every strategy, as the runner does
    layout_.zero3_sharding = other;
    EXPECT_NE(check_parallel_config(layout_).find("zero3_contiguous_gradients false"), std::string::npos) << other;
  }
}

TEST_F(PtdpTest, Zero3MovesThreeParameterVolumesAgainstDdpsTwoAndShardsItsState) {
  model_ = *load_model(default_experiments_dir() / "models" / "gpt_1.7b.json");
  layout_ = ParallelConfig{};
  layout_.num_gpus = 8;  // one node, dp 8
  layout_.grad_reduce_in_fp32 = false;  // 16-bit gradients: the same element size as the parameters
  batch_.lengths.assign(8, 2048);       // one micro-batch per rank
  const Evaluation ddp = plan_and_evaluate(plan_ptdp, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  const Evaluation zero3 = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  ASSERT_EQ(ddp.status, "ok") << ddp.reason;
  ASSERT_EQ(zero3.status, "ok") << zero3.reason;
  const double d = 8, ring = (d - 1) / d;
  const ParamCount pc = param_count(model_, 2048);
  const double layers = static_cast<double>(model_.layers);
  EXPECT_NEAR(ddp.metrics.at("comm_bytes_nvlink"), 2 * ring * 2 * pc.total(), 1e-6 * pc.total());
  // The parameters outside the layers (embedding, positions, norms, output layer) are FSDP's root
  // unit: gathered at each micro-batch's forward, kept to its backward's end and reduce-scattered
  // there (one micro-batch here).
  const double outside = pc.total() - layers * pc.per_layer;
  EXPECT_NEAR(zero3.metrics.at("comm_bytes_nvlink"), 3 * ring * 2 * layers * pc.per_layer + 2 * ring * 2 * outside,
              1e-6 * pc.total());
  EXPECT_EQ(ddp.metrics.at("comm_bytes_network"), 0);
  // State: 20 bytes per parameter replicated with 16-bit gradients (the Megatron-LM README's table:
  // 16-bit weight and gradient, fp32 master weight, its gradient and the Adam moments), against
  // (2 + 2 + 12)/d (16-bit parameters and gradients, fp32 master weights and Adam moments) plus
  // two gathered layers and one layer's gradients (2·2 + 2 bytes per parameter of a layer), and
  // the root unit gathered beside its unsharded gradients (2 + 2 bytes per parameter outside).
  const double gib = 1024.0 * 1024 * 1024;
  EXPECT_NEAR(ddp.metrics.at("weights_optimizer_gib") * gib, 20 * pc.total(), 1e-6 * pc.total());
  EXPECT_NEAR(zero3.metrics.at("weights_optimizer_gib") * gib, 16 * pc.total() / d + 6 * pc.per_layer + 4 * outside,
              1e-6 * pc.total());
  // ZeRO-3 has no main_grad to accumulate into: weight-gradient fusion changes nothing.
  layout_.gradient_accumulation_fusion = false;
  const Evaluation unfused = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  EXPECT_EQ(unfused.metrics.at("step_time_s"), zero3.metrics.at("step_time_s"));
  layout_.gradient_accumulation_fusion = true;
  // Full recompute reruns the forward on the parameters the backward gathered: no extra gather.
  layout_.recompute = "full";
  const Evaluation recomputed = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  EXPECT_NEAR(recomputed.metrics.at("comm_bytes_nvlink"), zero3.metrics.at("comm_bytes_nvlink"), 1e-6 * pc.total());
  layout_.recompute = "none";
  // Keeping the parameters gathered from forward to backward (no reshard) drops one gather.
  layout_.zero3_reshard_after_forward = false;
  const Evaluation kept = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  EXPECT_NEAR(kept.metrics.at("comm_bytes_nvlink"), 2 * ring * 2 * layers * pc.per_layer + 2 * ring * 2 * outside,
              1e-6 * pc.total());
  // ... at the price of holding every layer gathered from its forward to its backward, and its
  // layers' reduce-scatters still run beside the next layer's backward, not before it.
  EXPECT_NEAR((kept.metrics.at("weights_optimizer_gib") - zero3.metrics.at("weights_optimizer_gib")) * gib,
              2 * pc.total() - 4 * pc.per_layer - 2 * outside, 1e-6 * pc.total());
  EXPECT_LE(kept.metrics.at("step_time_s"), zero3.metrics.at("step_time_s"));
  // The gathers of the next layer run beside this one's compute: on NVLink they hide, and the
  // step costs at most a few percent more than DDP's.
  EXPECT_LT(zero3.metrics.at("step_time_s"), 1.05 * ddp.metrics.at("step_time_s"));
  EXPECT_LT(zero3.metrics.at("exposed_comm_s"), 0.02 * zero3.metrics.at("step_time_s"));  // measured 1.1%
}

// FSDP's root unit (embedding, positions, final norm: the parameters outside the layers) is
// gathered at each micro-batch's forward start, with nothing to hide it but the embedding, kept to
// the backward's end, and reduce-scattered there, where the backward waits for it: its
// collectives are exposed once per micro-batch, not once per step. 1.7B GPT (a 50K vocabulary
// beside hidden 2304: the root is about 1.9 layers) on two nodes, dp 16, one and then four
// micro-batches per rank.
TEST_F(PtdpTest, Zero3RootUnitIsGatheredAndReducedInEveryMicroBatch) {
  model_ = *load_model(default_experiments_dir() / "models" / "gpt_1.7b.json");
  layout_ = ParallelConfig{};
  layout_.num_gpus = 16;
  layout_.grad_reduce_in_fp32 = false;
  auto run = [&](int64_t per_rank) {
    batch_.lengths.assign(16 * per_rank, 2048);
    return plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  };
  const Evaluation one = run(1), four = run(4);
  ASSERT_EQ(one.status, "ok") << one.reason;
  ASSERT_EQ(four.status, "ok") << four.reason;
  const ParamCount pc = param_count(model_, 2048);
  const double root = pc.total() - static_cast<double>(model_.layers) * pc.per_layer;
  const auto cost = CostModel::create(cluster_);
  ASSERT_TRUE(cost.ok()) << cost.error_str();
  const GroupPlacement group{16, 8};
  const double root_s = cost->collective_s(Collective::all_gather, 2 * root, group) +
                        cost->collective_s(Collective::reduce_scatter, 2 * root, group);
  EXPECT_GE(one.metrics.at("exposed_comm_s"), root_s);
  EXPECT_GE(four.metrics.at("exposed_comm_s") - one.metrics.at("exposed_comm_s"), 3 * root_s);
  // Its bytes: a gather and a reduce-scatter of the root per micro-batch on top of the layers'.
  const double per_micro_batch = one.metrics.at("comm_bytes_per_gpu");
  EXPECT_NEAR(four.metrics.at("comm_bytes_per_gpu"), 4 * per_micro_batch, 1e-9 * four.metrics.at("comm_bytes_per_gpu"));
  // Its memory: gathered (16-bit) beside its whole flat gradient, whatever the micro-batches.
  EXPECT_EQ(four.metrics.at("weights_optimizer_gib"), one.metrics.at("weights_optimizer_gib"));
  layout_.zero3_reshard_after_forward = false;  // SHARD_GRAD_OP: the root was never resharded either
  EXPECT_NEAR(run(1).metrics.at("weights_optimizer_gib") - one.metrics.at("weights_optimizer_gib"),
              (2 * pc.total() - 4 * pc.per_layer - 2 * root) / (1024.0 * 1024 * 1024), 1e-6);
}

// DeepSpeed resets its coordinator for every micro-batch: each forward starts by gathering the
// word and position tables with nothing beside them, and each backward ends with the optimizer's
// epilogue, which reduce-scatters the buckets flushed after the last layer's backward and waits
// for them (engine.py backward → allreduce_gradients, every micro-batch). Both are exposed once
// per micro-batch, not once per step, in both of its implementations. 1.7B GPT on two nodes,
// dp 16, one and then four micro-batches per rank.
TEST_F(PtdpTest, Zero3DeepSpeedGathersItsEmbeddingAndWaitsForItsEpilogueInEveryMicroBatch) {
  model_ = *load_model(default_experiments_dir() / "models" / "gpt_1.7b.json");
  const auto cost = CostModel::create(cluster_);
  ASSERT_TRUE(cost.ok()) << cost.error_str();
  const GroupPlacement group{16, 8};
  for (const char* sharding : {"deepspeed", "deepspeed_2021"}) {
    layout_ = ParallelConfig{};
    layout_.num_gpus = 16;
    layout_.grad_reduce_in_fp32 = false;
    layout_.zero3_sharding = sharding;
    auto run = [&](int64_t per_rank) {
      batch_.lengths.assign(16 * per_rank, 2048);
      return plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
    };
    const Evaluation one = run(1), four = run(4);
    ASSERT_EQ(one.status, "ok") << sharding << ": " << one.reason;
    ASSERT_EQ(four.status, "ok") << sharding << ": " << four.reason;
    ParallelConfig planned = layout_;
    planned.zero3 = true;  // as plan_zero3 sets it
    const DeepSpeedGathered g = deepspeed_gathered(model_, planned, 2048);
    // The embedding's gather (exposed: the forward's first) and the epilogue's reduce-scatter
    // (exposed: after the backward's last kernel); 2021 reduces only its last bucket after the
    // embedding's backward for certain, the bucket before it may start beside that backward.
    // 0.6+ copies the epilogue's buckets on its reduction stream before reducing them (into the
    // bucket what fits, every tensor re-interleaved); 2021's copies are the compute stream's.
    const bool v06 = std::string(sharding) == "deepspeed";
    const double epilogue = v06 ? g.reduced_at_end : g.last_bucket;
    const double edges_s = cost->collective_s(Collective::all_gather, 2 * g.embedding_forward, group) +
                           cost->collective_s(Collective::reduce_scatter, 2 * epilogue, group) +
                           (v06 ? cost->memory_bound_s(deepspeed_bucket_copy_bytes(g.copied_at_end, g.reduced_at_end, 2)) : 0.0);
    EXPECT_GE(one.metrics.at("exposed_comm_s"), edges_s) << sharding;
    EXPECT_GE(four.metrics.at("exposed_comm_s") - one.metrics.at("exposed_comm_s"), 3 * edges_s) << sharding;
    // Every byte is a micro-batch's: nothing is per step any more.
    EXPECT_NEAR(four.metrics.at("comm_bytes_per_gpu"), 4 * one.metrics.at("comm_bytes_per_gpu"),
                1e-9 * four.metrics.at("comm_bytes_per_gpu"))
        << sharding;
    // Each micro-batch's gathers: the layers' (the forward's, the backward's) and the tables', and
    // every gradient reduce-scattered, a ring of 16's 15/16 of their 16-bit bytes.
    double gathered = g.embedding_forward + g.output_forward + g.output_backward + g.embedding_backward;
    for (double b : g.backward_gathered) gathered += g.layer_partitioned + b;
    EXPECT_NEAR(one.metrics.at("comm_bytes_per_gpu"), 15.0 / 16 * 2 * (gathered + param_count(model_, 2048).total()),
                1e-6 * one.metrics.at("comm_bytes_per_gpu"))
        << sharding;
  }
}

// With resharding, FSDP's backward gathers every layer again, each beside the layer before it in
// the backward's order, the first beside the output layer's backward. Short sequences (128
// tokens) on two nodes leave each gather longer than a layer's backward, so each layer adds its
// exposed part (nine layers against eight). What the first gather leaves exposed falls as the
// output layer's backward grows with the vocabulary, past a layer's (V / 12h = 1.85 at 51,200
// beside hidden 2304) as well, and rises below it: the backward's exposure at twice the
// vocabulary is less, at a quarter more (measured as exposure with resharding less without).
TEST_F(PtdpTest, Zero3BackwardsFirstGatherHidesBehindTheOutputLayersBackward) {
  model_ = *load_model(default_experiments_dir() / "models" / "gpt_1.7b.json");
  layout_ = ParallelConfig{};
  layout_.num_gpus = 16;
  layout_.grad_reduce_in_fp32 = false;
  batch_.lengths.assign(16, 128);
  auto backward_gathers_s = [&](int64_t layers, int64_t vocab) {  // exposed with resharding less without
    model_.layers = layers;
    model_.vocab = vocab;
    double exposed[2];
    for (bool reshard : {true, false}) {
      layout_.zero3_reshard_after_forward = reshard;
      const Evaluation e = plan_and_evaluate(plan_zero3, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
      EXPECT_EQ(e.status, "ok") << e.reason;
      exposed[reshard ? 0 : 1] = e.metrics.at("exposed_comm_s");
    }
    return exposed[0] - exposed[1];
  };
  const int64_t V = model_.vocab;
  const double eight = backward_gathers_s(8, V), nine = backward_gathers_s(9, V);
  EXPECT_GT(nine - eight, 0);
  EXPECT_LT(backward_gathers_s(8, 2 * V), eight);
  EXPECT_GT(backward_gathers_s(8, V / 4), eight);
}

// Megatron's --overlap-param-gather: the distributed optimizer's parameter all-gather moves from
// the end of the step into the next step's forward, layer by layer. The same bytes; the step
// shorter by most of the gather (what stays exposed is the first layer's piece and whatever the
// forward cannot cover); without the distributed optimizer the switch is a configuration error.
TEST_F(PtdpTest, OverlapParamGatherHidesTheDistributedOptimizersGatherInTheForward) {
  model_ = *load_model(default_experiments_dir() / "models" / "gpt_1.7b.json");
  layout_ = ParallelConfig{};
  layout_.num_gpus = 16;  // two nodes, dp 16: the gather crosses the network
  layout_.distributed_optimizer = true;
  batch_.lengths.assign(32, 2048);  // two micro-batches per rank
  auto run = [&](bool overlap) {
    layout_.overlap_param_gather = overlap;
    return plan_and_evaluate(plan_ptdp, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  };
  const Evaluation end = run(false), overlapped = run(true);
  ASSERT_EQ(end.status, "ok") << end.reason;
  ASSERT_EQ(overlapped.status, "ok") << overlapped.reason;
  const ParamCount pc = param_count(model_, 2048);
  const GroupPlacement group{16, 8};
  const auto cost = CostModel::create(cluster_);
  ASSERT_TRUE(cost.ok()) << cost.error_str();
  const double gather_s = cost->collective_s(Collective::all_gather, 2 * pc.total(), group);
  EXPECT_NEAR(overlapped.metrics.at("comm_bytes_network"), end.metrics.at("comm_bytes_network"),
              1e-9 * end.metrics.at("comm_bytes_network"));
  EXPECT_LT(overlapped.metrics.at("step_time_s"), end.metrics.at("step_time_s") - 0.5 * gather_s);
  // Left exposed: the first layer's piece before the first forward (the end-of-step gather was not
  // a wait of the compute stream, so it never counted as exposed communication).
  EXPECT_LT(overlapped.metrics.at("exposed_comm_s"), 0.2 * gather_s);
  layout_.distributed_optimizer = false;
  layout_.overlap_param_gather = true;
  EXPECT_NE(check_parallel_config(layout_), "");
}

TEST_F(PtdpTest, GradientBucketsHideAllButTheLastBucketAndPayOneLatencyEach) {
  model_ = *load_model(default_experiments_dir() / "models" / "gpt_1.7b.json");
  layout_ = ParallelConfig{};
  layout_.num_gpus = 16;  // two nodes, dp 16: the reduction crosses the network
  batch_.lengths.assign(32, 2048);  // two micro-batches per rank
  auto step = [&](bool overlap, int64_t bucket) {
    layout_.overlap_grad_reduce = overlap;
    layout_.grad_reduce_bucket_params = bucket;
    const Evaluation e = plan_and_evaluate(plan_ptdp, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
    EXPECT_EQ(e.status, "ok") << e.reason;
    return e.metrics.count("step_time_s") ? e.metrics.at("step_time_s") : 0.0;
  };
  const double blocking = step(false, 0);
  // One bucket holding every gradient is the reduction without overlap: all of it after the backward.
  EXPECT_DOUBLE_EQ(step(true, int64_t{1} << 40), blocking);
  // Megatron's default buckets (40M parameters of 1.7B): all but the last hide behind the last backward.
  const double bucketed = step(true, 0);
  EXPECT_LT(bucketed, blocking);
  // Tiny buckets pay a collective's latency each: slower than the default, though overlapped.
  EXPECT_GT(step(true, 100000), bucketed);
}

// Megatron Core's buckets, which the time model and the allocator replay both cut with
// grad_bucket_params: max(40M, 1M x DP x CP) by default, one bucket for a chunk after the first
// (training.py get_model's disable_bucketing) and without overlap_grad_reduce.
TEST_F(PtdpTest, GradientBucketsFollowMegatronsDefaultsAndDisableBucketingAfterTheFirstChunk) {
  ParallelConfig L;
  L.num_gpus = 128;
  L.cp = 2;  // dp 64, dp x cp 128
  EXPECT_EQ(grad_bucket_params(L, 0), 128e6);
  L.num_gpus = 16;  // dp 8: the 40M floor
  EXPECT_EQ(grad_bucket_params(L, 0), 40e6);
  L.grad_reduce_bucket_params = 1000;
  EXPECT_EQ(grad_bucket_params(L, 0), 1000);
  EXPECT_TRUE(std::isinf(grad_bucket_params(L, 1)));
  L.overlap_grad_reduce = false;
  EXPECT_TRUE(std::isinf(grad_bucket_params(L, 0)));
}

TEST_F(PtdpTest, PipelineBubbleShrinksWithMoreMicroBatches) {
  double small = run(64).metrics.at("bubble_fraction");   // m = 8
  double large = run(512).metrics.at("bubble_fraction");  // m = 64
  EXPECT_GT(small, 2 * large);
  // 1F1B's idle fraction is about (p−1)/(m+p−1) = 1/9 at m = 8.
  EXPECT_NEAR(small, 1.0 / 9, 0.05);
}

TEST_F(PtdpTest, InterleavingWinsAtSmallBatch) {
  layout_.pp = 4;
  layout_.num_gpus = 32;  // dp = 1
  double plain = run(16).metrics.at("tflops_per_gpu");
  layout_.vp = 2;
  double interleaved = run(16).metrics.at("tflops_per_gpu");
  EXPECT_GT(interleaved, plain);
}

TEST_F(PtdpTest, RecomputeCostsAboutAForwardPass) {
  layout_.recompute = "none";
  double none = run(256).metrics.at("step_time_s");
  layout_.recompute = "full";
  double full = run(256).metrics.at("step_time_s");
  // Forward ≈ 1/3 of forward + backward: recomputing it adds roughly a third.
  EXPECT_GT(full / none, 1.2);
  EXPECT_LT(full / none, 1.45);
}

TEST_F(PtdpTest, SameInputSameResult) {
  auto a = run(256), b = run(256);
  EXPECT_EQ(a.metrics, b.metrics);
}

TEST_F(PtdpTest, DifferentReplicasAreSimulatedEach) {
  // Two replicas with different lengths: the step is at least as long as the slower one alone.
  layout_.num_gpus = 32;  // dp = 2
  layout_.micro_batch_size = 1;
  batch_.lengths = {2048, 2048, 2048, 2048, 512, 512, 512, 512};
  auto mixed = plan_and_evaluate(plan_ptdp, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  batch_.lengths.assign(8, 2048);
  auto uniform = plan_and_evaluate(plan_ptdp, StrategyInput{cluster_, model_, layout_, batch_}, "sc21");
  ASSERT_EQ(mixed.status, "ok") << mixed.reason;
  EXPECT_NEAR(mixed.metrics.at("step_time_s"), uniform.metrics.at("step_time_s"), 0.02 * uniform.metrics.at("step_time_s"));
  EXPECT_GT(mixed.metrics.at("compute_imbalance"), 1.2);
}

// Megatron's --decoder-first/last-pipeline-num-layers: uneven stages run, the stage counts add
// up to the model, and first = last = the even share is the even layout exactly.
TEST_F(PtdpTest, UnevenFirstAndLastStagesRun) {
  layout_.num_gpus = 8 * 5;
  layout_.pp = 5;  // 48 layers do not split over 5 stages evenly
  batch_.lengths.assign(64, 2048);
  EXPECT_EQ(run(64).status, "infeasible");
  layout_.first_stage_layers = 12;
  layout_.last_stage_layers = 12;  // 24 more over the 3 middle stages: 8 each
  ASSERT_EQ(check_model_split(model_, layout_), "");
  int64_t total = 0;
  for (int64_t s = 0; s < 5; ++s) total += stage_layers(layout_, model_.layers, s);
  EXPECT_EQ(total, 48);
  EXPECT_EQ(stage_layers(layout_, model_.layers, 2), 8);
  auto uneven = run(64);
  ASSERT_EQ(uneven.status, "ok") << uneven.reason;
  layout_.last_stage_layers = 10;  // 26 over 3 stages: not even
  EXPECT_NE(check_model_split(model_, layout_).find("do not split evenly over 3 stages"), std::string::npos)
      << check_model_split(model_, layout_);
  // Stating the even share explicitly changes nothing.
  layout_.num_gpus = 8 * 4;
  layout_.pp = 4;
  layout_.first_stage_layers = layout_.last_stage_layers = 0;
  auto even = run(64);
  layout_.first_stage_layers = layout_.last_stage_layers = 12;
  auto stated = run(64);
  ASSERT_EQ(even.status, "ok");
  ASSERT_EQ(stated.status, "ok");
  EXPECT_EQ(even.metrics.at("step_time_s"), stated.metrics.at("step_time_s"));
  EXPECT_EQ(even.metrics.at("peak_memory_gib"), stated.metrics.at("peak_memory_gib"));
}

// Megatron's --account-for-embedding/loss-in-pipeline-split: the embedding and the loss each count
// as a layer of the split. Llama 3 405B as Meta ran it — 126 layers on 16 stages × 8 chunks, one
// layer per virtual stage — has a first chunk of the embedding alone and a last of the loss alone.
// Simulated, the first stage holds one layer fewer, so it is never the stage with the most
// activations in flight at the same count per chunk, and its compute shrinks.
TEST_F(PtdpTest, EmbeddingAndLossCountedAsLayersOfThePipelineSplit) {
  ParallelConfig meta;
  meta.pp = 16, meta.vp = 8, meta.account_for_embedding_in_pipeline_split = meta.account_for_loss_in_pipeline_split = true;
  ASSERT_EQ(check_stage_layers(meta, 126), "");
  EXPECT_EQ(chunk_layers(meta, 126, 0, 0), 0);
  EXPECT_EQ(chunk_layers(meta, 126, 0, 1), 1);
  EXPECT_EQ(chunk_layers(meta, 126, 15, 7), 0);
  EXPECT_EQ(chunk_layers(meta, 126, 15, 6), 1);
  int64_t total = 0;
  for (int64_t s = 0; s < 16; ++s) total += stage_layers(meta, 126, s);
  EXPECT_EQ(total, 126);
  EXPECT_EQ(stage_layers(meta, 126, 0), 7);
  EXPECT_EQ(stage_layers(meta, 126, 7), 8);
  EXPECT_EQ(stage_layers(meta, 126, 15), 7);
  EXPECT_NE(check_stage_layers(meta, 125).find("is not a multiple of pp·vp 128"), std::string::npos);
  meta.first_stage_layers = 7;
  EXPECT_NE(check_stage_layers(meta, 126).find("exclude first_stage_layers"), std::string::npos);
  // 46 layers plus the embedding and the loss over pp 4 · vp 2: 6 per virtual stage, 5 in the
  // first and the last. Against the same model's 48 layers split evenly (6 per chunk), the first
  // stage computes one layer less per micro-batch and saves less.
  model_.layers = 46;
  layout_.num_gpus = 8 * 4, layout_.pp = 4, layout_.vp = 2, layout_.recompute = "selective";
  layout_.account_for_embedding_in_pipeline_split = layout_.account_for_loss_in_pipeline_split = true;
  ASSERT_EQ(check_model_split(model_, layout_), "");
  const Evaluation split = run(16);
  ASSERT_EQ(split.status, "ok") << split.reason;
  model_.layers = 48;
  layout_.account_for_embedding_in_pipeline_split = layout_.account_for_loss_in_pipeline_split = false;
  const Evaluation even = run(16);
  ASSERT_EQ(even.status, "ok") << even.reason;
  EXPECT_LT(split.metrics.at("step_time_s"), even.metrics.at("step_time_s"));
  EXPECT_LT(split.metrics.at("activation_memory_gib"), even.metrics.at("activation_memory_gib"));
}

// Static CP inside PTD-P: every replica's CP group holds each micro-batch and runs the layout of
// cp_comm_type; splitting long sequences over two ranks cuts the step on twice the GPUs.
TEST_F(PtdpTest, StaticCpRunsEveryCommType) {
  layout_.num_gpus = 16;  // tp 8, pp 2, dp 1
  layout_.micro_batch_size = 1;
  layout_.attention_kernel = "flash";
  layout_.sequence_parallel = true;
  auto alone = run(8, 32768);
  ASSERT_EQ(alone.status, "ok") << alone.reason;
  layout_.num_gpus = 32;
  layout_.cp = 2;
  for (const char* type : {"p2p", "all_gather", "a2a", "a2a+p2p"}) {
    layout_.cp_comm_type = type;
    PlanOutcome planned = plan_ptdp(StrategyInput{cluster_, model_, layout_, batch_});
    ASSERT_EQ(planned.status, "ok") << type << ": " << planned.reason;
    ASSERT_EQ(planned.plan.micro_batches.size(), 2u);  // dp·cp
    const PlanMicroBatch& a = planned.plan.micro_batches[0][0];
    EXPECT_EQ(a.cp, 2);
    ASSERT_TRUE(a.attention) << type;
    EXPECT_EQ(a.attention, planned.plan.micro_batches[1][0].attention);  // one plan for the group
    EXPECT_EQ(a.attention->value_bytes, 2);                              // bf16 on the wire
    auto split = run(8, 32768);
    ASSERT_EQ(split.status, "ok") << type << ": " << split.reason;
    EXPECT_LT(split.metrics.at("step_time_s"), 0.75 * alone.metrics.at("step_time_s")) << type;
    EXPECT_GT(split.metrics.at("cp_comm_bytes_nvlink") + split.metrics.at("cp_comm_bytes_network"), 0) << type;
  }
}

// Bytes by link: with tp = pp = 1 the only traffic is the DP gradient all-reduce, a ring moving
// 2(n−1)/n of the gradients per GPU; inside one node all of it is NVLink, over two nodes 2/n of
// the ring's links (and so of its volume) cross the network.
TEST_F(PtdpTest, CommBytesByLinkAreTheGradientRing) {
  const ModelShape small = *load_model(default_experiments_dir() / "models" / "gpt_1.7b.json");
  ParallelConfig L;
  L.num_gpus = 2;
  L.recompute = "full";
  GlobalBatch batch;
  batch.lengths.assign(8, 2048);
  const double grads = L.grad_bytes() * params_per_gpu(small, L, 2048, 0);  // the learned positions too
  auto two = plan_and_evaluate(plan_ptdp, StrategyInput{cluster_, small, L, batch}, "sc21");
  ASSERT_EQ(two.status, "ok") << two.reason;
  EXPECT_NEAR(two.metrics.at("comm_bytes_nvlink"), grads, 1e-9 * grads);  // 2·(2−1)/2
  EXPECT_EQ(two.metrics.at("comm_bytes_network"), 0);
  L.num_gpus = 16;  // two DGX nodes
  batch.lengths.assign(16, 2048);
  auto sixteen = plan_and_evaluate(plan_ptdp, StrategyInput{cluster_, small, L, batch}, "sc21");
  ASSERT_EQ(sixteen.status, "ok") << sixteen.reason;
  const double volume = 2.0 * 15 / 16 * grads;
  EXPECT_NEAR(sixteen.metrics.at("comm_bytes_network"), volume * 2 / 16, 1e-9 * volume);
  EXPECT_NEAR(sixteen.metrics.at("comm_bytes_nvlink"), volume * 14 / 16, 1e-9 * volume);
  // TP adds its collectives: at t = 8 inside a node, NVLink only, and more bytes than DP alone.
  L.num_gpus = 8;
  L.tp = 8;
  batch.lengths.assign(4, 2048);
  auto tp = plan_and_evaluate(plan_ptdp, StrategyInput{cluster_, small, L, batch}, "sc21");
  ASSERT_EQ(tp.status, "ok") << tp.reason;
  EXPECT_EQ(tp.metrics.at("comm_bytes_network"), 0);
  EXPECT_GT(tp.metrics.at("comm_bytes_nvlink"), 0);
}

}  // namespace
}  // namespace cpbench
