// watchdog.h — run_with_timeout: poll an operation until it completes, fails or misses a deadline.
// Requires: a poll function that never blocks (MPI_Test, cudaStreamQuery, ncclCommGetAsyncError).
// Note: this is how a dead or hung peer becomes an error instead of a hang; the caller decides
// what follows (withdraw the operation, or abort the job naming the peer in the message).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "core/common/expected.h"

namespace cpbench {

// Calls `poll` until it returns true (ok) or an error (that error), or until `timeout` has passed
// (an error "timed out after N ms" followed by `waiting_for`, e.g. "waiting for rank 1"). Polls
// back-to-back at first, then yields and finally sleeps 50 us between polls, so a wait does not
// starve the peer it waits for when ranks share cores (mpirun --oversubscribe).
Status run_with_timeout(const std::function<Expected<bool>()>& poll,
                        std::chrono::milliseconds timeout, const std::string& waiting_for);

}  // namespace cpbench
