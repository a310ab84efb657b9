// executor_test_util.h — what the MPI tests of attention plans share: every mask kind (sized for
// short test sequences), and one check that a plan executed on a Communicator matches the
// single-device reference (O, LSE, dQ, dK, dV) with each rank moving exactly the plan's bytes.
// Requires: GoogleTest; core/runtime (executor, attention_check). For tests only.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/runtime/attention_check.h"
#include "core/runtime/communicator.h"
#include "core/runtime/executor.h"

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
inline void expect_runs_as_planned(const AttentionPlan& plan, Communicator& comm, uint64_t seed, const std::string& what) {
  OwnedInputs in = make_attention_inputs(plan, seed);
  auto rep = execute_attention(plan, comm, in.view(), true);
  ASSERT_TRUE(rep.ok()) << what << ": " << rep.error_str();
  const ReferenceAttention ref = reference_attention(plan, in, true);
  ASSERT_EQ(rep->home.size(), plan.home[comm.rank()].size()) << what;
  for (const auto& h : rep->home) {
    const CheckResult c = check_home(plan, h, ref, true);
    EXPECT_LE(c.worst, 1.0) << what << " rank " << comm.rank() << ": " << c.where << " off by " << c.max_abs_error;
  }
  const RankBytes predicted = plan_bytes(plan, true);
  EXPECT_EQ(rep->bytes_sent, predicted.sent[comm.rank()]) << what;
  EXPECT_EQ(rep->bytes_received, predicted.received[comm.rank()]) << what;
}

}  // namespace cpbench
