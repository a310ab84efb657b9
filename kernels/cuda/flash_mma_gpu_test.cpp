// flash_mma_gpu_test.cpp (label gpu: built everywhere CUDA is, run on a device by
// scripts/device_check.sh) — the tensor-core forward and backward give the SIMT kernel's host
// results on the same bf16 inputs: every mask kind, GQA, head dims 64 and 128, a whole tile and
// tiles over part of the keys (rows without keys there: O = 0, LSE = −inf), lengths that are not
// multiples of the 64-row blocks. Tolerances: P enters P·V rounded to bf16 (relative error ≤ 2⁻⁹ per element), so
// O atol 4e-3, rtol 1e-2; LSE comes from fp32 scores, atol and rtol 1e-4.
#include "kernels/cuda/flash_mma.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/gpu_test_util.h"
#include "kernels/reference/attention_testing.h"

namespace cpbench::kernels {
namespace {

using testing::bf16;
using testing::download;
using testing::upload;

void mma_equals_simt(const std::string& mask, int64_t D, int64_t L, int64_t key_begin, int64_t rows_k) {
  SCOPED_TRACE(mask + " d" + std::to_string(D) + " L" + std::to_string(L) + " keys " + std::to_string(key_begin) +
               "+" + std::to_string(rows_k));
  const int64_t Hq = 8, Hkv = 2;
  const VarlenBatch b = testing::make_batch({Hq, Hkv, D, 0.0}, {L}, {L}, testing::mask_by_name(mask));
  const auto q = bf16(testing::random_tensor(L * Hq * D, 11)), k = bf16(testing::random_tensor(L * Hkv * D, 12)),
             v = bf16(testing::random_tensor(L * Hkv * D, 13));
  const SimtTile<Bf16> host = testing::tile_of(q.data(), k.data() + key_begin * Hkv * D, v.data() + key_begin * Hkv * D,
                                               b.row_ranges.data(), L, rows_k, key_begin, b.dims);
  std::vector<float> out(L * Hq * D), lse(Hq * L);
  simt_forward_host(host, out.data(), lse.data(), L);

  Bf16 *dq = upload(q), *dk = upload(k), *dv = upload(v);
  KeyRanges* dranges = upload(b.row_ranges);
  float *dout = upload(std::vector<float>(out.size(), -7.0f)), *dlse = upload(std::vector<float>(lse.size(), -7.0f));
  SimtTile<Bf16> dev = host;
  dev.q = dq, dev.k = dk + key_begin * Hkv * D, dev.v = dv + key_begin * Hkv * D, dev.ranges = dranges;
  ASSERT_TRUE(mma_forward_supports(dev));
  ASSERT_EQ(mma_forward_cuda(dev, dout, dlse, L, nullptr), 0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(testing::all_close(download(dout, out.size()), out, 4e-3, 1e-2));
  EXPECT_TRUE(testing::all_close(download(dlse, lse.size()), lse, 1e-4, 1e-4));
  for (void* p : {(void*)dq, (void*)dk, (void*)dv, (void*)dranges, (void*)dout, (void*)dlse}) cudaFree(p);
}

TEST(MmaGpu, ForwardGivesTheSimtKernelsResults) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess) << "no CUDA device: run this on a GPU (scripts/device_check.sh)";
  ASSERT_GT(devices, 0);
  for (const std::string mask : {"full", "causal", "lambda", "two_range"})
    for (int64_t D : {64, 128}) {
      mma_equals_simt(mask, D, 300, 0, 300);
      mma_equals_simt(mask, D, 300, 10, 100);  // keys two_range's rows see (its second range)
      mma_equals_simt(mask, D, 300, 100, 150);
      mma_equals_simt(mask, D, 777, 700, 77);
    }
}

// The tensor-core backward adds the SIMT backward's gradients (host, same bf16 Q, K, V and dO, the
// SIMT forward's fp32 O and LSE) to what dq, dk and dv held. P and dS enter their multiplications
// rounded to bf16: dQ atol 1e-2, rtol 2e-2; dK and dV atol 3e-2, since a key that many rows seeing
// few keys attend to (two_range's first keys: P of 0.1–0.5 from about a thousand rows) sums that
// many rounded terms (a CPU emulation of the kernel's fragments: excess up to 0.0055 over 1e-2).
void mma_backward_equals_simt(const std::string& mask, int64_t D, int64_t L, int64_t key_begin, int64_t rows_k) {
  SCOPED_TRACE(mask + " backward d" + std::to_string(D) + " L" + std::to_string(L) + " keys " +
               std::to_string(key_begin) + "+" + std::to_string(rows_k));
  const int64_t Hq = 8, Hkv = 2;
  const VarlenBatch b = testing::make_batch({Hq, Hkv, D, 0.0}, {L}, {L}, testing::mask_by_name(mask));
  const auto q = bf16(testing::random_tensor(L * Hq * D, 21)), k = bf16(testing::random_tensor(L * Hkv * D, 22)),
             v = bf16(testing::random_tensor(L * Hkv * D, 23)), dO = bf16(testing::random_tensor(L * Hq * D, 24));
  const SimtTile<Bf16> host = testing::tile_of(q.data(), k.data() + key_begin * Hkv * D, v.data() + key_begin * Hkv * D,
                                               b.row_ranges.data(), L, rows_k, key_begin, b.dims);
  std::vector<float> out(L * Hq * D), lse(Hq * L);
  simt_forward_host(host, out.data(), lse.data(), L);
  std::vector<float> dq(L * Hq * D, 0.5f), dk(rows_k * Hkv * D, 0.5f), dv(rows_k * Hkv * D, 0.5f);
  const std::vector<float> dq0 = dq, dk0 = dk, dv0 = dv;
  simt_backward_host(host, out.data(), lse.data(), L, dO.data(), dq.data(), dk.data(), dv.data());

  Bf16 *gq = upload(q), *gk = upload(k), *gv = upload(v), *gdo = upload(dO);
  KeyRanges* granges = upload(b.row_ranges);
  float *gout = upload(out), *glse = upload(lse), *gdq = upload(dq0), *gdk = upload(dk0), *gdv = upload(dv0);
  SimtTile<Bf16> dev = host;
  dev.q = gq, dev.k = gk + key_begin * Hkv * D, dev.v = gv + key_begin * Hkv * D, dev.ranges = granges;
  ASSERT_TRUE(mma_backward_supports(dev, gdo));
  ASSERT_EQ(mma_backward_cuda(dev, gout, glse, L, gdo, gdq, gdk, gdv, nullptr), 0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(testing::all_close(download(gdq, dq.size()), dq, 1e-2, 2e-2)) << "dQ";
  EXPECT_TRUE(testing::all_close(download(gdk, dk.size()), dk, 3e-2, 2e-2)) << "dK";
  EXPECT_TRUE(testing::all_close(download(gdv, dv.size()), dv, 3e-2, 2e-2)) << "dV";
  for (void* p : {(void*)gq, (void*)gk, (void*)gv, (void*)gdo, (void*)granges, (void*)gout, (void*)glse, (void*)gdq,
                  (void*)gdk, (void*)gdv})
    cudaFree(p);
}

TEST(MmaGpu, BackwardAddsTheSimtKernelsGradients) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess) << "no CUDA device: run this on a GPU (scripts/device_check.sh)";
  ASSERT_GT(devices, 0);
  for (const std::string mask : {"full", "causal", "lambda", "two_range"})
    for (int64_t D : {64, 128}) {
      mma_backward_equals_simt(mask, D, 300, 0, 300);
      mma_backward_equals_simt(mask, D, 300, 10, 100);  // keys two_range's rows see (its second range)
      mma_backward_equals_simt(mask, D, 300, 100, 150);
      mma_backward_equals_simt(mask, D, 777, 700, 77);
    }
}

// A tile the kernel cannot take is refused before anything is launched.
TEST(MmaGpu, RefusesHeadDimsItHasNoKernelFor) {
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
