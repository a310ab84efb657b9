// sdpa_graph_test.cpp — every tile mode the fast path can emit validates as a cuDNN SDPA graph at
// sm 90 (Hopper), forward and backward, dense and THD-ragged, MHA and GQA, head dims 64 and 128:
// checked without a GPU (cuDNN's support rules only). The modes come from the classifier on tiles
// a plan holds; a shape cuDNN does not support fails, so the check is not vacuous. validate() applies
// cudnn-frontend's support rules (the forward's head-dim limits, for one, are cuDNN's own, met
// only when a plan is built on a device: scripts/device_check.sh's part).
#include "kernels/cudnn/sdpa_graph.h"

#include <vector>

#include <gtest/gtest.h>

namespace cpbench::kernels {
namespace {

// A tile of rows [q0, q0 + rows_q) against keys [k0, k0 + rows_k) of one sequence, each row
// allowed the keys [lo(p), p] (causal with an optional window of w keys: lo = p − w + 1).
TileMode classify_causal(int64_t q0, int64_t rows_q, int64_t k0, int64_t rows_k, int64_t window) {
  std::vector<KeyRanges> ranges(static_cast<size_t>(rows_q));
  for (int64_t i = 0; i < rows_q; ++i) {
    const int64_t p = q0 + i;
    ranges[static_cast<size_t>(i)] = {window > 0 ? std::max<int64_t>(0, p - window + 1) : 0, p + 1, 0, 0};
  }
  TileInput t;
  t.rows_q = rows_q;
  t.ranges = ranges.data();
  t.rows_k = rows_k;
  t.key_begin = k0;
  return classify_tile(t);
}

TEST(SdpaGraph, EveryModeThePathEmitsValidatesAtSm90) {
  // Modes as the classifier reads them off a plan's tiles.
  const TileMode diagonal = classify_causal(0, 256, 0, 256, 0);       // a zigzag chunk against itself
  const TileMode history = classify_causal(256, 128, 0, 384, 0);      // rows after earlier keys: bottom-right
  const TileMode full = classify_causal(512, 128, 0, 256, 0);         // a later chunk against an earlier one
  const TileMode window = classify_causal(1024, 128, 896, 256, 128);  // a sliding window (lambda without sink)
  ASSERT_EQ(diagonal.mask, TileMask::causal_top_left);
  ASSERT_EQ(history.mask, TileMask::causal_bottom_right);
  ASSERT_EQ(full.mask, TileMask::full);
  ASSERT_EQ(window.mask, TileMask::causal_bottom_right);
  ASSERT_GT(window.window, 0);
  int validated = 0;
  for (const TileMode& mode : {diagonal, history, full, window, TileMode{TileMask::causal_top_left, 64}}) {
    for (bool backward : {false, true})
      for (bool ragged : {false, true})
        for (int64_t d : {64, 128})
          for (int64_t kv_heads : {8, 2}) {
            SdpaShape s;
            s.batch = ragged ? 4 : 1;
            s.heads_q = 8;
            s.heads_kv = kv_heads;
            s.s_q = 256;
            s.s_kv = mode.mask == TileMask::causal_top_left ? 256 : 512;
            s.head_dim = d;
            s.ragged = ragged;
            const SdpaStatus st = validate_sdpa_graph(s, mode, backward, 90);
            EXPECT_TRUE(st.ok) << tile_mask_name(mode.mask) << " window " << mode.window << (backward ? " backward" : " forward")
                               << (ragged ? " ragged" : " dense") << " d" << d << " kv " << kv_heads << ": " << st.message;
            ++validated;
          }
  }
  EXPECT_EQ(validated, 5 * 16);
}

TEST(SdpaGraph, WhatCuDnnDoesNotRunIsRefusedWithTheReason) {
  SdpaShape s;
  s.heads_q = s.heads_kv = 4;
  s.s_q = s.s_kv = 128;
  s.head_dim = 264;  // beyond Hopper's fused backward (head dims ≤ 256, multiples of 8)
  const SdpaStatus big = validate_sdpa_graph(s, TileMode{TileMask::full, 0}, true, 90);
  EXPECT_FALSE(big.ok);
  EXPECT_NE(big.message.find("hidden_dim"), std::string::npos) << big.message;
  s.head_dim = 128;
  for (TileMask m : {TileMask::custom, TileMask::empty}) {
    const SdpaStatus st = validate_sdpa_graph(s, TileMode{m, 0}, false, 90);
    EXPECT_FALSE(st.ok);
    EXPECT_NE(st.message.find("is not sent to cuDNN"), std::string::npos) << st.message;
  }
}

}  // namespace
}  // namespace cpbench::kernels
