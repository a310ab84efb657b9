// memory_test.cpp — memory along the schedule against the published oracles: Megatron's
// theoretical activation memory (megatron/training/theoretical_memory_usage.py: per layer
// 18·sbh + 4·sb·H with SP and selective recompute, L layers in flight on the first stage under
// 1F1B, times min(1, m/p) when fewer micro-batches than stages, times 1 + (p−1)/(p·v) when
// interleaved) on a GPT, and the architecture-general per-layer count on a Llama (GQA, SwiGLU,
// no dropout, flash). Megatron's small embedding-input terms are not modelled.
#include "core/sim/memory.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/experiment/registry.h"
#include "core/model/formulas.h"
#include "core/sim/allocator_replay.h"
#include "core/sim/deepspeed_zero3.h"

namespace cpbench {
namespace {

ModelShape preset(const std::string& name) { return *load_model(default_experiments_dir() / "models" / (name + ".json")); }

// A PTD-P plan: dp = 1, m micro-batches of one sequence of `length` tokens.
Plan ptdp_plan(int64_t pp, int64_t vp, int64_t m, int64_t length, int64_t tp = 8) {
  Plan plan;
  plan.layout.num_gpus = tp * pp;
  plan.layout.tp = tp;
  plan.layout.pp = pp;
  plan.layout.vp = vp;
  plan.layout.sequence_parallel = true;
  plan.layout.recompute = "selective";
  plan.layout.attention_kernel = "unfused";
  plan.pipeline_schedule = vp > 1 ? "interleaved" : "1f1b";
  plan.micro_batches.assign(1, std::vector<PlanMicroBatch>(m, PlanMicroBatch{{length}, 1, -1, 1}));
  return plan;
}

// One TP rank (t = 1, no SP), flash attention, full recompute: m micro-batches of `length` on pp stages.
Plan flash_full_plan(int64_t pp, int64_t m, int64_t length) {
  Plan plan = ptdp_plan(pp, 1, m, length, 1);
  plan.layout.sequence_parallel = false;
  plan.layout.attention_kernel = "flash";
  plan.layout.recompute = "full";
  return plan;
}

TEST(MemoryTimeline, GptMatchesMegatronTheoreticalActivationMemory) {
  const ModelShape gpt = preset("gpt_39.1b");  // 48 layers, h 8192
  const double s = 2048, h = static_cast<double>(gpt.hidden), H = static_cast<double>(gpt.ffn_hidden), t = 8;
  const double per_layer = (18 * s * h + 4 * s * H) / t;  // Megatron, SP + selective recompute
  const double L = static_cast<double>(gpt.layers);
  auto activations = [&](int64_t pp, int64_t vp, int64_t m) {
    return estimate_memory(gpt, ptdp_plan(pp, vp, m, 2048), {}).activation_bytes;
  };
  // 1F1B: the first stage holds p micro-batches of L/p layers; fewer when m < p.
  EXPECT_DOUBLE_EQ(activations(4, 1, 16), L * per_layer);
  EXPECT_DOUBLE_EQ(activations(4, 1, 2), L * per_layer * 2.0 / 4);
  // Interleaved: 1 + (p−1)/(p·v), whatever the number of micro-batches (the batch size).
  for (auto [p, v] : {std::pair<int64_t, int64_t>{4, 2}, {4, 3}, {2, 4}}) {
    const double penalty = 1 + static_cast<double>(p - 1) / static_cast<double>(p * v);
    for (int64_t m : {2 * p, 8 * p})
      EXPECT_NEAR(activations(p, v, m), L * per_layer * penalty, 1e-9 * L * per_layer) << p << " " << v << " m " << m;
  }
  // The peak is on the first stage, which keeps the most in flight.
  EXPECT_EQ(estimate_memory(gpt, ptdp_plan(4, 2, 16, 2048), {}).stage, 0);
}

TEST(MemoryTimeline, TheLastStageHoldsTheLossSoftmaxFromItsForwardToItsBackward) {
  // Megatron's vocabulary-parallel cross-entropy keeps the logits' fp32 copy (4 bytes per token
  // and entry of the TP rank's vocabulary shard) for the backward, beside the 16-bit logits (2
  // bytes) while the loss's forward runs, and beside their 16-bit gradient in its backward; the
  // other stages hold neither. Two vocabularies, everything else equal: the last stage's peak
  // differs by exactly 6 bytes per token and entry of the difference, the first stage's not at all.
  const ModelShape big = preset("llama3_8b");  // vocabulary 128,256
  ModelShape small = big;
  small.vocab = 32000;
  Plan plan = ptdp_plan(2, 1, 4, 8192, 2);
  plan.layout.attention_kernel = "flash";
  plan.layout.recompute = "full";
  const auto schedule = pipeline_schedule("1f1b", 2, 4, 1);
  auto peak = [&](const ModelShape& m, int stage) {
    const StageMemory sm = stage_activation_memory(m, plan.layout, plan.micro_batches[0], *schedule, stage);
    return sm.peak + sm.peak_workspace;
  };
  EXPECT_DOUBLE_EQ(peak(big, 0), peak(small, 0));
  const double expected = 6.0 * 8192 * (128256 - 32000) / 2;
  EXPECT_NEAR(peak(big, 1) - peak(small, 1), expected, 1e-9 * expected);
  // Between a forward and its backward the softmax is held: after each forward op, 4 bytes per
  // token and entry more than without a loss.
  const StageMemory last = stage_activation_memory(big, plan.layout, plan.micro_batches[0], *schedule, 1);
  const StageMemory last_small = stage_activation_memory(small, plan.layout, plan.micro_batches[0], *schedule, 1);
  for (size_t i = 0; i < (*schedule)[1].size(); ++i)
    EXPECT_NEAR(last.after_op[i] - last_small.after_op[i], (*schedule)[1][i].forward ? 4.0 * 8192 * (128256 - 32000) / 2 : 0,
                1e-6 * 4.0 * 8192 * (128256 - 32000) / 2) << "op " << i;
}

TEST(MemoryTimeline, TorchsCrossEntropyPeaksWithItsFp32GradientsBesideItsLogSoftmax) {
  // cross_entropy(logits.float()) keeps log_softmax's fp32 output (4 bytes per logit, as Megatron
  // keeps its softmax) but peaks higher: beside it the 16-bit logits and their fp32 copy in the
  // forward (6), nll_loss's and log_softmax's fp32 gradients in the backward (8, Megatron's 2).
  // One stage, t = 1: the peak is a backward's, exactly 6 bytes per logit above Megatron's; what is
  // held between ops is the same.
  const ModelShape m = preset("llama3_8b");
  Plan plan = flash_full_plan(1, 2, 8192);
  const auto schedule = pipeline_schedule("1f1b", 1, 2, 1);
  const StageMemory megatron = stage_activation_memory(m, plan.layout, plan.micro_batches[0], *schedule, 0);
  plan.layout.loss = "torch";
  const StageMemory torch = stage_activation_memory(m, plan.layout, plan.micro_batches[0], *schedule, 0);
  const double logits = 8192.0 * 128256;
  EXPECT_NEAR(torch.peak + torch.peak_workspace - (megatron.peak + megatron.peak_workspace), 6 * logits, 1e-9 * logits);
  ASSERT_EQ(torch.after_op.size(), megatron.after_op.size());
  for (size_t i = 0; i < torch.after_op.size(); ++i) EXPECT_DOUBLE_EQ(torch.after_op[i], megatron.after_op[i]) << "op " << i;
}

TEST(MemoryTimeline, TheFirstStageEndsItsBackwardWithTheEmbeddingsDenseGradient) {
  // A table of V × h in 16 bits, zero-filled and made whole for the moment the hook adds it into
  // main_grad: with one layer a stage and 1K-token micro-batches it is the first stage's peak, so
  // two vocabularies differ there by exactly 2 bytes per entry and hidden unit; the last stage has
  // no embedding (its loss makes the vocabularies differ there by the loss's bytes instead). The
  // allocator replay needs at least what the walk counts.
  ModelShape big = preset("llama3_8b");  // vocabulary 128,256, h 4096
  big.layers = 2;
  ModelShape small = big;
  small.vocab = 64000;
  Plan plan = flash_full_plan(2, 4, 1024);
  const auto schedule = pipeline_schedule("1f1b", 2, 4, 1);
  auto peak = [&](const ModelShape& m) {
    const StageMemory sm = stage_activation_memory(m, plan.layout, plan.micro_batches[0], *schedule, 0);
    return sm.peak + sm.peak_workspace;
  };
  const double expected = 2.0 * (128256 - 64000) * 4096;
  EXPECT_NEAR(peak(big) - peak(small), expected, 1e-9 * expected);
  const AllocatorReplay replay = replay_stage_allocations(big, plan.layout, plan.micro_batches[0], *schedule, 0, false, 1e30);
  EXPECT_GE(replay.peak_requested, peak(big));
  // One stage holds the embedding and the loss: by the table's moment the loss's kept tensor is
  // freed too, so the walk counts no more than the replay allocates.
  const Plan one = flash_full_plan(1, 2, 512);
  const auto single = pipeline_schedule("1f1b", 1, 2, 1);
  const StageMemory walk = stage_activation_memory(big, one.layout, one.micro_batches[0], *single, 0);
  const AllocatorReplay whole = replay_stage_allocations(big, one.layout, one.micro_batches[0], *single, 0, false, 1e30);
  EXPECT_GE(whole.peak_requested, walk.peak + walk.peak_workspace);
}

TEST(MemoryTimeline, LlamaUsesItsOwnArchitecture) {
  const ModelShape llama = preset("llama2_13b");  // 40 layers, SwiGLU, no dropout
  Plan plan = ptdp_plan(4, 2, 16, 4096, 4);
  plan.layout.attention_kernel = "flash";
  plan.layout.recompute = "none";
  // By hand (SP: everything over t = 4; s = 4096, h = 5120, a = g = 40, H = 13824): norms and
  // their outputs 8sbh, Q K V O 8sbh, fused SwiGLU's input and output 6·sbH, fp32 LSE 4·s·a.
  const double s = 4096, h = 5120, H = 13824, a = 40, t = 4;
  const double per_layer = (16 * s * h + 6 * s * H + 4 * s * a) / t;
  const MemoryEstimate e = estimate_memory(llama, plan, {});
  EXPECT_NEAR(e.activation_bytes, 40 * per_layer * (1 + 3.0 / 8), 1e-9 * e.activation_bytes);
  EXPECT_EQ(e.workspace_bytes, 0);  // nothing is recomputed
  // GQA shrinks K and V: Llama-3-8B (g/a = 1/4) keeps 2·2sbh·(1 − 1/4) less than an MHA twin.
  ModelShape gqa = preset("llama3_8b"), mha = gqa;
  mha.kv_heads = mha.heads;
  Plan p8 = ptdp_plan(4, 1, 4, 4096, 4);
  p8.layout.attention_kernel = "flash";
  p8.layout.recompute = "none";
  const double saved = estimate_memory(mha, p8, {}).activation_bytes - estimate_memory(gqa, p8, {}).activation_bytes;
  EXPECT_NEAR(saved, gqa.layers * 4 * 4096.0 * gqa.hidden * 0.75 / 4, 1e-6 * saved);
}

TEST(MemoryTimeline, OverheadsAndShardingAddUp) {
  const ModelShape gpt = preset("gpt_39.1b");
  Plan plan = ptdp_plan(4, 1, 16, 2048);
  MemoryOverheads over{2.0, AllocatorModel::flat_share, 0.25};
  const MemoryEstimate e = estimate_memory(gpt, plan, over);
  EXPECT_DOUBLE_EQ(e.reserved_bytes, 2.0 * 1024 * 1024 * 1024);
  EXPECT_NEAR(e.fragmentation_bytes, (e.activation_bytes + e.workspace_bytes) / 3, 1e-6 * e.fragmentation_bytes);
  // Selective recompute rebuilds one layer's unfused scores, 5as²b/t, while its backward runs.
  EXPECT_NEAR(e.workspace_bytes, 5.0 * gpt.heads * 2048 * 2048 / 8, 1e-6 * e.workspace_bytes);
  // Weights, gradients and Adam: 18 bytes per parameter of the stage, or 6 + 12/d sharded over d.
  const double params = params_per_gpu(gpt, plan.layout, 2048, e.stage);
  EXPECT_DOUBLE_EQ(e.weights_optimizer_bytes, 18 * params);
  plan.layout.num_gpus *= 4;  // dp 4
  plan.layout.distributed_optimizer = true;
  plan.micro_batches.assign(4, plan.micro_batches.front());
  EXPECT_DOUBLE_EQ(estimate_memory(gpt, plan, over).weights_optimizer_bytes, (6 + 12.0 / 4) * params);
  // bf16 gradient buckets (grad_reduce_in_fp32 off: Megatron's --grad-reduce-in-bf16, NeMo's bf16
  // buckets): a 2-byte main gradient, the master weights' fp32 gradient sharded with the optimizer.
  plan.layout.grad_reduce_in_fp32 = false;
  EXPECT_DOUBLE_EQ(estimate_memory(gpt, plan, over).weights_optimizer_bytes, (4 + 16.0 / 4) * params);
}

// DeepSpeed's stage 3 holds what its coordinator gathered (deepspeed_zero3.h), not two layers.
// Layers far under stage3_max_live_parameters (1.7B: 64M elements): each module's prefetch adds
// up to 50M, faster than the layers are consumed, so the gathered set climbs to the 1e9 limit
// (overshooting by at most one tensor), 17 layers where FSDP holds 2. A layer over the limit
// (GPT-3 175B at t = 1: 1.8B, FC1 and FC2 604M each) is never whole: at most the limit and one
// tensor, and at least FC1 with FC2 prefetched beside it. Norms and biases (under 1e5 elements)
// are resident; the reduce bucket (5e8 16-bit elements) is allocated whatever the model.
TEST(MemoryTimeline, DeepSpeedHoldsWhatItsCoordinatorGathered) {
  ParallelConfig L;
  L.num_gpus = 8;
  L.zero3 = true;
  L.zero3_sharding = "deepspeed";
  const ModelShape small = preset("gpt_1.7b");
  const DeepSpeedGathered s = deepspeed_gathered(small, L, 2048);
  const double h = static_cast<double>(small.hidden), layer = param_count(small, 2048).per_layer;
  EXPECT_DOUBLE_EQ(s.largest, static_cast<double>(small.vocab) * h);  // the (tied) embedding
  // Per layer two LayerNorms (2h each) and the biases of QKV (3h), the projection (h), FC1 (4h)
  // and FC2 (h); the final LayerNorm.
  EXPECT_DOUBLE_EQ(s.persistent, static_cast<double>(small.layers) * 13 * h + 2 * h);
  EXPECT_GT(s.peak, deepspeed::kMaxLiveParameters - s.largest);
  EXPECT_LE(s.peak, deepspeed::kMaxLiveParameters + s.largest);
  EXPECT_GT(s.peak, 10 * layer);
  // The last layers are held across the turn (their backward entries are popped while they are
  // still gathered), within the peak; the first ones are released and gathered again.
  EXPECT_GT(s.layers_kept, 1);
  EXPECT_LT(s.layers_kept, small.layers);
  EXPECT_LE(static_cast<double>(s.layers_kept) * (layer - 13 * h), s.peak);

  const ModelShape big = preset("gpt3_175b");
  const DeepSpeedGathered b = deepspeed_gathered(big, L, 2048);
  const double H = static_cast<double>(big.hidden);
  EXPECT_DOUBLE_EQ(b.largest, static_cast<double>(big.vocab) * H);
  EXPECT_LE(b.peak, deepspeed::kMaxLiveParameters + b.largest);
  EXPECT_GE(b.peak, 2 * 4 * H * H);  // FC1 with FC2
  EXPECT_LT(b.peak, param_count(big, 2048).per_layer);
  EXPECT_EQ(b.layers_kept, 0);  // the output layer's 629M twice over the turn: past the reuse distance
  EXPECT_DOUBLE_EQ(b.layer_partitioned, param_count(big, 2048).per_layer - 13 * H);
  // Copied into the reduce bucket: the tensors smaller than it — all of the 1.7B layer's, the
  // 175B layer's but FC1's and FC2's weights (4h² = 604M each); after the last layer's backward
  // the position table, not the 629M word table (the final norm's came before the layers').
  EXPECT_DOUBLE_EQ(s.layer_bucket_copied, layer);
  EXPECT_DOUBLE_EQ(b.layer_bucket_copied, param_count(big, 2048).per_layer - 2 * 4 * H * H);
  EXPECT_DOUBLE_EQ(b.copied_at_end, param_count(big, 2048).position);
  EXPECT_GT(b.reduced_at_end, static_cast<double>(big.vocab) * H);
  // The modules outside the layers, in every micro-batch: the word and position tables for the
  // embedding's forward; the tied word table again for the output layer (released over the
  // layers, past the reuse distance), kept into its backward, which follows; both tables again
  // for the embedding's backward. Those of the 1.7B model the same way (its layers, 1.6e9
  // elements, pass the reuse distance too).
  for (const auto& [shape, g] : {std::pair{&small, &s}, std::pair{&big, &b}}) {
    const double word = static_cast<double>(shape->vocab) * static_cast<double>(shape->hidden);
    const double tables = word + param_count(*shape, 2048).position;
    EXPECT_DOUBLE_EQ(g->embedding_forward, tables) << shape->name;
    EXPECT_DOUBLE_EQ(g->output_forward, word) << shape->name;
    EXPECT_DOUBLE_EQ(g->output_backward, 0) << shape->name;
    EXPECT_DOUBLE_EQ(g->embedding_backward, tables) << shape->name;
  }
  // Untied, with rotary positions (Llama 2 7B): the word table for the embedding's forward and
  // backward, the output layer's own weight once, kept from its forward into its backward.
  const ModelShape llama = preset("llama2_7b");
  const DeepSpeedGathered u = deepspeed_gathered(llama, L, 4096);
  const double table = static_cast<double>(llama.vocab) * static_cast<double>(llama.hidden);
  EXPECT_DOUBLE_EQ(u.embedding_forward, table);
  EXPECT_DOUBLE_EQ(u.output_forward, table);
  EXPECT_DOUBLE_EQ(u.output_backward, 0);
  EXPECT_DOUBLE_EQ(u.embedding_backward, table);

  // Under full recomputation the trace runs each layer's forward again before its backward. 1.7B:
  // a layer's tensors stay gathered from the recomputation to their backward (within the reuse
  // distance), so each released layer is gathered once more, as before, and the peak is the
  // same. 175B: after the recomputation the modules run next (FC2, then FC2's backward: 1.2e9)
  // pass the reuse distance before the backward of FC1, the projection and QKV, and the prefetch
  // stopped at FC2 (the live limit): those three are gathered a third time.
  L.recompute = "full";
  const DeepSpeedGathered sr = deepspeed_gathered(small, L, 2048);
  EXPECT_DOUBLE_EQ(sr.peak, s.peak);
  for (size_t l = 0; l < sr.backward_gathered.size(); ++l)
    EXPECT_TRUE(sr.backward_gathered[l] == 0 || sr.backward_gathered[l] == sr.layer_partitioned) << l;
  const DeepSpeedGathered br = deepspeed_gathered(big, L, 2048);
  for (double g : br.backward_gathered) EXPECT_DOUBLE_EQ(g, 2 * br.layer_partitioned - 4 * H * H);  // FC2: h x 4h
  L.recompute = "none";

  // The gradients' reduce buckets (5e8 elements): the tied embedding's gradient arrives last; a
  // bucket it would overflow is flushed first, so what each backward's epilogue waits for is the
  // embedding and what the last layers left in the bucket, under one bucket of it.
  const double v_h = static_cast<double>(small.vocab) * h, v_H = static_cast<double>(big.vocab) * H;
  EXPECT_GT(s.reduced_at_end, v_h);
  EXPECT_LE(s.reduced_at_end, v_h + 5e8);
  EXPECT_GT(b.reduced_at_end, v_H);  // 629M: a bucket of its own
  EXPECT_LE(b.reduced_at_end, v_H + 5e8);

  // In the memory walk: the sharded state, the coordinator's peak and the persistent tensors in
  // 16 bits, the reduce bucket and one tensor's gradient.
  Plan plan;
  plan.layout = L;
  plan.micro_batches.assign(8, std::vector<PlanMicroBatch>(1, PlanMicroBatch{{2048}, 1, -1, 1}));
  const double params = params_per_gpu(small, L, 2048, 0);
  EXPECT_NEAR(stage_weight_bytes(small, plan, 0),
              (2 + L.grad_bytes() + 12) * params / 8 + 2 * (s.peak + s.persistent) + 2 * (5e8 + s.largest),
              1e-9 * params);
  // FSDP's flat units on the same model: two gathered layers and one layer's gradients, and the
  // root unit (the parameters outside the layers) gathered beside its whole flat gradient.
  plan.layout.zero3_sharding = "flat";
  const double root = params - static_cast<double>(small.layers) * layer;
  EXPECT_NEAR(stage_weight_bytes(small, plan, 0),
              (2 + L.grad_bytes() + 12) * params / 8 + (4 + L.grad_bytes()) * layer + (2 + L.grad_bytes()) * root,
              1e-9 * params);
  // Not DeepSpeed, or nothing to shard: no coordinator.
  EXPECT_EQ(deepspeed_gathered(small, plan.layout, 2048).peak, 0);
  L.num_gpus = 1;
  EXPECT_EQ(deepspeed_gathered(small, L, 2048).peak, 0);
}

// DeepSpeed of 2021 (deepspeed_2021): the coordinator prefetches only with nothing in flight, and a
// module whose tensors are not there waits for the device. The walk (deepspeed_synchronous_times)
// on made-up costs: without collectives it is the modules' kernels back to back; without
// kernels every gather is serial (each waited for before the next module, or issued after a
// device synchronization); with both it is never shorter than either.
TEST(MemoryTimeline, DeepSpeed2021WaitsForEveryGatherBeforeTheNextModule) {
  ParallelConfig L;
  L.num_gpus = 8;
  L.zero3 = true;
  L.zero3_sharding = "deepspeed_2021";
  L.recompute = "full";
  for (const char* name : {"gpt_1.7b", "gpt3_175b"}) {
    const ModelShape m = preset(name);
    const DeepSpeedGathered g = deepspeed_gathered(m, L, 2048);
    double gathers = 0, modules = 0, flushed = 0;
    bool in_flight = false;
    for (const DeepSpeedStep& step : g.steps) {
      if (step.synchronized) in_flight = false;
      if (!step.prefetched.empty()) {
        EXPECT_FALSE(in_flight) << name << ": a prefetch while another is in flight";
        in_flight = true;
      }
      EXPECT_TRUE(step.fetched.empty() || step.synchronized) << name;
      for (const auto& bucket : step.flushed)
        for (double t : bucket) flushed += t;
      for (const auto* list : {&step.fetched, &step.prefetched})
        for (double t : *list) gathers += t;
      modules += 1;
    }
    DeepSpeedSyncCosts c;
    c.compute_s = [](const DeepSpeedStep&) { return 1.0; };
    c.gather_s = [](double) { return 0.0; };
    c.reduce_scatter_s = [](double) { return 0.0; };
    const DeepSpeedSyncTimes kernels = deepspeed_synchronous_times(g, c);
    EXPECT_DOUBLE_EQ(kernels.forward_s + kernels.backward_s, modules) << name;
    c.compute_s = [](const DeepSpeedStep&) { return 0.0; };
    c.gather_s = [](double e) { return e * 1e-9; };
    const DeepSpeedSyncTimes comm = deepspeed_synchronous_times(g, c);
    EXPECT_NEAR(comm.forward_s + comm.backward_s, gathers * 1e-9, 1e-9) << name;
    EXPECT_GT(flushed, 0) << name;
    // Every gradient flushed once, the epilogue's bucket at the backward's last step.
    EXPECT_NEAR(flushed, param_count(m, 2048).total(), 1e-6 * param_count(m, 2048).total()) << name;
    ASSERT_FALSE(g.steps.back().flushed.empty()) << name;
    double epilogue = 0;
    for (double t : g.steps.back().flushed.back()) epilogue += t;
    EXPECT_DOUBLE_EQ(epilogue, g.last_bucket) << name;
  }

  // By hand, three steps (gather and reduce-scatter take 1 s per element, host issue 0.5 s):
  //   QKV (synchronizes): gathers its 1, prefetches 2 then 4 — the 2 before its 3 s of kernels are
  //       issued (host 1 → 3), the 4 beside them (in flight to 7); kernels 3.5 → 6.5;
  //   proj (the 4 in flight: synchronizes at 7): 1 s of kernels 7.5 → 8.5;
  //   FC1's backward (nothing to wait for): kernels 8.5 → 13.5 behind the stream; its gradient
  //       (2 elements, 0.25 s a copied element) copied in 13.5 → 14; the bucket it flushes (8)
  //       reduce-scattered from the host's 7 to 15, the step's end.
  DeepSpeedGathered hand;
  hand.steps.resize(3);
  hand.steps[0] = {0, LayerModule::qkv, OutsideModule::none, 'f', true, {1}, {2, 4}, {}, {}};
  hand.steps[1] = {0, LayerModule::proj, OutsideModule::none, 'f', true, {}, {}, {}, {}};
  hand.steps[2] = {0, LayerModule::fc1, OutsideModule::none, 'b', false, {}, {}, {2}, {{8}}};
  DeepSpeedSyncCosts c;
  c.compute_s = [](const DeepSpeedStep& step) { return step.module == LayerModule::qkv ? 3.0 : step.module == LayerModule::proj ? 1.0 : 5.0; };
  c.gather_s = [](double e) { return e; };
  c.reduce_scatter_s = [](double e) { return e; };
  c.host_s = 0.5;
  c.bucket_copy_s_per_element = 0.25;
  // Each collective's bytes counted where the walk issues it: the gathers (1 a gathered
  // element) in the forward, the bucket's reduce-scatter (10 an element) in the backward.
  c.sent_bytes = [](Collective kind, double e) {
    return LinkBytes{0, (kind == Collective::all_gather ? 1 : kind == Collective::reduce_scatter ? 10 : 100) * e};
  };
  DeepSpeedSyncTimes t = deepspeed_synchronous_times(hand, c);
  EXPECT_DOUBLE_EQ(t.forward_sent.network, 1 + 2 + 4);
  EXPECT_DOUBLE_EQ(t.backward_sent.network, 10 * 8);
  EXPECT_DOUBLE_EQ(t.forward_s, 8.5);
  EXPECT_DOUBLE_EQ(t.backward_s, 15 - 8.5);
  EXPECT_DOUBLE_EQ(t.forward_host_s, 1.0);
  EXPECT_DOUBLE_EQ(t.backward_host_s, 0.0);
  // Each forward module's call, 2 s of Python before its first kernel (host_module_us): QKV's
  // kernels issued at 3 + 2 + 0.5, 5.5 → 8.5; proj, after its wait (8.5), runs its 2.5: 11 → 12.
  c.module_call_s = [](const DeepSpeedStep& step) { return step.phase == 'f' ? 2.0 : 0.0; };
  t = deepspeed_synchronous_times(hand, c);
  EXPECT_DOUBLE_EQ(t.forward_s, 12);
  EXPECT_DOUBLE_EQ(t.forward_host_s, 5.0);
  c.module_call_s = nullptr;
  // A collective beside holding half the SMs: QKV's 3 s run beside the 3.5 s the 4 has left, at
  // half speed while it runs: 3 + 0.5 · min(3.5, 3 / 0.5) = 4.75, so to 8.25; proj waits for the
  // gather (7) and the kernels (8.25): 8.75 → 9.75.
  c.comm_sm_share = 0.5;
  t = deepspeed_synchronous_times(hand, c);
  EXPECT_DOUBLE_EQ(t.forward_contention_s, 1.75);
  EXPECT_DOUBLE_EQ(t.forward_s, 9.75);
  // The host busy 3 s issuing each collective (torch's per-rank copies), longer than the gathers
  // themselves: QKV's own gather done at 3, the 2 at 6, the 4 issued by 9 (done at 10); kernels
  // 9.5 → 12.5; proj waits for them: 13 → 14; FC1's backward 14 → 19, its copy to 19.5, its
  // bucket issued from 12.5 to 15.5 and done at 20.5.
  c.comm_sm_share = 0;
  c.issue_s = 3;
  t = deepspeed_synchronous_times(hand, c);
  EXPECT_DOUBLE_EQ(t.forward_s, 14);
  EXPECT_DOUBLE_EQ(t.backward_s, 20.5 - 14);
  // contiguous_gradients false (v0.3.12 to v0.4.2): no copy into the bucket; the bucket
  // flattened, all-reduced as one tensor and copied back, 2 s an element: issued from the host's
  // 7 (its three ops and one copy, 0.5 s each, to 9) and done at 7 + 16 = 23, the step's end. At
  // 0.5 s in all, FC1's kernels end the step at 13.5; a bucket of 30 tensors keeps the host
  // issuing (three ops and 30 copies) to 7 + 16.5 = 23.5.
  c.issue_s = 0;
  c.bucket_copy_s_per_element = 0;
  c.bucket_all_reduce_s = [](double e) { return 2 * e; };
  t = deepspeed_synchronous_times(hand, c);
  EXPECT_DOUBLE_EQ(t.backward_sent.network, 100 * 8);  // one all-reduce of the bucket, not its tensors' reduce-scatters
  EXPECT_DOUBLE_EQ(t.forward_s, 8.5);
  EXPECT_DOUBLE_EQ(t.backward_s, 23 - 8.5);
  c.bucket_all_reduce_s = [](double) { return 0.5; };
  t = deepspeed_synchronous_times(hand, c);
  EXPECT_DOUBLE_EQ(t.backward_s, 13.5 - 8.5);
  hand.steps[2].flushed = {std::vector<double>(30, 1.0)};
  t = deepspeed_synchronous_times(hand, c);
  EXPECT_DOUBLE_EQ(t.backward_s, 23.5 - 8.5);
}

// Offloading along the schedule, as Megatron-Kwai runs it (memory.h, offload_schedule). Hand count
// on 1F1B, stage 0, one chunk's bytes = x, p micro-batches in flight: a forward's bytes stay until
// the next forward ends (its copy runs meanwhile), and copies back land in two persistent buffers
// of α·x each. So in the steady state a forward meets (1 − α) of the p − 1 chunks held, α of the
// previous forward's, both buffers and its own: (p − 1)(1 − α)x + αx + 2αx + x = (p − (p − 4)α)·x.
// On 4 stages offloading saves nothing at stage 0; on 8 it halves the peak at α = 1.
TEST(MemoryTimeline, OffloadingFreesAlongTheScheduleAndAlphaZeroIsNone) {
  const ModelShape gpt = preset("gpt_39.1b");
  for (int64_t pp : {4, 8}) {
    Plan plan = ptdp_plan(pp, 1, 2 * pp, 2048);
    plan.layout.recompute = "none";
    plan.layout.attention_kernel = "flash";
    const double x = static_cast<double>(48 / pp) * micro_batch_layer_bytes(gpt, plan.layout, plan.micro_batches[0][0]);
    for (double alpha : {0.0, 0.25, 0.5, 0.75, 1.0}) {
      Plan p = plan;
      p.layout.activation_offload_ratio = alpha;
      const double want = (static_cast<double>(pp) - static_cast<double>(pp - 4) * alpha) * x;
      EXPECT_NEAR(estimate_memory(gpt, p, {}).activation_bytes, want, 1e-9 * x) << "p " << pp << " alpha " << alpha;
    }
  }
  const Plan plan = ptdp_plan(4, 1, 8, 2048);
  const double x = 12 * micro_batch_layer_bytes(gpt, plan.layout, plan.micro_batches[0][0]);
  auto schedule = pipeline_schedule("1f1b", 4, 8, 1);
  ASSERT_TRUE(schedule.ok());
  ParallelConfig all = plan.layout;
  all.activation_offload_ratio = 1;
  // Stage 0 runs F0 F1 F2 | F3 B0 F4 B1 ... B7. After each warm-up forward one forward's bytes
  // are held (the one just run); after F3 one, plus B0's buffer.
  const StageMemory stage0 = stage_activation_memory(gpt, all, plan.micro_batches[0], *schedule, 0);
  EXPECT_NEAR(stage0.after_op[0], x, 1e-9 * x);
  EXPECT_NEAR(stage0.after_op[2], x, 1e-9 * x);
  EXPECT_NEAR(stage0.after_op[3], 2 * x, 1e-9 * x);
  // The buffers are never freed: after the last backward they remain.
  EXPECT_NEAR(stage0.after_op.back(), 2 * x, 1e-9 * x);
  const OffloadSchedule s0 = offload_schedule(all, (*schedule)[0], 0);
  EXPECT_EQ(std::count(s0.offloaded.begin(), s0.offloaded.end(), true), 8);
  EXPECT_EQ(s0.released_after[0], 1);  // warm-up: at the end of the next op
  EXPECT_EQ(s0.released_after[3], 5);  // steady state: F3 leaves as F4 (op 5) ends
  EXPECT_EQ(s0.reload_at[4], 3);       // B0's copy back: after the warm-up
  EXPECT_EQ(s0.reload_at[6], 4);       // B1's: as B0 starts
  // Stage 1 warms up with two forwards: offloaded. Stage 2 (one) and the last stage (none) keep
  // their bytes, as Megatron-Kwai offloads only where the warm-up holds two or more forwards.
  const OffloadSchedule s1 = offload_schedule(all, (*schedule)[1], 1);
  EXPECT_EQ(std::count(s1.offloaded.begin(), s1.offloaded.end(), true), 8);
  for (int stage : {2, 3}) {
    const OffloadSchedule s = offload_schedule(all, (*schedule)[stage], stage);
    EXPECT_EQ(std::count(s.offloaded.begin(), s.offloaded.end(), true), 0) << stage;
  }
  // Interleaved: every stage offloads, but the last stage not its last chunk's forwards.
  ParallelConfig inter = all;
  inter.vp = 2;
  auto interleaved = pipeline_schedule("interleaved", 4, 8, 2);
  ASSERT_TRUE(interleaved.ok());
  for (int stage = 0; stage < 4; ++stage) {
    const OffloadSchedule s = offload_schedule(inter, (*interleaved)[stage], stage);
    for (size_t i = 0; i < s.offloaded.size(); ++i)
      if ((*interleaved)[stage][i].forward)
        EXPECT_EQ(s.offloaded[i], !(stage == 3 && (*interleaved)[stage][i].chunk == 1)) << stage << " op " << i;
  }
}

}  // namespace
}  // namespace cpbench

