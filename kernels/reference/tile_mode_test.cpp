// tile_mode_test.cpp — the tile-mode classifier against the masks by brute force: for every mask
// cpbench knows and many tiles of many sequences, a tile sent to a library mode is exactly that
// mode's allowed set (every (i, j) compared with mask_row), with no fully masked row; the tiles a
// static layout makes of full and causal masks go to the library; and the counts of each mode
// show both paths are exercised.
#include "kernels/reference/tile_mode.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "core/workload/mask.h"

namespace cpbench::kernels {
namespace {

struct Tile {
  std::vector<KeyRanges> ranges;
  TileInput input;
};

// Rows [q0, q0 + rows_q) × keys [k0, k0 + rows_k) of a sequence of L tokens under `mask`.
Tile make_tile(const MaskSpec& mask, int64_t L, int64_t q0, int64_t rows_q, int64_t k0, int64_t rows_k) {
  Tile t;
  for (int64_t q = q0; q < q0 + rows_q; ++q) {
    const cpbench::KeyRanges r = mask_row(mask, L, q);
    t.ranges.push_back({r.begin0, r.end0, r.begin1, r.end1});
  }
  t.input.rows_q = rows_q;
  t.input.ranges = t.ranges.data();
  t.input.rows_k = rows_k;
  t.input.key_begin = k0;
  return t;
}

// The classification of `t` is exact: a library mode allows precisely the mask's pairs, an empty
// tile has none, and a custom tile is one no mode matches.
void expect_exact(const MaskSpec& mask, int64_t L, int64_t q0, int64_t rows_q, int64_t k0, int64_t rows_k,
                  std::map<TileMask, int>& seen) {
  const Tile t = make_tile(mask, L, q0, rows_q, k0, rows_k);
  const TileMode mode = classify_tile(t.input);
  ++seen[mode.mask];
  int64_t pairs = 0;
  bool empty_row = false;
  for (int64_t i = 0; i < rows_q; ++i) {
    const cpbench::KeyRanges r = mask_row(mask, L, q0 + i);
    int64_t row_pairs = 0;
    for (int64_t j = 0; j < rows_k; ++j) {
      const bool allowed = r.contains(k0 + j);
      row_pairs += allowed;
      if (mode.mask != TileMask::custom && mode.mask != TileMask::empty)
        ASSERT_EQ(tile_mode_allows(mode, rows_q, rows_k, i, j), allowed)
            << tile_mask_name(mode.mask) << " window " << mode.window << ": row " << i << " key " << j << " of tile q ["
            << q0 << ", +" << rows_q << ") k [" << k0 << ", +" << rows_k << ") of L " << L;
    }
    pairs += row_pairs;
    empty_row |= row_pairs == 0;
  }
  if (mode.mask == TileMask::empty) EXPECT_EQ(pairs, 0);
  if (mode.mask != TileMask::empty && mode.mask != TileMask::custom) EXPECT_FALSE(empty_row);
  if (mode.mask == TileMask::custom) {
    // No mode fits: check the ones the classifier would have tried.
    bool fits = pairs == 0;
    for (TileMask m : {TileMask::full, TileMask::causal_top_left, TileMask::causal_bottom_right})
      for (int64_t w = 0; w <= rows_k + rows_q && !fits && !empty_row; ++w) {
        if (m == TileMask::full && w > 0) break;
        bool all = true;
        for (int64_t i = 0; i < rows_q && all; ++i) {
          const cpbench::KeyRanges r = mask_row(mask, L, q0 + i);
          for (int64_t j = 0; j < rows_k && all; ++j) all = tile_mode_allows({m, w}, rows_q, rows_k, i, j) == r.contains(k0 + j);
        }
        fits = all;
      }
    EXPECT_FALSE(fits) << "a custom tile that a library mode computes: q [" << q0 << ", +" << rows_q << ") k [" << k0
                       << ", +" << rows_k << ") of L " << L;
  }
}

std::vector<MaskSpec> masks() {
  MaskSpec lambda{MaskKind::lambda};
  lambda.sink_tokens = 3;
  lambda.window_tokens = 9;
  MaskSpec question{MaskKind::shared_question};
  MaskSpec blockwise{MaskKind::causal_blockwise};
  blockwise.block_tokens = 5;
  return {MaskSpec{MaskKind::full}, MaskSpec{MaskKind::causal}, lambda, question, blockwise};
}

TEST(TileMode, EveryMaskEveryTileByBruteForce) {
  std::mt19937 rng(5);
  std::map<TileMask, int> seen;
  for (const MaskSpec& mask : masks())
    for (int64_t L : {1, 7, 24, 40}) {
      for (int trial = 0; trial < 300; ++trial) {
        std::uniform_int_distribution<int64_t> pos(0, L - 1);
        const int64_t q0 = pos(rng), k0 = pos(rng);
        const int64_t rows_q = std::uniform_int_distribution<int64_t>(1, L - q0)(rng);
        const int64_t rows_k = std::uniform_int_distribution<int64_t>(1, L - k0)(rng);
        expect_exact(mask, L, q0, rows_q, k0, rows_k, seen);
        if (HasFatalFailure()) return;
      }
    }
  // Both paths and every library mode occur.
  for (TileMask m : {TileMask::empty, TileMask::full, TileMask::causal_top_left, TileMask::causal_bottom_right,
                     TileMask::custom})
    EXPECT_GT(seen[m], 0) << tile_mask_name(m);
}

TEST(TileMode, TheTilesOfStaticLayoutsGoToTheLibrary) {
  const MaskSpec causal{MaskKind::causal};
  // A zigzag rank's diagonal tile (its chunk against itself), a chunk against an earlier chunk,
  // a whole sequence, and one rank's queries against the whole sequence's keys (all-gather CP).
  EXPECT_EQ(classify_tile(make_tile(causal, 64, 16, 8, 16, 8).input), (TileMode{TileMask::causal_top_left, 0}));
  EXPECT_EQ(classify_tile(make_tile(causal, 64, 40, 8, 8, 8).input), (TileMode{TileMask::full, 0}));
  EXPECT_EQ(classify_tile(make_tile(causal, 64, 0, 64, 0, 64).input), (TileMode{TileMask::causal_top_left, 0}));
  EXPECT_EQ(classify_tile(make_tile(causal, 64, 48, 16, 0, 64).input), (TileMode{TileMask::causal_bottom_right, 0}));
  EXPECT_EQ(classify_tile(make_tile(causal, 64, 8, 8, 40, 8).input).mask, TileMask::empty);
  EXPECT_EQ(classify_tile(make_tile(MaskSpec{MaskKind::full}, 64, 8, 8, 40, 8).input).mask, TileMask::full);
  // Lambda without its sink in the tile is a sliding window; with the sink and a gap, custom.
  MaskSpec lambda{MaskKind::lambda};
  lambda.sink_tokens = 4;
  lambda.window_tokens = 8;
  EXPECT_EQ(classify_tile(make_tile(lambda, 64, 32, 16, 24, 24).input), (TileMode{TileMask::causal_bottom_right, 8}));
  EXPECT_EQ(classify_tile(make_tile(lambda, 64, 32, 16, 0, 48).input).mask, TileMask::custom);
}

}  // namespace
}  // namespace cpbench::kernels
