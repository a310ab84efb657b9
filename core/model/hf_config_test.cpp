// hf_config_test.cpp — a Hugging Face config.json read as the model preset cpbench ships for the
// same checkpoint; GPT-2's keys; the architectures it refuses and the fields it names.
#include "core/model/hf_config.h"

#include <fstream>

#include <gtest/gtest.h>
#include <unistd.h>

namespace cpbench {
namespace {

namespace fs = std::filesystem;

class HfConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cpbench_hf_config_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path write(const std::string& text) {
    const fs::path p = dir_ / "config.json";
    std::ofstream(p) << text;
    return p;
  }
  static std::string errors_of(const Expected<ModelShape>& m) { return m.ok() ? "(no error)" : m.error_str(); }
  fs::path dir_;
};

TEST_F(HfConfigTest, Llama3ConfigIsTheShippedPresetsShape) {
  const fs::path folder = fs::path(CPBENCH_SOURCE_DIR) / "examples/llama3_8b";
  ASSERT_TRUE(is_hf_config_path(folder));
  auto m = load_hf_config(folder);
  ASSERT_TRUE(m.ok()) << m.error_str();
  auto preset = load_model(fs::path(CPBENCH_SOURCE_DIR) / "experiments/models/llama3_8b.json");
  ASSERT_TRUE(preset.ok()) << preset.error_str();
  ModelShape want = *preset;
  want.name = "llama3_8b";  // the folder's name: the config has no _name_or_path
  want.source = m->source;
  EXPECT_EQ(*m, want);
  EXPECT_NE(m->source.find("config.json"), std::string::npos);
}

TEST_F(HfConfigTest, Gpt2KeysAndDefaults) {
  auto m = load_hf_config(write(R"({"model_type": "gpt2", "n_embd": 2048, "n_head": 16, "n_layer": 24,
      "n_inner": null, "vocab_size": 50257, "_name_or_path": "org/gpt"})"));
  ASSERT_TRUE(m.ok()) << m.error_str();
  EXPECT_EQ(m->name, "org_gpt");
  EXPECT_EQ(m->ffn_hidden, 4 * 2048);
  EXPECT_TRUE(m->tied_embeddings);
  EXPECT_TRUE(m->bias);
  EXPECT_TRUE(m->dropout);
  EXPECT_EQ(m->norm, "layernorm");
  EXPECT_EQ(m->position_embedding, "learned");
  EXPECT_EQ(m->kv_heads, 16);
}

TEST_F(HfConfigTest, MissingOrUnmodelledFieldsAreNamed) {
  const std::string missing = errors_of(load_hf_config(write(R"({"model_type": "llama", "hidden_size": 4096,
      "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 1000})")));
  EXPECT_NE(missing.find("config.json: /intermediate_size: missing required key"), std::string::npos) << missing;

  const std::string moe = errors_of(load_hf_config(write(R"({"model_type": "mistral", "hidden_size": 4096,
      "num_attention_heads": 32, "intermediate_size": 14336, "num_hidden_layers": 32, "vocab_size": 32000,
      "num_local_experts": 8})")));
  EXPECT_NE(moe.find("/num_local_experts: a mixture of experts"), std::string::npos) << moe;

  const std::string head_dim = errors_of(load_hf_config(write(R"({"model_type": "qwen3", "hidden_size": 2560,
      "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 9728,
      "num_hidden_layers": 36, "vocab_size": 151936})")));
  EXPECT_NE(head_dim.find("/head_dim: cpbench models a head size of hidden_size / num_attention_heads = 80"),
            std::string::npos) << head_dim;

  const std::string type = errors_of(load_hf_config(write(R"({"model_type": "t5"})")));
  EXPECT_NE(type.find("/model_type: \"t5\" is not a decoder cpbench reads"), std::string::npos) << type;
  const std::string kv = errors_of(load_hf_config(write(R"({"model_type": "llama", "hidden_size": 64,
      "num_attention_heads": 8, "num_key_value_heads": 3, "intermediate_size": 128, "num_hidden_layers": 2,
      "vocab_size": 10})")));
  EXPECT_NE(kv.find("/num_key_value_heads: expected a divisor of num_attention_heads 8, got 3"), std::string::npos) << kv;
  EXPECT_NE(errors_of(load_hf_config(dir_ / "nothing.json")).find("nothing.json"), std::string::npos);
}

}  // namespace
}  // namespace cpbench