namespace cpbench {
namespace {

// Megatron's DDP keeps one gradient buffer per virtual chunk: a chunk holds its own layers, and the
// embedding (stage 0's first chunk) or the output layer (the last stage's last chunk) where they
// live; the chunks of a stage sum to its parameters, also under the embedding- and loss-counted
// pipeline split.
TEST(ChunkParams, EachChunkHoldsItsLayersAndTheEmbeddingOrOutputWhereTheyLive) {
  const ModelShape m = *load_model(default_experiments_dir() / "models" / "gpt3_175b.json");
  const ParamCount pc = param_count(m, 2048);
  for (bool account_for_extras : {false, true}) {
    ParallelConfig p;
    p.num_gpus = 1024;
    p.tp = 8;
    p.pp = 8;
    p.vp = account_for_extras ? 2 : 3;
    p.account_for_embedding_in_pipeline_split = p.account_for_loss_in_pipeline_split = account_for_extras;
    for (int64_t s = 0; s < p.pp; ++s) {
      double sum = 0;
      for (int64_t c = 0; c < p.vp; ++c) sum += chunk_params_per_gpu(m, p, 2048, s, c);
      EXPECT_NEAR(sum, params_per_gpu(m, p, 2048, s), 1e-6 * sum) << s;
    }
    const double layer = pc.per_layer / p.tp;
    EXPECT_NEAR(chunk_params_per_gpu(m, p, 2048, 0, 0),
                layer * chunk_layers(p, m.layers, 0, 0) + (pc.embedding + pc.position) / p.tp, 1);
    EXPECT_NEAR(chunk_params_per_gpu(m, p, 2048, 0, 1), layer * chunk_layers(p, m.layers, 0, 1), 1);
    // Without the counted split the embedding comes on top of an equal share of layers.
    if (!account_for_extras)
      EXPECT_GT(chunk_params_per_gpu(m, p, 2048, 0, 0), chunk_params_per_gpu(m, p, 2048, 0, 1) + pc.embedding / p.tp / 2);
  }
}

}  // namespace
}  // namespace cpbench
