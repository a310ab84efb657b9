// attention_check_test.cpp — the comparison every executed-plan test relies on must fail on what
// it exists to catch: a wrong value, a NaN in any result, a result of the wrong size.
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

}  // namespace
}  // namespace cpbench
