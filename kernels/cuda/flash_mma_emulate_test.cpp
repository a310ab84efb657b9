// flash_mma_emulate_test.cpp — the tensor-core kernels' own code (flash_mma_body.h), run on the CPU
// by flash_mma_emulate (a block's threads as threads, each warp instruction from the PTX ISA's
// fragment layouts), gives the SIMT kernel's host results on the same bf16 inputs: forward (O, LSE)
// and backward (dQ, dK, dV added to what they held), every mask kind, GQA, head dims 64 and 128,
// whole tiles and tiles over part of the keys, lengths that are not multiples of the 64-row
// blocks. The same tolerances as flash_mma_gpu_test, which checks the device's instructions.
#include "kernels/cuda/flash_mma_emulate.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/tile_test_util.h"

namespace cpbench::kernels {
namespace {

void emulated_equals_simt(const std::string& mask, int64_t D, int64_t L, int64_t key_begin, int64_t rows_k) {
  const testing::TileProblem p = testing::tile_problem(mask, D, L, key_begin, rows_k, 4, 2, 31);
  SCOPED_TRACE(p.what);
  std::vector<float> out(p.out.size(), -7.0f), lse(p.lse.size(), -7.0f);
  mma_forward_emulated(p.tile, out.data(), lse.data(), L);
  EXPECT_TRUE(testing::all_close(out, p.out, 4e-3, 1e-2)) << "O";
  EXPECT_TRUE(testing::all_close(lse, p.lse, 1e-4, 1e-4)) << "LSE";

  std::vector<float> dq = p.dq0(), dk = p.dkv0(), dv = p.dkv0();
  mma_backward_emulated(p.tile, p.out.data(), p.lse.data(), L, p.dout.data(), dq.data(), dk.data(), dv.data());
  EXPECT_TRUE(testing::all_close(dq, p.dq, 1e-2, 2e-2)) << "dQ";
  EXPECT_TRUE(testing::all_close(dk, p.dk, 3e-2, 2e-2)) << "dK";
  EXPECT_TRUE(testing::all_close(dv, p.dv, 3e-2, 2e-2)) << "dV";
}

TEST(MmaEmulated, TheKernelsCodeGivesTheSimtKernelsResults) {
  for (const std::string mask : {"full", "causal", "lambda", "two_range"}) emulated_equals_simt(mask, 64, 100, 0, 100);
  emulated_equals_simt("two_range", 64, 100, 10, 80);  // part of the keys, which some rows see
  emulated_equals_simt("causal", 64, 100, 40, 60);      // part of the keys, rows before them see none
  emulated_equals_simt("causal", 128, 70, 0, 70);
}

TEST(MmaEmulated, RefusesWhatTheKernelsRefuse) {
  SimtTile<Bf16> t;
  t.head_dim = 96;
  EXPECT_THROW(mma_forward_emulated(t, nullptr, nullptr, 0), std::invalid_argument);
  EXPECT_THROW(mma_backward_emulated(t, nullptr, nullptr, 0, nullptr, nullptr, nullptr, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace cpbench::kernels
