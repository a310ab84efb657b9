// attention_plan_json_test.cpp — a plan with every field away from its default survives JSON and a
// file unchanged; every mask kind's parameters round-trip; malformed plans are refused with the
// JSON pointer of what is wrong. (Real DCP plans round-trip in core/strategies' dcp_plans_file_test.)
#include "core/plan/attention_plan_json.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace cpbench {
namespace {

namespace fs = std::filesystem;

AttentionPlan every_field_set() {
  AttentionPlan p;
  p.seq_lengths = {40, 9};
  p.mask.kind = MaskKind::shared_question;
  p.mask.question_fraction = 0.3;
  p.mask.answers = 3;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.head_dim = 24;
  p.layout = "dcp";
  p.ranks = 2;
  p.value_bytes = 2;
  p.grad_bytes = 4;
  p.fused_stages = true;
  p.pipelined_backward = true;
  p.causal_envelope_work = true;
  p.host_ops_per_sequence_fwd = 3;
  p.host_ops_per_sequence_bwd = 5;
  p.collective_exchange = true;
  const AttnSlice a{0, 0, 20, 0, 8}, b{0, 20, 40, 0, 4}, c{1, 0, 9, 4, 8}, d{0, 20, 40, 4, 8};
  p.home = {{a}, {b, d, c}};
  p.stages.resize(2);
  p.stages[0].tiles = {{{a, a}}, {{b, b}, {c, c}}};
  p.stages[1].transfers = {{0, 1, AttnTensor::kv, a, false}, {1, 0, AttnTensor::q, d, true}};
  p.stages[1].tiles = {{}, {{b, a}}};
  p.gather_out = {{1, 0, AttnTensor::out, d, false}};
  p.backward.resize(1);
  p.backward[0].transfers = {{0, 1, AttnTensor::dout, a, false}, {1, 0, AttnTensor::dkv, b, false},
                             {1, 0, AttnTensor::dq, c, false}};
  p.backward[0].tiles = {{{a, a}}};
  return p;
}

TEST(AttentionPlanJson, EveryFieldRoundTrips) {
  const AttentionPlan p = every_field_set();
  Diagnostics diag("test");
  const AttentionPlan back = parse_attention_plan(attention_plan_json(p), "", diag);
  ASSERT_TRUE(diag.ok()) << diag.errors().str();
  EXPECT_EQ(back, p);
  EXPECT_NE(back, AttentionPlan{});
}

TEST(AttentionPlanJson, EveryMaskKindRoundTrips) {
  std::vector<MaskSpec> masks(5);
  masks[0].kind = MaskKind::full;
  masks[1].kind = MaskKind::causal;
  masks[2].kind = MaskKind::lambda;
  masks[2].sink_tokens = 3;
  masks[2].window_tokens = 17;
  masks[3].kind = MaskKind::shared_question;
  masks[3].question_fraction = 1.0 / 3.0;  // not a short decimal: needs every digit
  masks[3].answers = 7;
  masks[4].kind = MaskKind::causal_blockwise;
  masks[4].block_tokens = 32;
  masks[4].local_blocks = 1;
  for (const MaskSpec& m : masks) {
    Diagnostics diag("test");
    const json j = mask_json(m);
    JsonObject o(j, "", diag);
    EXPECT_EQ(parse_mask(o), m) << j.dump();
    EXPECT_TRUE(diag.ok()) << diag.errors().str();
  }
}

TEST(AttentionPlanJson, AFileOfPlansRoundTrips) {
  const fs::path f = fs::temp_directory_path() / ("cpbench_plans_" + std::to_string(::getpid()) + ".json");
  AttentionPlan other = every_field_set();
  other.mask = MaskSpec{};
  other.backward.clear();
  const std::vector<LabelledPlan> plans{{"first", every_field_set()}, {"second", other}};
  ASSERT_TRUE(write_attention_plans(f, plans));
  auto back = read_attention_plans(f);
  ASSERT_TRUE(back.ok()) << back.error_str();
  EXPECT_EQ(*back, plans);
  fs::remove(f);
}

// The error of `edit` applied to a good plan's JSON, parsed.
std::string error_of(void (*edit)(json&)) {
  json j = attention_plan_json(every_field_set());
  edit(j);
  Diagnostics diag("plans.json");
  parse_attention_plan(j, "/plans/0/plan", diag);
  return diag.ok() ? "" : diag.errors().str();
}

TEST(AttentionPlanJson, MalformedPlansNameWhatIsWrong) {
  EXPECT_NE(error_of([](json& j) { j["stages"][1]["transfers"][0][2] = "kq"; }).find("/plans/0/plan/stages/1/transfers/0/2"),
            std::string::npos);
  EXPECT_NE(error_of([](json& j) { j["home"][1][0] = json::array({0, 1}); }).find("5 elements"), std::string::npos);
  EXPECT_NE(error_of([](json& j) { j["home"][1][0][2] = -3; }).find("/plans/0/plan/home/1/0/2"), std::string::npos);
  EXPECT_NE(error_of([](json& j) { j["home"][0][0][1] = 30; }).find("precede"), std::string::npos);
  EXPECT_NE(error_of([](json& j) { j.erase("ranks"); }).find("ranks"), std::string::npos);
  EXPECT_NE(error_of([](json& j) { j["extra"] = 1; }).find("extra"), std::string::npos);
  EXPECT_NE(error_of([](json& j) { j["backward"][0].erase("tiles"); }).find("/plans/0/plan/backward/0/tiles"),
            std::string::npos);
  EXPECT_NE(error_of([](json& j) { j["stages"][0]["tiles"][1][0] = json::array({1}); }).find("2 elements"),
            std::string::npos);
  EXPECT_EQ(error_of([](json&) {}), "");
}

TEST(AttentionPlanJson, AFileOfAnotherFormatIsRefused) {
  const fs::path f = fs::temp_directory_path() / ("cpbench_plans_bad_" + std::to_string(::getpid()) + ".json");
  std::ofstream(f) << R"({"format": "something else", "version": 1, "plans": []})";
  auto back = read_attention_plans(f);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.error_str().find(f.string()), std::string::npos) << back.error_str();
  EXPECT_NE(back.error_str().find("/format"), std::string::npos) << back.error_str();
  fs::remove(f);
}

}  // namespace
}  // namespace cpbench
