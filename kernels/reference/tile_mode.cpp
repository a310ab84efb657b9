#include "kernels/reference/tile_mode.h"

#include <algorithm>
#include <vector>

namespace cpbench::kernels {

const char* tile_mask_name(TileMask m) {
  switch (m) {
    case TileMask::empty: return "empty";
    case TileMask::full: return "full";
    case TileMask::causal_top_left: return "causal_top_left";
    case TileMask::causal_bottom_right: return "causal_bottom_right";
    case TileMask::custom: return "custom";
  }
  return "?";
}

bool tile_mode_allows(const TileMode& mode, int64_t s_q, int64_t s_kv, int64_t i, int64_t j) {
  if (i < 0 || i >= s_q || j < 0 || j >= s_kv) return false;
  switch (mode.mask) {
    case TileMask::empty:
    case TileMask::custom: return false;
    case TileMask::full: return true;
    case TileMask::causal_top_left:
    case TileMask::causal_bottom_right: {
      const int64_t offset = mode.mask == TileMask::causal_top_left ? 0 : s_kv - s_q;
      return j <= i + offset && (mode.window == 0 || j > i + offset - mode.window);
    }
  }
  return false;
}

TileMode classify_tile(const TileInput& tile) {
  const int64_t s_q = tile.rows_q, s_kv = tile.rows_k;
  // Each row's allowed keys in tile columns: one interval [lo, hi) or custom.
  std::vector<int64_t> lo(static_cast<size_t>(s_q)), hi(static_cast<size_t>(s_q));
  bool any = false, all_full = true;
  for (int64_t i = 0; i < s_q; ++i) {
    int64_t b0, e0, b1, e1;
    const int64_t n = clip_ranges(tile.ranges[i], tile.key_begin, tile.key_begin + s_kv, b0, e0, b1, e1);
    if (n == 0) {
      lo[i] = hi[i] = 0;
      all_full = false;
      continue;
    }
    any = true;
    if (e1 > b1) return {TileMask::custom, 0};  // two separate intervals (clip_ranges merges touching ones)
    lo[i] = b0 - tile.key_begin;
    hi[i] = e0 - tile.key_begin;
    all_full &= lo[i] == 0 && hi[i] == s_kv;
  }
  if (!any) return {TileMask::empty, 0};
  if (all_full) return {TileMask::full, 0};
  for (int64_t i = 0; i < s_q; ++i)
    if (hi[i] == lo[i]) return {TileMask::custom, 0};  // a fully masked row beside allowed ones
  // A causal mode with the diagonal at `offset`, and the window its left edge implies.
  for (const TileMask m : {TileMask::causal_top_left, TileMask::causal_bottom_right}) {
    const int64_t offset = m == TileMask::causal_top_left ? 0 : s_kv - s_q;
    bool right = true;
    for (int64_t i = 0; i < s_q && right; ++i) right = hi[i] == std::min(s_kv, i + offset + 1);
    if (!right) continue;
    // The window: the first row whose left edge is above 0 fixes it; every row must agree.
    int64_t window = 0;
    for (int64_t i = 0; i < s_q && window == 0; ++i)
      if (lo[i] > 0) window = i + offset + 1 - lo[i];
    TileMode mode{m, window};
    bool left = window >= 0;
    for (int64_t i = 0; i < s_q && left; ++i)
      left = lo[i] == (window == 0 ? 0 : std::max<int64_t>(0, i + offset + 1 - window));
    if (left) return mode;
  }
  return {TileMask::custom, 0};
}

}  // namespace cpbench::kernels
