// formulas_test.cpp — parameter counts against SC'21 Table 1 and public model sizes, FLOPs
// formulas against their term-by-term definitions and Kwai's published MFU, activation memory
// against hand-computed rows of Korthikanti et al.'s Table 2.
#include "core/model/formulas.h"

#include <gtest/gtest.h>

#include <cmath>

namespace cpbench {
namespace {

const std::filesystem::path kModels =
    std::filesystem::path(CPBENCH_SOURCE_DIR) / "experiments/models";

ModelShape preset(const std::string& name) {
  auto m = load_model(kModels / (name + ".json"));
  EXPECT_TRUE(m.ok()) << m.error_str();
  return m.ok() ? *m : ModelShape{};
}

double rel(double x, double ref) { return std::fabs(x - ref) / std::fabs(ref); }

// SC'21 Table 1, column "Params (B)" (references/ptdp.md); s = 2,048.
struct Table1Row {
  const char* preset;
  double published_params_b;
};
constexpr Table1Row kTable1[] = {
    {"gpt_1.7b", 1.7},     {"gpt_3.6b", 3.6},     {"gpt_7.5b", 7.5},     {"gpt_18.4b", 18.4},
    {"gpt_39.1b", 39.1},   {"gpt_76.1b", 76.1},   {"gpt_145.6b", 145.6}, {"gpt_310.1b", 310.1},
    {"gpt_529.6b", 529.6}, {"gpt_1008b", 1008.0},
};

TEST(Params, Sc21ClosedFormReproducesTable1) {
  for (const auto& row : kTable1) {
    const ModelShape m = preset(row.preset);
    EXPECT_NEAR(params_sc21(m, 2048) / 1e9, row.published_params_b, 0.1) << row.preset;
  }
}

TEST(Params, ExactCountReproducesTable1AndDiffersOnlyByTheFinalLayerNorm) {
  for (const auto& row : kTable1) {
    const ModelShape m = preset(row.preset);
    EXPECT_NEAR(params_exact(m, 2048) / 1e9, row.published_params_b, 0.1) << row.preset;
    // The closed form leaves out the final LayerNorm's weight and bias: 2h.
    EXPECT_NEAR(params_exact(m, 2048) - params_sc21(m, 2048), 2.0 * m.hidden, 1.0) << row.preset;
  }
}

TEST(Params, GptBreakdownIs12hSquaredPlus13hPerLayer) {
  const ModelShape m = preset("gpt_1.7b");
  const double h = 2304;
  const ParamCount p = param_count(m, 2048);
  EXPECT_EQ(p.per_layer, 12 * h * h + 13 * h);
  EXPECT_EQ(p.embedding, 51200 * h);
  EXPECT_EQ(p.position, 2048 * h);
  EXPECT_EQ(p.output_layer, 0);  // tied
  EXPECT_EQ(p.final_norm, 2 * h);
}

// Public sizes: Llama-2-7B 6,738,415,616 and Llama-3-8B 8,030,261,248 parameters (Hugging Face
// model cards: "6.74B", "8.03B"); Llama-2-70B "69B" (68.98B).
TEST(Params, LlamaExactCountsMatchPublicSizes) {
  EXPECT_EQ(params_exact(preset("llama2_7b"), 4096), 6738415616.0);
  EXPECT_EQ(params_exact(preset("llama3_8b"), 8192), 8030261248.0);
  EXPECT_NEAR(params_exact(preset("llama2_70b"), 4096) / 1e9, 68.98, 0.01);
  // RoPE has no parameters: the count does not depend on the sequence length.
  EXPECT_EQ(params_exact(preset("llama3_8b"), 8192), params_exact(preset("llama3_8b"), 131072));
}

TEST(Flops, LinearForwardIsTwiceTheLayerWeights) {
  for (const char* name : {"llama3_8b", "llama2_70b", "llama_175b_kwai"}) {
    const ModelShape m = preset(name);
    const double norms = 2.0 * m.hidden;  // two RMSNorm weights, not in a GEMM
    EXPECT_EQ(linear_flops_per_token_per_layer(m), 2 * (param_count(m, 0).per_layer - norms))
        << name;
  }
  // Llama-3-8B by hand: 2·(2·4096² + 2·4096·1024 + 3·4096·14336) = 436,207,616.
  EXPECT_EQ(linear_flops_per_token_per_layer(preset("llama3_8b")), 436207616.0);
}

// SC'21 §5.1: per layer forward QKV 6Bsh², QKᵀ 2Bs²h, attention·V 2Bs²h, out-proj 2Bsh²,
// MLP 16Bsh²; ×4 with recompute (×3 without); logits 6BshV.
TEST(Flops, Sc21FormulaEqualsTheSumOfItsTerms) {
  for (const char* name : {"gpt_1.7b", "gpt_145.6b", "gpt3_175b"}) {
    const ModelShape m = preset(name);
    for (double B : {1.0, 512.0}) {
      for (double s : {2048.0, 32768.0}) {
        const double h = static_cast<double>(m.hidden), l = static_cast<double>(m.layers);
        const double V = static_cast<double>(m.vocab);
        const double forward = 6 * B * s * h * h + 2 * B * s * s * h + 2 * B * s * s * h +
                               2 * B * s * h * h + 16 * B * s * h * h;
        const double logits = 6 * B * s * h * V;
        const auto b = static_cast<int64_t>(B), sl = static_cast<int64_t>(s);
        EXPECT_LT(rel(flops_per_iteration_sc21(m, b, sl, true), 4 * l * forward + logits), 1e-12);
        EXPECT_LT(rel(flops_per_iteration_sc21(m, b, sl, false), 3 * l * forward + logits), 1e-12);
      }
    }
  }
}

// causal = false is the SC'21 convention (full s² attention), so equal lengths reproduce it.
TEST(Flops, VarlenWithEqualLengthsEqualsSc21) {
  for (const auto& row : kTable1) {
    const ModelShape m = preset(row.preset);
    const double B = 512, s = 2048;
    EXPECT_LT(rel(flops_varlen(m, B * s, B * s * s, Recompute::full, false),
                  flops_per_iteration_sc21(m, 512, 2048, true)),
              1e-12)
        << row.preset;
    EXPECT_LT(rel(flops_varlen(m, B * s, B * s * s, Recompute::none, false),
                  flops_per_iteration_sc21(m, 512, 2048, false)),
              1e-12)
        << row.preset;
  }
}

TEST(Flops, VarlenCausalHalvesOnlyAttentionAndSelectiveAddsOneAttentionForward) {
  const ModelShape m = preset("llama3_8b_dcp");
  // A packed batch of lengths 1000, 3000 and 12000.
  const double sum = 16000, sum_sq = 1000.0 * 1000 + 3000.0 * 3000 + 12000.0 * 12000;
  const double l = static_cast<double>(m.layers);
  const double causal_attention = attention_flops_per_layer(m, sum_sq, true);
  EXPECT_EQ(causal_attention, 2.0 * 4096 * sum_sq);
  EXPECT_NEAR(flops_varlen(m, sum, sum_sq, Recompute::none, false) -
                  flops_varlen(m, sum, sum_sq, Recompute::none, true),
              3 * l * causal_attention, 1e3);
  EXPECT_NEAR(flops_varlen(m, sum, sum_sq, Recompute::selective, true) -
                  flops_varlen(m, sum, sum_sq, Recompute::none, true),
              l * causal_attention, 1e3);
  // Full recompute adds one forward of every layer but not of the output layer.
  EXPECT_NEAR(flops_varlen(m, sum, sum_sq, Recompute::full, true) -
                  flops_varlen(m, sum, sum_sq, Recompute::none, true),
              l * (linear_flops_per_token_per_layer(m) * sum + causal_attention), 1e3);
}

TEST(Flops, VarlenCausalNoRecomputeEqualsKwaiPerToken) {
  const ModelShape m = preset("llama_7b_kwai");
  for (double s : {4096.0, 12288.0}) {
    EXPECT_LT(rel(flops_varlen(m, s, s * s, Recompute::none, true),
                  flops_per_token_kwai(m, static_cast<int64_t>(s)) * s),
              1e-12);
  }
}

// Kwai (ATC'24) published tokens/s/GPU and MFU (references/kwai.md). Peaks: H800 989 TFLOP/s,
// A800 312 TFLOP/s (A100 compute), as Kwai's MFU uses.
TEST(Flops, KwaiPublishedMfuReproduces) {
  struct Case {
    const char* model;
    int64_t seq_length;
    double tokens_per_s_per_gpu, peak_tflops, published_mfu_percent;
  };
  const Case cases[] = {
      {"llama_7b_kwai", 12288, 3016, 312, 47.7}, {"llama_7b_kwai", 12288, 6639, 989, 33.1},
      {"llama_7b_kwai", 12288, 3803, 312, 60.1}, {"llama_7b_kwai", 12288, 8273, 989, 41.2},
      {"llama_7b_kwai", 12288, 2847, 312, 45.0}, {"llama_7b_kwai", 12288, 6138, 989, 30.6},
      {"llama_175b_kwai", 8192, 299, 989, 33.4}, {"llama_175b_kwai", 8192, 387, 989, 43.2},
      {"llama_175b_kwai", 8192, 278, 989, 31.0},
  };
  for (const Case& c : cases) {
    const double mfu_percent = 100 * c.tokens_per_s_per_gpu *
                               flops_per_token_kwai(preset(c.model), c.seq_length) /
                               (c.peak_tflops * 1e12);
    EXPECT_NEAR(mfu_percent, c.published_mfu_percent, 0.1)
        << c.model << " " << c.tokens_per_s_per_gpu;
  }
}

// GPT-3 175B, s = 2048, b = 1, h = 12288, a = 96, t = 8: sbh = 25,165,824 and 5as/h = 80.
TEST(Memory, KorthikantiTable2RowsByHand) {
  const ModelShape m = preset("gpt3_175b");
  auto bytes = [&](int tp, bool sp, Recompute r) {
    return activation_bytes_per_layer(m, 1, 2048, tp, sp, r);
  };
  EXPECT_EQ(bytes(1, false, Recompute::none), 2868903936.0);      // sbh(34 + 80) = 114 sbh
  EXPECT_EQ(bytes(8, false, Recompute::none), 578813952.0);       // sbh(10 + 3 + 10) = 23 sbh
  EXPECT_EQ(bytes(8, true, Recompute::none), 358612992.0);        // sbh/8 · 114 = 14.25 sbh
  EXPECT_EQ(bytes(8, false, Recompute::selective), 327155712.0);  // sbh(10 + 3) = 13 sbh
  EXPECT_EQ(bytes(8, true, Recompute::selective), 106954752.0);   // 34 sbh / 8 = 4.25 sbh
  EXPECT_EQ(bytes(8, false, Recompute::full), 50331648.0);        // 2 sbh
  EXPECT_EQ(bytes(8, true, Recompute::full), 6291456.0);          // 2 sbh / 8
  // Without TP the TP row is the no-parallelism row, and SP changes nothing.
  EXPECT_EQ(bytes(1, false, Recompute::none), bytes(1, true, Recompute::none));
  // The micro-batch scales every row linearly.
  EXPECT_EQ(activation_bytes_per_layer(m, 4, 2048, 8, true, Recompute::selective),
            4 * bytes(8, true, Recompute::selective));
}

// Llama-65B shape (Kwai), s = 8192, b = 1, t = 2, c = 2: s·h/(t·c) = 16,777,216; g/a = 1,
// H/h = 22016/8192 = 2.6875.
TEST(Memory, KwaiPerLayerByHand) {
  const ModelShape m = preset("llama_65b_kwai");
  auto bytes = [&](Recompute k) {
    return activation_bytes_per_layer_kwai(m, 1, 8192, 2, 2, k);
  };
  EXPECT_EQ(bytes(Recompute::none), 629145600.0);      // (12 + 4 + 21.5) = 37.5
  EXPECT_EQ(bytes(Recompute::balanced), 381681664.0);  // (8 + 4 + 10.75) = 22.75
  EXPECT_EQ(bytes(Recompute::full), 33554432.0);       // 2
  // Balanced checkpointing saves ~40% of activation memory (the paper's claim).
  const double saved = 1 - bytes(Recompute::balanced) / bytes(Recompute::none);
  EXPECT_NEAR(saved, 0.40, 0.02);
  // GQA shrinks only the K/V term: Llama-3-8B-DCP, g/a = 1/4, H/h = 3.5, t = 4, c = 1.
  EXPECT_EQ(activation_bytes_per_layer_kwai(preset("llama3_8b_dcp"), 1, 16384, 4, 1,
                                            Recompute::none),
            (12 + 1 + 28) * 16384.0 * 4096 / 4);
}

// The architecture-general count reduces to both published closed forms: Korthikanti's Table 2 on
// a GPT layer (unfused attention, dropout, GeLU) for every row, and Kwai's formula on a Llama
// layer (flash, no dropout, unfused SwiGLU, GQA, SP and CP) plus the fp32 LSE it leaves out.
TEST(Memory, SavedActivationsReduceToKorthikantiAndKwai) {
  const ModelShape gpt = preset("gpt3_175b");
  for (int tp : {1, 2, 8})
    for (bool sp : {false, true})
      for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
        LayerActivationOptions o;
        o.micro_batch = 2;
        o.seq_length = 2048;
        o.tp = tp;
        o.sequence_parallel = sp;
        o.recompute = r;
        o.flash = false;
        o.dropout = true;
        EXPECT_DOUBLE_EQ(saved_activation_bytes_per_layer(gpt, o),
                         activation_bytes_per_layer(gpt, 2, 2048, tp, sp, r))
            << "tp " << tp << " sp " << sp << " recompute " << static_cast<int>(r);
      }
  for (const char* name : {"llama_65b_kwai", "llama3_8b_dcp"}) {
    ModelShape llama = preset(name);
    ASSERT_FALSE(llama.dropout) << name;
    const int t = 2, c = 2;
    const int64_t s = 8192;
    LayerActivationOptions o;
    o.seq_length = s / c;  // a CP rank holds 1/c of the sequence
    o.tp = t;
    o.sequence_parallel = true;
    o.flash = true;
    o.dropout = llama.dropout;
    o.elementwise_fusion = false;
    const double lse = 4.0 * (s / c) * llama.heads / t;
    EXPECT_DOUBLE_EQ(saved_activation_bytes_per_layer(llama, o),
                     activation_bytes_per_layer_kwai(llama, 1, s, t, c, Recompute::none) + lse)
        << name;
    // Balanced checkpointing: Kwai's closed form, fused SwiGLU or not (FC1's output is kept either way).
    for (bool fused : {false, true}) {
      LayerActivationOptions ob = o;
      ob.recompute = Recompute::balanced;
      ob.elementwise_fusion = fused;
      EXPECT_DOUBLE_EQ(saved_activation_bytes_per_layer(llama, ob),
                       activation_bytes_per_layer_kwai(llama, 1, s, t, c, Recompute::balanced) + lse)
          << name << " fused " << fused;
    }
    // Megatron's fused SwiGLU saves its input (2H) and output (H) instead of four H tensors.
    o.elementwise_fusion = true;
    EXPECT_DOUBLE_EQ(activation_bytes_per_layer_kwai(llama, 1, s, t, c, Recompute::none) + lse -
                         saved_activation_bytes_per_layer(llama, o),
                     2.0 * (s / c) * llama.ffn_hidden / t)
        << name;
  }
}

// The Megatron-LM README's table of theoretical bytes per parameter ("Distributed Optimizer"):
// bf16 weights with fp32 gradients 18 or 6 + 12/d, 16-bit gradients 20 or 4 + 16/d.
TEST(Memory, WeightsAndOptimizer) {
  EXPECT_EQ(weight_and_optimizer_bytes(1e9, 1, false, 4), 18e9);
  EXPECT_EQ(weight_and_optimizer_bytes(1e9, 64, false, 4), 18e9);  // replicated: d does not matter
  EXPECT_EQ(weight_and_optimizer_bytes(1e9, 8, true, 4), 7.5e9);   // 6 + 12/8
  EXPECT_EQ(weight_and_optimizer_bytes(1e9, 1, true, 4), 18e9);    // d = 1 shards nothing
  EXPECT_EQ(weight_and_optimizer_bytes(1e9, 1, false, 2), 20e9);
  EXPECT_EQ(weight_and_optimizer_bytes(1e9, 8, true, 2), 6e9);     // 4 + 16/8
  // 16-bit gradients save their 2 bytes per parameter where the gradient buffer is the larger part
  // (the distributed optimizer over many ranks), and cost 2 more where the optimizer is replicated.
  EXPECT_LT(weight_and_optimizer_bytes(1e9, 64, true, 2), weight_and_optimizer_bytes(1e9, 64, true, 4));
  EXPECT_GT(weight_and_optimizer_bytes(1e9, 1, false, 2), weight_and_optimizer_bytes(1e9, 1, false, 4));
}

}  // namespace
}  // namespace cpbench
