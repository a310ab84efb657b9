// cp_layouts_test_util.h — the static-layout plans the tests of executed plans share (MPI ranks in
// core/runtime, thread ranks in core/strategies): a layout on cp ranks of a short odd-length batch,
// in the CPU style or an experiment's. For tests only.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/layouts/cp_layouts.h"

namespace cpbench {

// How a test plan runs: the CPU style (fp32 on the wire, one kernel call per tile, the three-phase
// backward) or an experiment's (bf16 on the wire, fused stages, pipelined backward).
struct RunStyle {
  bool experiment = false;
  const char* name() const { return experiment ? "bf16 fused pipelined" : "fp32 per-tile"; }
};

// A static layout's plan of `lengths` on cp ranks, 8 query heads, 4 K/V heads, d = 24, padded as
// the layout needs; a2a+p2p in groups of 2, double_ring in windows (cp 4: two windows of 2 ranks;
// cp 8: two of 2 × 2 ranks). In the experiment style the rings pass fp32 dK/dV as
// ring-flash-attention and LoongTrain do (attention_grad_bytes 4).
inline Expected<AttentionPlan> test_layout_plan(const std::string& layout, const MaskSpec& mask, int cp,
                                                std::vector<int64_t> lengths, RunStyle style) {
  CpLayoutRequest req;
  req.layout = layout;
  req.cp = cp;
  req.a2a_size = layout == "a2a+p2p" ? std::min(cp, 2) : layout == "double_ring" ? (cp >= 8 ? 2 : 1) : 0;
  if (layout == "double_ring") req.window = cp / req.a2a_size >= 4 ? 2 : 1;
  req.seq_lengths = std::move(lengths);
  req.mask = mask;
  req.heads_q = 8;
  req.heads_kv = 4;
  req.head_dim = 24;
  req.pad = true;
  auto plan = plan_cp_layout(req);
  if (plan && style.experiment) {
    plan->value_bytes = 2;
    if (layout == "ring" || layout == "zigzag" || layout == "double_ring") plan->grad_bytes = 4;
    plan->fused_stages = plan->pipelined_backward = true;
  }
  return plan;
}

// A GoogleTest name for a parameter that is a layout name ("a2a+p2p" → "a2a_p2p"), for
// INSTANTIATE_TEST_SUITE_P over layouts.
struct LayoutTestName {
  template <class Info>
  std::string operator()(const Info& info) const {
    std::string n = info.param;
    std::replace(n.begin(), n.end(), '+', '_');
    return n;
  }
};

}  // namespace cpbench
