// dcp_plans_file_test.cpp — every DCP plan the executed-plan tests run survives the plans file
// unchanged (what executed_plans_gpu_test reads on a device, where DCP cannot be planned), and the
// plans read back pass the plan checker.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/strategies/dcp_test_cases.h"

namespace cpbench {
namespace {

TEST(DcpPlansFile, EveryExecutedDcpPlanRoundTrips) {
  auto plans = executed_dcp_plans();
  ASSERT_TRUE(plans.ok()) << plans.error_str();
  ASSERT_EQ(plans->size(), 3 * dcp_cases().size() * 2 * 3);  // ranks × cases × divisions × head blocks
  const auto f = std::filesystem::temp_directory_path() / ("cpbench_dcp_plans_" + std::to_string(::getpid()) + ".json");
  ASSERT_TRUE(write_attention_plans(f, *plans));
  auto back = read_attention_plans(f);
  std::filesystem::remove(f);
  ASSERT_TRUE(back.ok()) << back.error_str();
  ASSERT_EQ(back->size(), plans->size());
  int relayed = 0, collective = 0;
  for (size_t i = 0; i < plans->size(); ++i) {
    const LabelledPlan& p = (*back)[i];
    EXPECT_EQ(p, (*plans)[i]) << (*plans)[i].label;
    EXPECT_EQ(check_attention_plan(p.plan), "") << p.label;
    collective += p.plan.collective_exchange;
    for (const AttnStage& st : p.plan.stages)
      for (const AttnTransfer& t : st.transfers) relayed += t.relay;
  }
  EXPECT_GT(relayed, 0) << "the relays of two-phase communication must be in the file";
  EXPECT_GT(collective, 0);
}

}  // namespace
}  // namespace cpbench
