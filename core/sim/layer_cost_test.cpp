// layer_cost_test.cpp — the layer lowering and its pricing: what switching off Megatron's
// element-wise fusions costs (exactly the extra HBM passes and launches documented, no FLOPs);
// blocking TP collectives exposed in full and async ones hidden beside the GEMMs at the price of
// contention; host-bound passes of short kernels; recomputation as real extra ops.
#include "core/sim/layer_cost.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/cost/calibrate.h"
#include "core/cost/cost_test_util.h"
#include "core/experiment/registry.h"
#include "core/model/formulas.h"

namespace cpbench {
namespace {

TEST(LayerCost, UnfusedElementwiseAddsItsPassesAndLaunches) {
  const CostModel cost = preset_model("a100_80gb_dgx");
  const ModelShape m = *load_model(default_experiments_dir() / "models" / "gpt3_175b.json");
  ParallelConfig layout;
  layout.num_gpus = 8;
  layout.tp = 8;
  layout.attention_kernel = "unfused";
  PlanMicroBatch mb;
  mb.lengths = {2048};
  const LayerCost fused = layer_cost(cost, m, layout, mb);
  layout.elementwise_fusion = false;
  const LayerCost unfused = layer_cost(cost, m, layout, mb);

  const double T = 2048, h = m.hidden, t = 8;
  const double bw = cost.cluster().gpu.hbm_bandwidth_GBps * 1e9 * cost.params().hbm_efficiency;
  const double launch = cost.params().kernel_overhead_us * 1e-6;
  // Bias + GeLU: 2 more passes over [T, ffn/t]; each bias-dropout-add: 4 more over [T, h]; 16-bit.
  const double ew_extra = 2.0 * (2 * T * m.ffn_hidden / t + 2 * 4 * T * h);
  // The scores [heads/t, s, s], 16-bit: masked_fill_ as its own kernel, read and write.
  const double scores = 2.0 * (m.heads / t) * T * T;
  const double want_fwd = ew_extra / bw + 5 * launch + (launch + 2 * scores / bw);
  const double want_bwd = 1.5 * ew_extra / bw + 5 * launch + (launch + 2 * scores / bw);
  EXPECT_NEAR(unfused.forward.compute_s - fused.forward.compute_s, want_fwd, 1e-9);
  EXPECT_NEAR(unfused.backward.compute_s - fused.backward.compute_s, want_bwd, 1e-9);
  EXPECT_EQ(unfused.forward.tp_comm_s, fused.forward.tp_comm_s);  // communication is untouched
  // With flash attention the softmax is inside the kernel: only the element-wise passes change.
  layout.attention_kernel = "flash";
  const double flash_unfused = layer_cost(cost, m, layout, mb).forward.compute_s;
  layout.elementwise_fusion = true;
  EXPECT_NEAR(flash_unfused - layer_cost(cost, m, layout, mb).forward.compute_s, ew_extra / bw + 5 * launch, 1e-9);
}

ModelShape model(const std::string& name) {
  return *load_model(default_experiments_dir() / "models" / (name + ".json"));
}

double sum(const OpList& ops, OpStream stream) {
  double s = 0;
  for (const LayerOp& op : ops)
    if (op.stream == stream) s += op.duration_s;
  return s;
}

// HBM bytes of a pass's element-wise kernels (their measured shape).
double elementwise_bytes(const OpList& ops) {
  double s = 0;
  for (const LayerOp& op : ops)
    if (op.kernel == "memory_bound") s += op.shape.at("bytes");
  return s;
}

TEST(LayerOps, TorchsCrossEntropyMakesMorePassesOverTheLogitsThanMegatrons) {
  // Per fp32 logit, Megatron's loss reads 4 bytes in each of three passes (max, sum of
  // exponentials, target) and its backward reads and writes once: 12 and 8 bytes. torch's
  // cross_entropy(logits.float()): the cast 6 (2 read, 4 written), log_softmax 16 (three reads
  // and a write); backward nll_loss's zero fill 4, log_softmax's 16, the cast's 6.
  const CostModel cost = preset_model("h100_dgx");
  const ModelShape m = model("llama3_8b");
  ParallelConfig layout;
  layout.num_gpus = 1;
  PlanMicroBatch mb;
  mb.lengths = {8192};
  const double logits = 8192.0 * m.vocab;
  const LayerOps megatron = lower_output_layer(cost, m, layout, mb);
  layout.loss = "torch";
  const LayerOps torch = lower_output_layer(cost, m, layout, mb);
  EXPECT_DOUBLE_EQ(elementwise_bytes(megatron.forward), 12 * logits);
  EXPECT_DOUBLE_EQ(elementwise_bytes(megatron.backward), 8 * logits);
  EXPECT_DOUBLE_EQ(elementwise_bytes(torch.forward), 22 * logits);
  EXPECT_DOUBLE_EQ(elementwise_bytes(torch.backward), 26 * logits);
  // The GEMMs are the same: the difference in time is those passes at the HBM rate.
  const double bw = cost.cluster().gpu.hbm_bandwidth_GBps * 1e9 * cost.params().hbm_efficiency;
  auto compute = [](const OpList& ops) { return sum(ops, OpStream::compute); };
  EXPECT_NEAR(compute(torch.forward) - compute(megatron.forward), 10 * logits / bw, 1e-3 * 10 * logits / bw);
  EXPECT_NEAR(compute(torch.backward) - compute(megatron.backward), 18 * logits / bw, 1e-3 * 18 * logits / bw);
}

TEST(LayerOps, TheEmbeddingsBackwardZeroFillsItsTableAndAddsItIntoMainGrad) {
  // Per entry of the V/t × h table: a 16-bit zero fill (2 bytes), then, as Megatron's DDP hook
  // adds it into the fp32 main_grad, 2 + 4 + 4; the token rows' scatter-add is 3 × 2 bytes per
  // token and hidden unit. Without weight-gradient fusion chunk_cost adds every parameter's
  // accumulation (the table's included), and FSDP has no main_grad: the fill alone stays.
  const CostModel cost = preset_model("h100_dgx");
  const ModelShape m = model("llama3_8b");
  ParallelConfig layout;
  layout.num_gpus = 2;
  layout.tp = 2;
  PlanMicroBatch mb;
  mb.lengths = {4096};
  const double table = static_cast<double>(m.vocab) / 2 * m.hidden, rows = 4096.0 * m.hidden;
  EXPECT_DOUBLE_EQ(elementwise_bytes(lower_embedding(cost, m, layout, mb).backward), 2 * table + 10 * table + 6 * rows);
  layout.gradient_accumulation_fusion = false;
  EXPECT_DOUBLE_EQ(elementwise_bytes(lower_embedding(cost, m, layout, mb).backward), 2 * table + 6 * rows);
  layout.gradient_accumulation_fusion = true;
  layout.zero3 = true;
  EXPECT_DOUBLE_EQ(elementwise_bytes(lower_embedding(cost, m, layout, mb).backward), 2 * table + 6 * rows);
}

// The kernels a device replays (layer_ops_csv): every single-kernel GEMM, element-wise pass and
// flash attention call of a layer, with the shape whose model time is exactly the op's; the
// linears' forward, dgrad and wgrad GEMMs are Megatron's column/row-parallel shapes; the CSV is
// what `cpbench calibrate` loads, one row per such op, each with its predicted time.
TEST(LayerOps, SingleKernelOpsCarryTheShapeADeviceReplays) {
  const CostModel cost = preset_model("h100_dgx");
  const ModelShape m = model("gpt_1.7b");
  ParallelConfig layout;
  layout.num_gpus = 8;
  layout.tp = 2;
  layout.sequence_parallel = true;
  PlanMicroBatch mb;
  mb.lengths = {2048, 1024};
  const LayerOps ops = lower_layer(cost, m, layout, mb);
  int gemms = 0, attention = 0, elementwise = 0;
  std::set<std::vector<double>> gemm_shapes;
  for (const OpList* list : {&ops.forward, &ops.backward})
    for (const LayerOp& op : *list) {
      if (op.kernel.empty()) {
        EXPECT_TRUE(op.stream != OpStream::compute || op.kernels != 1 || op.duration_s == 0) << op.name;
        continue;
      }
      const double predicted = predict_time_s(cost, OpMeasurement{op.kernel, op.shape, 0});
      EXPECT_NEAR(predicted, op.duration_s, 1e-12 * op.duration_s) << op.name;
      if (op.kernel == "gemm") {
        ++gemms;
        gemm_shapes.insert({op.shape.at("m"), op.shape.at("n"), op.shape.at("k")});
      }
      attention += op.kernel.rfind("flash_attention", 0) == 0;
      elementwise += op.kernel == "memory_bound";
    }
  EXPECT_EQ(gemms, 12);  // QKV, proj, FC1, FC2: forward, dgrad, wgrad
  EXPECT_EQ(attention, 2);
  EXPECT_GE(elementwise, 10);
  const double T = 3072, h = m.hidden, f = m.ffn_hidden;
  EXPECT_TRUE(gemm_shapes.count({T, f / 2, h}));  // FC1 forward: [T, h] · [h, ffn/t]
  EXPECT_TRUE(gemm_shapes.count({T, h, f / 2}));  // its dgrad: [T, ffn/t] · [ffn/t, h]
  EXPECT_TRUE(gemm_shapes.count({h, f / 2, T}));  // its wgrad: [h, T] · [T, ffn/t]
  const auto path = std::filesystem::path(testing::TempDir()) / "layer_ops.csv";
  std::ofstream(path) << layer_ops_csv(cost, ops);
  auto rows = load_measurements(path);
  ASSERT_TRUE(rows.ok()) << rows.error_str();
  EXPECT_EQ(rows->size(), static_cast<size_t>(gemms + attention + elementwise));
  for (const OpMeasurement& r : *rows) EXPECT_NEAR(r.time_s, predict_time_s(cost, r), 1e-8 * r.time_s) << r.op;
}

TEST(LayerOps, BlockingTpCollectivesAreExposedInFullAndComputeIsTheSumOfItsKernels) {
  const CostModel cost = preset_model("a100_80gb_dgx");  // host_op_us 5: hidden under these kernels
  ParallelConfig layout;
  layout.num_gpus = 8;
  layout.tp = 8;
  PlanMicroBatch mb;
  mb.lengths = {2048, 2048};
  const LayerOps ops = lower_layer(cost, model("gpt3_175b"), layout, mb);
  for (const OpList* pass : {&ops.forward, &ops.backward}) {
    const PassCost p = price_ops(cost, *pass);
    EXPECT_NEAR(p.compute_s, sum(*pass, OpStream::compute), 1e-12);
    EXPECT_NEAR(p.tp_comm_s, sum(*pass, OpStream::tp), 1e-12);  // every collective blocks the next GEMM
    EXPECT_NEAR(p.contention_s, 0, 1e-15);
    EXPECT_GT(p.tp_comm_s, 0);
  }
  // Two all-reduces per pass without SP (forward: after proj and fc2; backward: of dX after qkv, fc1).
  auto count = [](const OpList& l) {
    return std::count_if(l.begin(), l.end(), [](const LayerOp& op) { return op.stream == OpStream::tp; });
  };
  EXPECT_EQ(count(ops.forward), 2);
  EXPECT_EQ(count(ops.backward), 2);
  // Sequence parallelism: all-gather + reduce-scatter per block forward; backward adds the
  // re-gather of the wgrad input.
  layout.sequence_parallel = true;
  const LayerOps sp = lower_layer(cost, model("gpt3_175b"), layout, mb);
  EXPECT_EQ(count(sp.forward), 4);
  EXPECT_EQ(count(sp.backward), 6);
}

TEST(LayerOps, AsyncReductionHidesBesideTheWgradGemmAndPaysContention) {
  const CostModel cost = preset_model("h100_dgx");
  ParallelConfig layout;
  layout.num_gpus = 8;
  layout.tp = 8;
  PlanMicroBatch mb;
  mb.lengths = {4096};
  const ModelShape m = model("gpt3_175b");
  const PassCost blocking = price_ops(cost, lower_layer(cost, m, layout, mb).backward);
  layout.async_tensor_model_parallel_allreduce = true;
  const OpList async_ops = lower_layer(cost, m, layout, mb).backward;
  const PassCost async = price_ops(cost, async_ops);
  EXPECT_NEAR(sum(async_ops, OpStream::tp), blocking.tp_comm_s, 1e-12);  // the same collectives
  EXPECT_LT(async.tp_comm_s, 0.5 * blocking.tp_comm_s);  // the wgrad GEMM hides most of them
  EXPECT_GT(async.contention_s, 0);                       // ... and runs slower beside them
  EXPECT_LT(async.total(), blocking.total());
  // The slowdown is the SM share while both run: at most comm_sm_fraction / (1 − share) of the
  // overlapped collective time.
  const double share = cost.params().comm_sm_fraction;
  EXPECT_LE(async.contention_s, sum(async_ops, OpStream::tp) * share / (1 - share) + 1e-12);
}

// DeepSpeed's ZeRO-3 (0.6 and later) copies on its communication streams: each gathered
// parameter rebuilt from the rank-major output (read and write, 16-bit) before the layer may run,
// each gradient copied into the reduce bucket and re-interleaved before the reduce-scatter. They
// are HBM passes on the dp stream, not on the compute stream: the compute ops are FSDP1's (flat),
// and the copies slow them only by sharing HBM.
TEST(LayerOps, DeepSpeedCopiesItsGathersAndGradientsOnTheCommunicationStream) {
  const CostModel cost = preset_model("a100_80gb_dgx");
  ParallelConfig layout;
  layout.num_gpus = 64;
  layout.zero3 = true;
  layout.grad_reduce_in_fp32 = false;
  PlanMicroBatch mb;
  mb.lengths = {2048};
  const ModelShape m = model("gpt_1.7b");
  const LayerOps flat = lower_layer(cost, m, layout, mb);
  layout.zero3_sharding = "deepspeed";
  const LayerOps ds = lower_layer(cost, m, layout, mb);
  const double elements = param_count(m, 0).per_layer;
  for (const auto& [f, d] : {std::pair{&flat.forward, &ds.forward}, std::pair{&flat.backward, &ds.backward}}) {
    EXPECT_DOUBLE_EQ(sum(*d, OpStream::compute), sum(*f, OpStream::compute));
    double copied = 0;
    for (const LayerOp& op : *d)
      if (op.hbm_bytes > 0) {
        EXPECT_EQ(op.stream, OpStream::dp) << op.name;
        EXPECT_DOUBLE_EQ(op.duration_s, cost.memory_bound_s(op.hbm_bytes)) << op.name;
        EXPECT_EQ(op.bytes.nvlink + op.bytes.network, 0) << op.name << " sends nothing";
        copied += op.hbm_bytes;
      }
    // Forward: the next layer's gather rebuilt (4 bytes an element); backward: that and the
    // gradients into the bucket and re-interleaved (2 + 2 and 2 + 2).
    EXPECT_DOUBLE_EQ(copied, (d == &ds.forward ? 4 : 12) * elements);
  }
  const PassCost pf = price_ops(cost, flat.backward), pd = price_ops(cost, ds.backward);
  EXPECT_GE(pd.total(), pf.total());
  EXPECT_GT(pd.contention_s, pf.contention_s);  // the copies take HBM from the layer's kernels
  // A tensor too large for the reduce bucket is not copied into it, only re-interleaved: with a
  // quarter of the layer copied in, the backward's copies fall by 4 bytes for each of the rest.
  const LayerOps big = lower_layer(cost, m, layout, mb, nullptr, Zero3Gather{-1, -1, elements / 4});
  double copied = 0;
  for (const LayerOp& op : big.backward) copied += op.hbm_bytes;
  EXPECT_DOUBLE_EQ(copied, 12 * elements - 4 * 0.75 * elements);
}

TEST(LayerOps, ShortKernelsMakeThePassHostBound) {
  const CostModel cost = preset_model("h100_dgx");
  ASSERT_GT(cost.params().host_op_us, 0);
  ParallelConfig layout;
  PlanMicroBatch tiny;
  tiny.lengths = {128};
  ModelShape small = model("gpt_1.7b");  // GPT-2-small width: 768, 12 heads
  small.hidden = 768;
  small.heads = small.kv_heads = 12;
  small.ffn_hidden = 4 * 768;
  const OpList ops = lower_layer(cost, small, layout, tiny).forward;
  const RepeatedPass p = price_repeated(cost, ops);
  // In steady state each further layer costs what the host needs to issue its kernels and run
  // its five module calls (QKV, attention, projection, FC1, FC2).
  const double module_s = cost.params().host_module_us * 1e-6;
  EXPECT_NEAR(p.next.total(), p.next.kernels * cost.params().host_op_us * 1e-6 + 5 * module_s, 1e-9);
  EXPECT_GT(p.next.host_s, 0);
  // A long micro-batch: the host runs ahead; only the start waits for it — the first kernel's
  // issue, and the QKV module's call beyond the first norm.
  PlanMicroBatch big;
  big.lengths = {8192};
  const RepeatedPass q = price_repeated(cost, lower_layer(cost, model("llama2_7b"), layout, big).forward);
  EXPECT_NEAR(q.next.host_s, 0, 1e-15);  // 0 up to the rounding of two engine runs
  EXPECT_GE(q.first.host_s, cost.params().host_op_us * 1e-6 - 1e-15);
  EXPECT_LE(q.first.host_s, 2 * cost.params().host_op_us * 1e-6 + module_s + 1e-15);
  // Copies add up: n layers = first + (n − 1) · next.
  EXPECT_NEAR(q.times(4).total(), q.first.total() + 3 * q.next.total(), 1e-12);
  EXPECT_NEAR(price_ops(cost, ops, 3).total(), p.first.total() + 2 * p.next.total(), 1e-12);
}

// A framework module's forward call costs the host its Python once, beyond its kernels' launches
// (host_module_us: 32 µs for TransformerEngine's modules of 2025): five calls a layer, a full
// recompute's forward again, a selective recompute's core attention, none in the backward, one
// for the embedding. It makes a small micro-batch's forward host-bound and leaves a large one's
// as it was, past the start.
TEST(LayerOps, ModuleCallsMakeASmallModelsForwardHostBound) {
  const CostModel te = preset_model("h100_dgx");
  ASSERT_GT(te.params().host_module_us, 10);
  EfficiencyParams without = te.params();
  without.host_module_us = 0;
  const CostModel bare(te.cluster(), without);
  const ModelShape m = model("llama2_7b");
  ParallelConfig layout;
  PlanMicroBatch mb;
  mb.lengths = {128};
  auto calls = [](const OpList& ops) { return std::count_if(ops.begin(), ops.end(), [](const LayerOp& op) { return op.module_call; }); };
  const LayerOps plain = lower_layer(te, m, layout, mb);
  EXPECT_EQ(calls(plain.forward), 5);
  EXPECT_EQ(calls(plain.backward), 0);
  ParallelConfig full = layout;
  full.recompute = "full";
  EXPECT_EQ(calls(lower_layer(te, m, full, mb).backward), 5);
  ParallelConfig selective = layout;
  selective.recompute = "selective";
  EXPECT_EQ(calls(lower_layer(te, m, selective, mb).backward), 1);
  EXPECT_EQ(calls(lower_embedding(te, m, layout, mb).forward), 1);
  EXPECT_EQ(calls(lower_output_layer(te, m, layout, mb).forward), 0);  // the host is ahead there
  // 128 tokens of a 7B layer: 0.17 ms of kernels, 0.21 ms for the host to launch them and make
  // its five module calls.
  const RepeatedPass slow = price_repeated(te, plain.forward), fast = price_repeated(bare, plain.forward);
  EXPECT_NEAR(slow.next.compute_s, fast.next.compute_s, 1e-12);
  EXPECT_NEAR(slow.next.total(), slow.next.kernels * te.params().host_op_us * 1e-6 + 5 * te.params().host_module_us * 1e-6,
              1e-9);
  EXPECT_GT(slow.next.total(), 1.2 * fast.next.total());
  // 16K tokens: the kernels take far longer than the calls; only the start waits.
  mb.lengths = {16384};
  const OpList big = lower_layer(te, m, layout, mb).forward;
  const RepeatedPass a = price_repeated(te, big), b = price_repeated(bare, big);
  EXPECT_NEAR(a.next.total(), b.next.total(), 1e-12);
  EXPECT_LT(a.times(32).total(), 1.01 * b.times(32).total());
}

// TransformerEngine's ring-exchange overlap (tp_comm_overlap): the same bytes on the wire, the SP
// all-gathers and reduce-scatters pipelined with tp chunks of their GEMMs, so most of the TP
// communication hides; the price is smaller GEMMs, more launches and contention.
TEST(LayerOps, TpCommOverlapHidesTheSpCollectivesBehindChunkedGemms) {
  const CostModel cost = preset_model("h100_dgx");
  const ModelShape m = model("gpt3_175b");
  ParallelConfig layout;
  layout.num_gpus = 8;
  layout.tp = 8;
  layout.sequence_parallel = true;
  PlanMicroBatch mb;
  mb.lengths = {8192};
  const LayerCost blocking = layer_cost(cost, m, layout, mb);
  layout.tp_comm_overlap = true;
  const LayerCost overlapped = layer_cost(cost, m, layout, mb);
  for (auto [b, o] : {std::pair{blocking.forward, overlapped.forward}, std::pair{blocking.backward, overlapped.backward}}) {
    EXPECT_NEAR(o.tp_bytes.nvlink, b.tp_bytes.nvlink, 1e-6 * b.tp_bytes.nvlink);  // ring volumes either way
    EXPECT_LT(o.tp_comm_s, 0.5 * b.tp_comm_s);
    EXPECT_GE(o.compute_s, b.compute_s);  // chunked GEMMs and contention cost compute time
    EXPECT_LT(o.total(), b.total());
    EXPECT_GT(o.kernels, b.kernels);
  }
  const OpList ops = lower_layer(cost, m, layout, mb).forward;
  EXPECT_EQ(std::count_if(ops.begin(), ops.end(), [](const LayerOp& op) { return op.name.rfind("qkv chunk", 0) == 0; }), 8);
  // Without sequence parallelism the switch is a configuration error, not a silent no-op.
  layout.sequence_parallel = false;
  EXPECT_NE(check_parallel_config(layout), "");
}

// Kwai's TP overlap (seed 002: TP communication "split into dependent and independent parts;
// independent parts are overlapped using multiple CUDA streams, while dependent parts use
// split-pipeline overlap"), as the backward lowers it with tp_comm_overlap: the collectives a GEMM
// waits for (the dgrad's reduce-scatter, the output gradient's all-gather) become ring steps
// pipelined with chunk GEMMs; the re-gather of a weight gradient's input, which only the wgrad
// reads, stays one collective on the tp stream that no dgrad waits for.
TEST(LayerOps, TpCommOverlapPipelinesTheDependentCollectivesAndRunsTheIndependentOnesBeside) {
  const CostModel cost = preset_model("h100_dgx");
  ParallelConfig layout;
  layout.num_gpus = 8;
  layout.tp = 8;
  layout.sequence_parallel = true;
  layout.tp_comm_overlap = true;
  PlanMicroBatch mb;
  mb.lengths = {8192};
  const OpList bw = lower_layer(cost, model("gpt3_175b"), layout, mb).backward;
  std::vector<int> independent;
  int ring_steps = 0;
  for (size_t i = 0; i < bw.size(); ++i) {
    if (bw[i].stream != OpStream::tp) continue;
    if (bw[i].name == "tp all-gather (wgrad input)") independent.push_back(static_cast<int>(i));
    else if (bw[i].name.find("ring") != std::string::npos) ++ring_steps;
    else ADD_FAILURE() << "a blocking TP collective in the overlapped backward: " << bw[i].name;
  }
  EXPECT_EQ(independent.size(), 2u);  // QKV's and FC1's inputs
  EXPECT_EQ(ring_steps, 4 * (8 - 1));  // fc2 and proj dgrad all-gathers, fc1 and qkv dgrad reduce-scatters
  for (size_t i = 0; i < bw.size(); ++i)
    for (int d : bw[i].deps)
      if (std::find(independent.begin(), independent.end(), d) != independent.end())
        EXPECT_NE(bw[i].name.find("wgrad"), std::string::npos) << bw[i].name << " waits for an independent gather";
  // Beside the dgrad chunks the gathers hide: the backward's exposed TP time is under a tenth of
  // its TP collectives' time.
  const PassCost p = price_ops(cost, bw);
  EXPECT_LT(p.tp_comm_s, 0.1 * sum(bw, OpStream::tp));
}

TEST(LayerOps, CpCommOverlapHidesTheKvAllGatherBehindTheQGemmAndTheDkvReturnBehindTheQBackward) {
  const CostModel cost = preset_model("h100_dgx");
  const ModelShape m = model("gpt3_175b");
  ParallelConfig layout;
  layout.num_gpus = 16;
  layout.tp = 8;
  layout.cp = 2;
  layout.sequence_parallel = true;
  layout.cp_comm_type = "all_gather";
  PlanMicroBatch mb;
  mb.lengths = {32768};
  mb.cp = 2;
  const int64_t rows = 16384, q_cols = m.hidden / 8;
  const double q_s = cost.gemm_s(rows, q_cols, m.hidden);
  // The Q columns' backward: dX = dY·Wᵀ [rows, hidden] and dW = Xᵀ·dY [hidden, q_cols].
  const double q_bwd_s = cost.gemm_s(rows, m.hidden, q_cols) + cost.gemm_s(m.hidden, q_cols, rows);
  // The attention plan's forward waits 3 Q-GEMMs' time, then a wait shorter than one Q GEMM; its
  // backward the same, all of it after its last kernel (dK/dV on their way home).
  for (double wait : {3 * q_s, 0.5 * q_s}) {
    const AttentionCost attn{20 * q_s, wait, 40 * q_s, wait, wait};
    layout.cp_comm_overlap = false;
    const LayerOps plain_ops = lower_layer(cost, m, layout, mb, &attn);
    const PassCost plain = price_ops(cost, plain_ops.forward);
    const PassCost plain_bwd = price_ops(cost, plain_ops.backward);
    layout.cp_comm_overlap = true;
    const LayerOps ops = lower_layer(cost, m, layout, mb, &attn);
    const PassCost overlapped = price_ops(cost, ops.forward);
    const PassCost overlapped_bwd = price_ops(cost, ops.backward);
    EXPECT_NEAR(plain.cp_wait_s, wait, 1e-9);
    // The Q GEMM hides its own time of the wait, no more; the K/V and Q GEMMs cost what QKV did
    // (within the split's shape effect), so the pass gets shorter by the hidden part.
    EXPECT_NEAR(overlapped.cp_wait_s, std::max(0.0, wait - q_s), 0.02 * wait);
    EXPECT_NEAR(overlapped.compute_s, plain.compute_s, 0.02 * plain.compute_s);
    EXPECT_LT(overlapped.total(), plain.total());
    // Backward: without the switch the whole wait is exposed — the return follows the attention's
    // kernels, and nothing before them (the projection's weight gradient) can hide a stall of the
    // attention plan. With it, the Q columns' dgrad and wgrad run while dK/dV go home: at least
    // their time of the wait hides (more where the re-gathered wgrad input delays the Q wgrad).
    EXPECT_NEAR(plain_bwd.cp_wait_s, wait, 1e-9);
    const AttentionCost stalls_between_kernels{20 * q_s, wait, 40 * q_s, wait, 0.0};
    layout.cp_comm_overlap = false;
    EXPECT_NEAR(price_ops(cost, lower_layer(cost, m, layout, mb, &stalls_between_kernels).backward).cp_wait_s, wait, 1e-9);
    layout.cp_comm_overlap = true;
    EXPECT_LE(overlapped_bwd.cp_wait_s, std::max(0.0, wait - q_bwd_s) + 1e-9);
    EXPECT_LT(overlapped_bwd.cp_wait_s, plain_bwd.cp_wait_s);
    EXPECT_NEAR(overlapped_bwd.compute_s, plain_bwd.compute_s, 0.02 * plain_bwd.compute_s);
    EXPECT_LT(overlapped_bwd.total(), plain_bwd.total());
    EXPECT_NEAR(overlapped_bwd.tp_bytes.nvlink, plain_bwd.tp_bytes.nvlink, 1e-6 * plain_bwd.tp_bytes.nvlink);  // dX reduced once
    for (const char* name : {"qkv (q) dgrad", "qkv (q) wgrad", "qkv (k, v) dgrad", "qkv (k, v) wgrad"})
      EXPECT_EQ(std::count_if(ops.backward.begin(), ops.backward.end(), [&](const LayerOp& op) { return op.name == name; }), 1)
          << name;
    EXPECT_EQ(std::count_if(ops.forward.begin(), ops.forward.end(), [](const LayerOp& op) { return op.name == "qkv (q)"; }), 1);
  }
  // Another CP communication type is a configuration error, not a silent no-op.
  layout.cp_comm_type = "p2p";
  EXPECT_NE(check_parallel_config(layout), "");
}

TEST(LayerOps, RecomputationRunsTheForwardAgainBeforeTheBackward) {
  const CostModel cost = preset_model("a100_80gb_dgx");
  ParallelConfig layout;
  layout.num_gpus = 2;
  layout.tp = 2;
  PlanMicroBatch mb;
  mb.lengths = {2048};
  const ModelShape m = model("gpt_18.4b");
  const LayerCost none = layer_cost(cost, m, layout, mb);
  layout.recompute = "full";
  const LayerCost full = layer_cost(cost, m, layout, mb);
  EXPECT_NEAR(full.backward.compute_s - none.backward.compute_s, none.forward.compute_s, 1e-12);
  EXPECT_NEAR(full.backward.tp_comm_s - none.backward.tp_comm_s, none.forward.tp_comm_s, 1e-12);
  layout.recompute = "selective";
  const OpList selective = lower_layer(cost, m, layout, mb).backward;
  const auto it = std::find_if(selective.begin(), selective.end(),
                               [](const LayerOp& op) { return op.name == "recompute attention"; });
  ASSERT_NE(it, selective.end());
  EXPECT_EQ(std::next(it)->name, "attention bwd");  // right before the core's backward

  // Balanced (Kwai's GEMM-last): only the element-wise outputs a weight gradient reads come back
  // — the MLP activation and the two norms, each a forward pass of its kernel — no GEMM, no
  // attention; the backward grows by exactly their forward time.
  layout.recompute = "balanced";
  const OpList balanced = lower_layer(cost, m, layout, mb).backward;
  const OpList forward = lower_layer(cost, m, layout, mb).forward;
  double recomputed = 0, want = 0;
  std::vector<std::string> names;
  for (const LayerOp& op : balanced)
    if (op.name.rfind("recompute ", 0) == 0) names.push_back(op.name), recomputed += op.duration_s;
  for (const LayerOp& op : forward)
    if (op.name == "activation" || op.name == "norm1" || op.name == "norm2") want += op.duration_s;
  EXPECT_EQ(names, (std::vector<std::string>{"recompute activation", "recompute norm2", "recompute norm1"}));
  EXPECT_NEAR(recomputed, want, 1e-12);
  EXPECT_NEAR(layer_cost(cost, m, layout, mb).backward.compute_s - none.backward.compute_s, want, 1e-12);
}

}  // namespace
}  // namespace cpbench
