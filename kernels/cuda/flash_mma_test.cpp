// flash_mma_test.cpp — what of the tensor-core forward (flash_mma.h) a CPU can check: the fragment
// layouts its indexing is written in cover each matrix exactly once, an S accumulator is the P·V
// multiplication's A fragment element for element (the kernel hands P over in registers), and the
// key span a block of query rows walks holds every key any of its rows may see and starts and ends
// on such keys, for every mask kind and tiles over part of the keys. The kernel's numbers are
// checked on a device (flash_mma_gpu_test).
#include "kernels/cuda/flash_mma.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace cpbench::kernels
