// watchdog_test.cpp — run_with_timeout at the edges of its deadline arithmetic: a timeout so long
// that start + timeout overflows the clock must wait, not time out at once; zero and negative
// timeouts give up at the first unfinished poll.
#include "core/runtime/watchdog.h"

#include <gtest/gtest.h>

namespace cpbench {
namespace {

using std::chrono::milliseconds;

// A poll that completes on its n-th call.
std::function<Expected<bool>()> done_after(int n) {
  return [calls = 0, n]() mutable -> Expected<bool> { return ++calls >= n; };
}

TEST(Watchdog, HugeTimeoutDoesNotOverflowIntoAnImmediateTimeout) {
  for (milliseconds t : {milliseconds::max(), milliseconds::max() / 2, milliseconds(int64_t{1} << 62)}) {
    Status s = run_with_timeout(done_after(200), t, "waiting for rank 1");
    EXPECT_TRUE(s.ok()) << t.count() << ": " << s.error_str();
  }
}

TEST(Watchdog, ZeroOrNegativeTimeoutGivesUpAtOnce) {
  for (milliseconds t : {milliseconds(0), milliseconds(-1), milliseconds::min()}) {
    Status s = run_with_timeout(done_after(1000000), t, "waiting for rank 1");
    ASSERT_FALSE(s.ok()) << t.count();
    EXPECT_NE(s.error_str().find("timed out after"), std::string::npos) << s.error_str();
    EXPECT_NE(s.error_str().find("waiting for rank 1"), std::string::npos) << s.error_str();
  }
}

TEST(Watchdog, CompletesAndFailsAsThePollSays) {
  EXPECT_TRUE(run_with_timeout(done_after(3), milliseconds(1000), "").ok());
  Status failed = run_with_timeout([]() -> Expected<bool> { return Error{"", "", "peer gone"}; }, milliseconds(1000), "");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.errors().list.front().message, "peer gone");
}

}  // namespace
}  // namespace cpbench
