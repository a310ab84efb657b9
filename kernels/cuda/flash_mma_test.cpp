// flash_mma_test.cpp — what of the tensor-core forward and backward (flash_mma.h) a CPU can check: the fragment
// layouts its indexing is written in cover each matrix exactly once, an S accumulator is the P·V
// multiplication's A fragment element for element (the kernel hands P over in registers), and the
// key span a block of query rows walks holds every key any of its rows may see and starts and ends
// on such keys, for every mask kind and tiles over part of the keys; the backward's transposed
// store of dS feeds the dQ multiplication, and it visits every query block that sees its keys.
// The kernels' numbers are checked on a device (flash_mma_gpu_test).
#include "kernels/cuda/flash_mma.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "kernels/reference/attention_testing.h"

namespace cpbench::kernels {
namespace {

// Every (row, col) of a rows × cols matrix held exactly once by (lane, register, half).
template <class Coord>
void covers_exactly_once(int rows, int cols, int regs, int per_reg, Coord coord, bool pair_along_rows) {
  std::set<std::pair<int, int>> seen;
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < regs; ++r)
      for (int half = 0; half < per_reg; ++half) {
        FragCoord c = coord(lane, r);
        (pair_along_rows ? c.row : c.col) += half;
        ASSERT_GE(c.row, 0);
        ASSERT_LT(c.row, rows);
        ASSERT_GE(c.col, 0);
        ASSERT_LT(c.col, cols);
        EXPECT_TRUE(seen.insert({c.row, c.col}).second) << "lane " << lane << " reg " << r << " half " << half;
      }
  EXPECT_EQ(seen.size(), static_cast<size_t>(rows * cols));
}

TEST(MmaFragments, EachLayoutCoversItsMatrixOnce) {
  covers_exactly_once(16, 16, 4, 2, [](int l, int r) { return mma_a_coord(l, r); }, false);
  covers_exactly_once(16, 8, 2, 2, [](int l, int r) { return mma_b_coord(l, r); }, true);
  covers_exactly_once(16, 8, 4, 1, [](int l, int e) { return mma_c_coord(l, e); }, false);
}

// The kernel packs A register r of k-step kk from S n-tile 2·kk + r/2, elements 2·(r%2) and +1.
TEST(MmaFragments, AnAccumulatorPairIsTheNextMultiplicationsAFragment) {
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r)
      for (int half = 0; half < 2; ++half) {
        FragCoord a = mma_a_coord(lane, r);
        a.col += half;
        const int n_tile = r / 2, e = 2 * (r % 2) + half;
        const FragCoord c = mma_c_coord(lane, e);
        EXPECT_EQ(a.row, c.row) << "lane " << lane << " reg " << r;
        EXPECT_EQ(a.col, 8 * n_tile + c.col) << "lane " << lane << " reg " << r;
      }
}

TEST(MmaKeySpans, BlocksWalkEveryKeyTheirRowsMaySee) {
  const int64_t L = 300;
  for (const std::string mask : {"full", "causal", "lambda", "two_range"}) {
    SCOPED_TRACE(mask);
    const VarlenBatch b = testing::make_batch({1, 1, 64, 0.0}, {L}, {L}, testing::mask_by_name(mask));
    for (auto [key_begin, rows_k] : {std::pair<int64_t, int64_t>{0, L}, {100, 150}, {250, 50}})
      for (int64_t row0 = 0; row0 < L; row0 += kMmaRowsPerBlock) {
        const int64_t rows = std::min<int64_t>(kMmaRowsPerBlock, L - row0);
        const KeySpan span = block_key_span(b.row_ranges.data(), row0, rows, key_begin, rows_k);
        int64_t lo = rows_k, hi = 0;
        for (int64_t i = row0; i < row0 + rows; ++i)
          for (int64_t j = 0; j < rows_k; ++j)
            if (key_allowed(b.row_ranges[i], key_begin + j)) lo = std::min(lo, j), hi = std::max(hi, j + 1);
        if (hi == 0) {
          EXPECT_LE(span.hi, span.lo) << "rows " << row0;
        } else {
          EXPECT_EQ(span.lo, lo) << "rows " << row0 << " keys from " << key_begin;
          EXPECT_EQ(span.hi, hi) << "rows " << row0 << " keys from " << key_begin;
        }
      }
  }
}

