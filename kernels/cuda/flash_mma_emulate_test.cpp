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
#include "kernels/reference/attention_testing.h"

namespace cpbench::kernels {
namespace {

using testing::bf16;

void emulated_equals_simt(const std::string& mask, int64_t D, int64_t L, int64_t key_begin, int64_t rows_k) {
  SCOPED_TRACE(mask + " d" + std::to_string(D) + " L" + std::to_string(L) + " keys " + std::to_string(key_begin) +
               "+" + std::to_string(rows_k));
  const int64_t Hq = 4, Hkv = 2;
  const VarlenBatch b = testing::make_batch({Hq, Hkv, D, 0.0}, {L}, {L}, testing::mask_by_name(mask));
  const auto q = bf16(testing::random_tensor(L * Hq * D, 31)), k = bf16(testing::random_tensor(L * Hkv * D, 32)),
             v = bf16(testing::random_tensor(L * Hkv * D, 33)), dO = bf16(testing::random_tensor(L * Hq * D, 34));
  const SimtTile<Bf16> t = testing::tile_of(q.data(), k.data() + key_begin * Hkv * D, v.data() + key_begin * Hkv * D,
                                            b.row_ranges.data(), L, rows_k, key_begin, b.dims);
  std::vector<float> out(L * Hq * D), lse(Hq * L);
  simt_forward_host(t, out.data(), lse.data(), L);
  std::vector<float> emu_out(out.size(), -7.0f), emu_lse(lse.size(), -7.0f);
  mma_forward_emulated(t, emu_out.data(), emu_lse.data(), L);
  EXPECT_TRUE(testing::all_close(emu_out, out, 4e-3, 1e-2)) << "O";
  EXPECT_TRUE(testing::all_close(emu_lse, lse, 1e-4, 1e-4)) << "LSE";

  std::vector<float> dq(L * Hq * D, 0.5f), dk(rows_k * Hkv * D, 0.5f), dv(rows_k * Hkv * D, 0.5f);
  std::vector<float> emu_dq = dq, emu_dk = dk, emu_dv = dv;
  simt_backward_host(t, out.data(), lse.data(), L, dO.data(), dq.data(), dk.data(), dv.data());
  mma_backward_emulated(t, out.data(), lse.data(), L, dO.data(), emu_dq.data(), emu_dk.data(), emu_dv.data());
  EXPECT_TRUE(testing::all_close(emu_dq, dq, 1e-2, 2e-2)) << "dQ";
  EXPECT_TRUE(testing::all_close(emu_dk, dk, 3e-2, 2e-2)) << "dK";
  EXPECT_TRUE(testing::all_close(emu_dv, dv, 3e-2, 2e-2)) << "dV";
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
