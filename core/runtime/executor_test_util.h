// executor_test_util.h — what the tests of executed attention plans share: every mask kind (sized
// for short test sequences), and the check that a plan executed on a Communicator (MPI ranks, or
// thread ranks in one process) matches the single-device reference (O, LSE, dQ, dK, dV) with each
// rank moving exactly the plan's bytes.
// Requires: GoogleTest; core/runtime (executor, attention_check, thread ranks). For tests only.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/runtime/attention_check.h"
#include "core/runtime/cpu_attention_kernels.h"
#include "core/runtime/communicator.h"
#include "core/runtime/executor.h"
#include "core/runtime/thread_communicator.h"

namespace cpbench {

struct MaskCase {
  const char* name;
  MaskSpec mask;
};

// full, causal, lambda (a 4-token sink and `window_tokens`), shared_question, causal_blockwise
// (blocks of `block_tokens`).
inline std::vector<MaskCase> every_mask(int64_t window_tokens, int64_t block_tokens) {
  MaskSpec lambda{MaskKind::lambda};
  lambda.sink_tokens = 4;
  lambda.window_tokens = window_tokens;
  MaskSpec blockwise{MaskKind::causal_blockwise};
  blockwise.block_tokens = block_tokens;
  return {{"full", MaskSpec{MaskKind::full}},
          {"causal", MaskSpec{MaskKind::causal}},
          {"lambda", lambda},
          {"shared_question", MaskSpec{MaskKind::shared_question}},
          {"causal_blockwise", blockwise}};
}

// Executes `plan` forward and backward on `comm` (its rank = the plan's rank) with inputs of
// `seed`; every home slice within the reference's tolerance, bytes sent and received as
// plan_bytes says. Failures name `what`.
// One rank's executed plan (forward and backward) against the reference and plan_bytes.
inline void expect_rank_as_planned(const AttentionPlan& plan, int rank, const ExecutionReport& rep,
                                   const ReferenceAttention& ref, const std::string& what) {
  ASSERT_EQ(rep.home.size(), plan.home[rank].size()) << what;
  for (const auto& h : rep.home) {
    const CheckResult c = check_home(plan, h, ref, true);
    EXPECT_LE(c.worst, 1.0) << what << " rank " << rank << ": " << c.where << " off by " << c.max_abs_error;
  }
  const RankBytes predicted = plan_bytes(plan, true);
  EXPECT_EQ(rep.bytes_sent, predicted.sent[rank]) << what << " rank " << rank;
  EXPECT_EQ(rep.bytes_received, predicted.received[rank]) << what << " rank " << rank;
}

inline void expect_runs_as_planned(const AttentionPlan& plan, Communicator& comm, uint64_t seed, const std::string& what) {
  OwnedInputs in = make_attention_inputs(plan, seed);
  auto rep = execute_attention(plan, comm, in.view(), true);
  ASSERT_TRUE(rep.ok()) << what << ": " << rep.error_str();
  expect_rank_as_planned(plan, comm.rank(), *rep, reference_attention(plan, in, true), what);
}

// The same on plan.ranks thread ranks of this process: inputs and the reference made once, every
// rank's kernels on one OpenMP thread (a rank is a core, as under mpirun).
inline void expect_runs_on_thread_ranks(const AttentionPlan& plan, uint64_t seed, const std::string& what) {
  const OwnedInputs in = make_attention_inputs(plan, seed);
  const ReferenceAttention ref = reference_attention(plan, in, true);
  std::vector<ExecutionReport> reports(static_cast<size_t>(plan.ranks));
  kernels::FlashConfig one_thread;
  one_thread.threads = 1;
  const std::vector<Status> st = run_thread_ranks(
      plan.ranks,
      [&](Communicator& comm) -> Status {
        auto rep = execute_attention(plan, comm, in.view(), true, one_thread);
        if (!rep) return rep.errors();
        reports[static_cast<size_t>(comm.rank())] = std::move(*rep);
        return ok_status();
      },
      std::chrono::seconds(60));
  for (int r = 0; r < plan.ranks; ++r) {
    ASSERT_TRUE(st[static_cast<size_t>(r)]) << what << " rank " << r << ": " << st[static_cast<size_t>(r)].error_str();
    expect_rank_as_planned(plan, r, reports[static_cast<size_t>(r)], ref, what);
  }
}

}  // namespace cpbench
