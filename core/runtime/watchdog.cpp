// watchdog.cpp — deadline polling loop with a spin, yield, sleep back-off.
#include "core/runtime/watchdog.h"

#include <algorithm>
#include <thread>

namespace cpbench {

Status run_with_timeout(const std::function<Expected<bool>()>& poll,
                        std::chrono::milliseconds timeout, const std::string& waiting_for) {
  using Clock = std::chrono::steady_clock;
  // Spin this many polls before yielding: a matching message already in flight completes within
  // a few MPI_Test calls, and yielding earlier would add scheduler latency to every short wait.
  constexpr int kSpinPolls = 64;
  // After this long a peer is busy (a kernel, not a message in flight): sleep between polls.
  constexpr auto kYieldPeriod = std::chrono::milliseconds(1);
  constexpr auto kSleep = std::chrono::microseconds(50);
  const Clock::time_point start = Clock::now();
  // start + timeout overflows the clock's signed count for a huge timeout (and a caller's
  // milliseconds::max() means "no deadline"): saturate at the clock's end instead. A timeout of
  // zero or less times out at the first unfinished poll.
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - start);
  const Clock::time_point deadline =
      timeout >= room ? Clock::time_point::max() : start + std::max(timeout, std::chrono::milliseconds(0));
  for (long polls = 0;; ++polls) {
    Expected<bool> done = poll();
    if (!done) return done.errors();
    if (*done) return ok_status();
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      const auto waited_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count();
      return Error{"", "",
                   "timed out after " + std::to_string(waited_ms) + " ms" +
                       (waiting_for.empty() ? "" : " " + waiting_for)};
    }
    if (polls < kSpinPolls) continue;
    if (now - start < kYieldPeriod) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kSleep);
    }
  }
}

}  // namespace cpbench