// The backward stores its Sᵀ accumulators (four warps × 16 keys × 64 query rows) as dS[row][key]:
// every element of the 64 × 64 block once, and the dQ multiplication's A fragments (warp w's 16
// rows, k-steps of 16 keys) read back the element the accumulator at (key, row) held.
TEST(MmaFragments, TheBackwardsTransposedStoreIsTheDqMultiplicationsA) {
  std::map<std::pair<int, int>, std::pair<int, int>> stored;  // (row, key) -> (key, row) of the accumulator
  for (int warp = 0; warp < 4; ++warp)
    for (int lane = 0; lane < 32; ++lane)
      for (int nt = 0; nt < kMmaRowsPerBlock / 8; ++nt)
        for (int e = 0; e < 4; ++e) {
          const FragCoord rk = mma_bwd_row_key(warp, lane, nt, e);
          const FragCoord c = mma_c_coord(lane, e);  // (key within the warp's 16, row within the n-tile)
          ASSERT_LT(rk.row, kMmaRowsPerBlock);
          ASSERT_LT(rk.col, kMmaKeysPerBlock);
          EXPECT_TRUE(stored.insert({{rk.row, rk.col}, {warp * 16 + c.row, nt * 8 + c.col}}).second);
        }
  ASSERT_EQ(stored.size(), static_cast<size_t>(kMmaRowsPerBlock * kMmaKeysPerBlock));
  for (const auto& [row_key, key_row] : stored) {
    EXPECT_EQ(row_key.first, key_row.second);
    EXPECT_EQ(row_key.second, key_row.first);
  }
  std::set<std::pair<int, int>> read;
  for (int warp = 0; warp < 4; ++warp)
    for (int lane = 0; lane < 32; ++lane)
      for (int kk = 0; kk < kMmaKeysPerBlock / 16; ++kk)
        for (int r = 0; r < 4; ++r)
          for (int half = 0; half < 2; ++half) {
            const FragCoord a = mma_a_coord(lane, r);
            read.insert({warp * 16 + a.row, kk * 16 + a.col + half});
          }
  EXPECT_EQ(read.size(), stored.size());
}

// The backward never skips a query block that has a row seeing one of its keys, and for full and
// causal masks (one range per row) visits no other.
TEST(MmaKeySpans, TheBackwardVisitsEveryQueryBlockThatSeesItsKeys) {
  const int64_t L = 300;
  for (const std::string mask : {"full", "causal", "lambda", "two_range"}) {
    SCOPED_TRACE(mask);
    const VarlenBatch b = testing::make_batch({1, 1, 64, 0.0}, {L}, {L}, testing::mask_by_name(mask));
    const bool one_range = mask == "full" || mask == "causal";
    int visited = 0, needed = 0, pairs = 0;
    for (auto [key_begin, rows_k] : {std::pair<int64_t, int64_t>{0, L}, {100, 150}, {250, 50}})
      for (int64_t kb = 0; kb < rows_k; kb += kMmaKeysPerBlock)
        for (int64_t row0 = 0; row0 < L; row0 += kMmaRowsPerBlock) {
          bool meets = false, sees = false;
          for (int64_t i = row0; i < std::min(L, row0 + kMmaRowsPerBlock); ++i) {
            meets = meets || span_meets(row_key_span(b.row_ranges[i], key_begin, rows_k), kb, kb + kMmaKeysPerBlock);
            for (int64_t j = kb; j < std::min(rows_k, kb + kMmaKeysPerBlock); ++j)
              sees = sees || key_allowed(b.row_ranges[i], key_begin + j);
          }
          if (sees) EXPECT_TRUE(meets) << "rows " << row0 << " keys " << key_begin + kb;
          if (one_range) EXPECT_EQ(meets, sees) << "rows " << row0 << " keys " << key_begin + kb;
          visited += meets;
          needed += sees;
          ++pairs;
        }
    EXPECT_GT(needed, 0);
    if (mask == "causal") EXPECT_LT(visited, pairs) << "a causal tile skips the blocks above the diagonal";
  }
}

}  // namespace
}  // namespace cpbench::kernels
