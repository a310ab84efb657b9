// model_test.cpp — loading of experiments/models/*.json and the errors of bad model files.
#include "core/model/model.h"

#include <fstream>
#include <functional>
#include <set>

#include <gtest/gtest.h>

namespace cpbench {
namespace {

const std::filesystem::path kModels =
    std::filesystem::path(CPBENCH_SOURCE_DIR) / "experiments/models";

// A file in a fresh temporary folder, removed with the fixture.
class BadModelFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("cpbench_model_test_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The Llama-2-7B preset with `edit` applied, written to a file; returns its load result.
  Expected<ModelShape> load_edited(const std::function<void(json&)>& edit) {
    auto good = load_json_file(kModels / "llama2_7b.json");
    EXPECT_TRUE(good.ok());
    json j = *good;
    edit(j);
    path_ = dir_ / "model.json";
    std::ofstream(path_) << j.dump(2);
    return load_model(path_);
  }

  std::filesystem::path dir_, path_;
};

TEST(Model, EveryPresetLoadsAndIsNamedAfterItsFile) {
  std::set<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(kModels)) {
    if (entry.path().extension() != ".json") continue;
    auto m = load_model(entry.path());
    ASSERT_TRUE(m.ok()) << m.error_str();
    EXPECT_EQ(m->name, entry.path().stem().string());
    EXPECT_FALSE(m->source.empty());
    EXPECT_EQ(m->hidden % m->heads, 0);
    EXPECT_EQ(m->heads % m->kv_heads, 0);
    found.insert(m->name);
  }
  // SC'21 Table 1 and figures, GPT-3, Llama-2/3, Kwai, Dynamic-CP and DCP shapes.
  for (const char* name :
       {"gpt_1.7b", "gpt_3.6b", "gpt_7.5b", "gpt_18.4b", "gpt_39.1b", "gpt_76.1b", "gpt_145.6b",
        "gpt_310.1b", "gpt_529.6b", "gpt_1008b", "gpt3_175b", "gpt_162.2b", "gpt_5.9b", "gpt_91b",
        "llama2_7b", "llama2_13b", "llama2_70b", "llama3_8b", "llama_175b_kwai", "llama_65b_kwai",
        "llama_7b_kwai", "llama_13b_dynamic_cp", "llama3_8b_dcp"})
    EXPECT_TRUE(found.count(name)) << name;
}

TEST(Model, Llama3ShapeIsGqa) {
  auto m = load_model(kModels / "llama3_8b.json");
  ASSERT_TRUE(m.ok()) << m.error_str();
  EXPECT_EQ(m->head_dim(), 128);
  EXPECT_EQ(m->kv_dim(), 1024);  // 8 KV heads × 128
  EXPECT_TRUE(m->gated_mlp);
  EXPECT_FALSE(m->tied_embeddings);
  EXPECT_EQ(m->position_embedding, "rope");
}

TEST(Model, KvHeadsDefaultsToHeads) {
  Diagnostics diag("inline");
  json j = *load_json_file(kModels / "gpt_1.7b.json");
  j.erase("kv_heads");
  JsonObject o(j, "/model", diag);
  ModelShape m = parse_model(o);
  EXPECT_TRUE(diag.ok()) << diag.errors().str();
  EXPECT_EQ(m.kv_heads, 24);
}

TEST_F(BadModelFile, HeadsNotDividingHiddenNamesFileAndPointer) {
  auto m = load_edited([](json& j) {
    j["heads"] = 30;
    j["kv_heads"] = 30;
  });
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.errors().list.size(), 1u) << m.error_str();
  EXPECT_EQ(m.errors().list[0].file, path_.string());
  EXPECT_EQ(m.errors().list[0].pointer, "/heads");
  EXPECT_EQ(m.errors().list[0].message, "hidden (4096) must be a multiple of heads (30)");
}

TEST_F(BadModelFile, KvHeadsNotDividingHeadsNamesPointer) {
  auto m = load_edited([](json& j) { j["kv_heads"] = 6; });
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.errors().list.at(0).pointer, "/kv_heads");
  EXPECT_EQ(m.errors().list.at(0).message, "heads (32) must be a multiple of kv_heads (6)");
}

TEST_F(BadModelFile, UnknownKeyWrongTypeAndBadChoiceAreAllReported) {
  auto m = load_edited([](json& j) {
    j["hiden"] = 1;
    j["layers"] = "32";
    j["norm"] = "batchnorm";
  });
  ASSERT_FALSE(m.ok());
  const std::string text = m.error_str();
  EXPECT_NE(text.find(path_.string() + ": /layers: expected an integer"), std::string::npos)
      << text;
  EXPECT_NE(text.find(path_.string() + ": /norm: expected one of \"layernorm\", \"rmsnorm\""),
            std::string::npos) << text;
  EXPECT_NE(text.find(path_.string() + ": /hiden: unknown key \"hiden\""), std::string::npos)
      << text;
}

TEST_F(BadModelFile, MissingKeyIsNamed) {
  auto m = load_edited([](json& j) { j.erase("vocab"); });
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.errors().list.at(0).pointer, "/vocab");
  EXPECT_EQ(m.errors().list.at(0).message, "missing required key \"vocab\"");
}

}  // namespace
}  // namespace cpbench
