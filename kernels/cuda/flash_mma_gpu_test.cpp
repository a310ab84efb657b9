// flash_mma_gpu_test.cpp (label gpu: built everywhere CUDA is, run on a device by
// scripts/device_check.sh) — the tensor-core forward and backward give the SIMT kernel's host
// results on the same bf16 inputs: every mask kind, GQA, head dims 64 and 128, a whole tile and
// tiles over part of the keys (rows without keys there: O = 0, LSE = −inf), lengths that are not
// multiples of the 64-row blocks. Tolerances: P enters P·V rounded to bf16 (relative error ≤ 2⁻⁹
// per element), so O atol 4e-3, rtol 1e-2; LSE comes from fp32 scores, atol and rtol 1e-4.
#include "kernels/cuda/flash_mma.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/gpu_test_util.h"

namespace cpbench::kernels {
namespace {

using testing::download;
using testing::upload;

// The forward (O, LSE) and the backward (dQ, dK, dV added) on the device, each against the SIMT
// kernel's host results. Tolerances: O as the header says; P and dS enter their multiplications
// rounded to bf16: dQ atol 1e-2, rtol 2e-2; dK and dV atol 3e-2, since a key that many rows seeing
// few keys attend to (two_range's first keys: P of 0.1–0.5 from about a thousand rows) sums that
// many rounded terms (a CPU emulation of the kernel's fragments: excess up to 0.0055 over 1e-2).
void mma_equals_simt(const std::string& mask, int64_t D, int64_t L, int64_t key_begin, int64_t rows_k, bool backward) {
  const testing::TileProblem p = testing::tile_problem(mask, D, L, key_begin, rows_k, 8, 2, backward ? 21 : 11);
  SCOPED_TRACE(p.what + (backward ? " backward" : " forward"));
  Bf16 *gq = upload(p.q), *gk = upload(p.k), *gv = upload(p.v), *gdo = upload(p.dout);
  KeyRanges* granges = upload(p.batch.row_ranges);
  SimtTile<Bf16> dev = p.tile;
  dev.q = gq, dev.k = gk + key_begin * p.Hkv * D, dev.v = gv + key_begin * p.Hkv * D, dev.ranges = granges;
  std::vector<void*> buffers{gq, gk, gv, gdo, granges};
  if (!backward) {
    float *gout = upload(std::vector<float>(p.out.size(), -7.0f)), *glse = upload(std::vector<float>(p.lse.size(), -7.0f));
    buffers.insert(buffers.end(), {gout, glse});
    ASSERT_TRUE(mma_forward_supports(dev));
    ASSERT_EQ(mma_forward_cuda(dev, gout, glse, L, nullptr), 0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(testing::all_close(download(gout, p.out.size()), p.out, 4e-3, 1e-2));
    EXPECT_TRUE(testing::all_close(download(glse, p.lse.size()), p.lse, 1e-4, 1e-4));
  } else {
    float *gout = upload(p.out), *glse = upload(p.lse), *gdq = upload(p.dq0()), *gdk = upload(p.dkv0()),
          *gdv = upload(p.dkv0());
    buffers.insert(buffers.end(), {gout, glse, gdq, gdk, gdv});
    ASSERT_TRUE(mma_backward_supports(dev, gdo));
    ASSERT_EQ(mma_backward_cuda(dev, gout, glse, L, gdo, gdq, gdk, gdv, nullptr), 0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(testing::all_close(download(gdq, p.dq.size()), p.dq, 1e-2, 2e-2)) << "dQ";
    EXPECT_TRUE(testing::all_close(download(gdk, p.dk.size()), p.dk, 3e-2, 2e-2)) << "dK";
    EXPECT_TRUE(testing::all_close(download(gdv, p.dv.size()), p.dv, 3e-2, 2e-2)) << "dV";
  }
  for (void* b : buffers) cudaFree(b);
}

// Both passes need a device; without one they stop at once.
class MmaGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess) << "no CUDA device: run this on a GPU (scripts/device_check.sh)";
    ASSERT_GT(devices, 0);
  }
  // Every mask kind at head dims 64 and 128: a whole tile, a partial-key tile two_range's rows
  // see (its second range), one they do not, and a long sequence's last keys.
  static void every_case(bool backward) {
    for (const std::string mask : {"full", "causal", "lambda", "two_range"})
      for (int64_t D : {64, 128}) {
        mma_equals_simt(mask, D, 300, 0, 300, backward);
        mma_equals_simt(mask, D, 300, 10, 100, backward);
        mma_equals_simt(mask, D, 300, 100, 150, backward);
        mma_equals_simt(mask, D, 777, 700, 77, backward);
      }
  }
};

TEST_F(MmaGpu, ForwardGivesTheSimtKernelsResults) { every_case(false); }

TEST_F(MmaGpu, BackwardAddsTheSimtKernelsGradients) { every_case(true); }

// A tile the kernel cannot take is refused before anything is launched.
TEST(MmaGpuRefusal, RefusesHeadDimsItHasNoKernelFor) {
  SimtTile<Bf16> t;
  t.head_dim = 96;
  EXPECT_FALSE(mma_forward_supports(t));
  EXPECT_EQ(mma_forward_cuda(t, nullptr, nullptr, 0, nullptr), static_cast<int>(cudaErrorInvalidValue));
  EXPECT_FALSE(mma_backward_supports(t, nullptr));
  EXPECT_EQ(mma_backward_cuda(t, nullptr, nullptr, 0, nullptr, nullptr, nullptr, nullptr, nullptr),
            static_cast<int>(cudaErrorInvalidValue));
}

}  // namespace
}  // namespace cpbench::kernels
