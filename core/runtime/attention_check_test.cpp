// attention_check_test.cpp — the comparison every executed-plan test relies on must fail on what
// it exists to catch: a wrong value, a NaN in any result, a result of the wrong size; and the
// reference restricted to a rank's sequences equals the whole one there.
#include "core/runtime/attention_check.h"
#include "core/runtime/cpu_attention_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/layouts/cp_layouts.h"
#include "core/runtime/self_communicator.h"

namespace cpbench {
namespace {

class AttentionCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    CpLayoutRequest req;
    req.layout = "single";
    req.cp = 1;
    req.seq_lengths = {37, 20};
    req.mask = MaskSpec{MaskKind::causal};
    req.heads_q = 4;
    req.heads_kv = 2;
    req.head_dim = 8;
    auto plan = plan_cp_layout(req);
    ASSERT_TRUE(plan.ok()) << plan.error_str();
    plan_ = *plan;
    in_ = make_attention_inputs(plan_, 3);
    ref_ = reference_attention(plan_, in_, true);
    SelfCommunicator self;
    auto run = execute_attention(plan_, self, in_.view(), true);
    ASSERT_TRUE(run.ok()) << run.error_str();
    home_ = run->home;
    ASSERT_FALSE(home_.empty());
  }
  double worst() const {
    double w = 0;
    for (const HomeResult& h : home_) w = std::max(w, check_home(plan_, h, ref_, true).worst);
    return w;
  }

  AttentionPlan plan_;
  OwnedInputs in_;
  ReferenceAttention ref_;
  std::vector<HomeResult> home_;
};

TEST_F(AttentionCheck, TheExecutedPlanPasses) {
  EXPECT_LE(worst(), 1.0);
  const CheckResult c = check_home(plan_, home_[0], ref_, true);
  EXPECT_EQ(c.wrong, 0);
  // O, dQ [T, Hq, d], LSE [Hq, T], dK, dV [T, Hkv, d].
  const int64_t T = home_[0].slice.tokens();
  EXPECT_EQ(c.checked, T * 4 * 8 * 2 + T * 4 + T * 2 * 8 * 2);
}

TEST_F(AttentionCheck, AWrongValueFailsAndIsCountedAndNamed) {
  home_[0].dv[3] += 1.0f;
  home_[0].dv[40] += 1.0f;
  EXPECT_GT(worst(), 1.0);
  const CheckResult c = check_home(plan_, home_[0], ref_, true);
  EXPECT_EQ(c.wrong, 2);
  EXPECT_EQ(c.where.rfind("dV token ", 0), 0u) << c.where;
}

TEST_F(AttentionCheck, ANanInAnyResultFails) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (auto field : {&HomeResult::out, &HomeResult::lse, &HomeResult::dq, &HomeResult::dk, &HomeResult::dv}) {
    std::vector<HomeResult> saved = home_;
    (home_[0].*field)[0] = nan;
    (home_[0].*field)[1] = nan;
    EXPECT_TRUE(std::isinf(worst())) << "a NaN passed the check";
    EXPECT_EQ(check_home(plan_, home_[0], ref_, true).wrong, 2);
    home_ = saved;
  }
}

TEST_F(AttentionCheck, AResultOfTheWrongSizeFailsAndNamesIt) {
  home_[0].dk.pop_back();
  const CheckResult c = check_home(plan_, home_[0], ref_, true);
  EXPECT_TRUE(std::isinf(c.worst));
  EXPECT_NE(c.where.find("dK"), std::string::npos) << c.where;
  home_[0].lse.clear();
  EXPECT_TRUE(std::isinf(check_home(plan_, home_[0], ref_, false).worst));
}

TEST_F(AttentionCheck, AReferenceOfSomeSequencesEqualsTheWholeOneThere) {
  const std::vector<char> second_only{0, 1};
  const ReferenceAttention part = reference_attention(plan_, in_, true, &second_only);
  const int64_t first_rows = 37, hq = 4, hkv = 2, d = 8, T = 57;
  // Sequence 1 bit for bit; sequence 0 not computed (O and gradients 0, LSE −inf).
  for (int64_t i = 0; i < T * hq * d; ++i) {
    const bool second = i >= first_rows * hq * d;
    ASSERT_EQ(part.out[i], second ? ref_.out[i] : 0.f) << i;
    ASSERT_EQ(part.dq[i], second ? ref_.dq[i] : 0.f) << i;
  }
  for (int64_t i = 0; i < T * hkv * d; ++i) {
    const bool second = i >= first_rows * hkv * d;
    ASSERT_EQ(part.dk[i], second ? ref_.dk[i] : 0.f) << i;
    ASSERT_EQ(part.dv[i], second ? ref_.dv[i] : 0.f) << i;
  }
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t t = 0; t < T; ++t)
      ASSERT_EQ(part.lse[h * T + t], t >= first_rows ? ref_.lse[h * T + t] : -std::numeric_limits<float>::infinity());
  EXPECT_EQ(home_sequences(plan_, 0), (std::vector<char>{1, 1}));
}

}  // namespace
}  // namespace cpbench
