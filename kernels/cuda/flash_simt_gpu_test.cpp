// flash_simt_gpu_test.cpp (label gpu: built everywhere CUDA is, run on a device by
// scripts/device_check.sh) — the SIMT kernels on the GPU give what their host run gives (the same
// row functions; expf and fused multiply-adds may differ in the last bits), fp32 and bf16, every
// mask kind, forward and backward, on a tile over part of the keys (key_begin > 0).
#include "kernels/cuda/flash_simt_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/gpu_test_util.h"
#include "kernels/reference/attention_testing.h"

namespace cpbench::kernels {
namespace {

using testing::download;
using testing::upload;

template <class T>
std::vector<T> as(const std::vector<float>& x) {
  std::vector<T> out;
  for (float v : x) {
    if constexpr (std::is_same_v<T, Bf16>) {
      out.push_back(to_bf16(v));
    } else {
      out.push_back(v);
    }
  }
  return out;
}

::testing::AssertionResult close(const std::vector<float>& x, const std::vector<float>& ref) {
  return testing::all_close(std::span<const float>(x), std::span<const float>(ref), 1e-5, 1e-4);
}

template <class T>
void gpu_equals_host(const std::string& mask_name, testing::MaskFn mask) {
  SCOPED_TRACE(mask_name + (std::is_same_v<T, Bf16> ? " bf16" : " fp32"));
  const int64_t L = 300, Hq = 8, Hkv = 2, D = 128, k0 = 100, rows_k = 150;
  const VarlenBatch b = testing::make_batch({Hq, Hkv, D, 0.0}, {L}, {L}, mask);
  const auto q = as<T>(testing::random_tensor(L * Hq * D, 1)), k = as<T>(testing::random_tensor(L * Hkv * D, 2)),
             v = as<T>(testing::random_tensor(L * Hkv * D, 3)), dout = as<T>(testing::random_tensor(L * Hq * D, 4));
  const SimtTile<T> host = testing::tile_of(q.data(), k.data() + k0 * Hkv * D, v.data() + k0 * Hkv * D,
                                            b.row_ranges.data(), L, rows_k, k0, b.dims);
  std::vector<float> out(L * Hq * D), lse(Hq * L), dq(L * Hq * D, 0.0f), dk(rows_k * Hkv * D, 0.0f), dv = dk;
  simt_forward_host(host, out.data(), lse.data(), L);
  simt_backward_host(host, out.data(), lse.data(), L, dout.data(), dq.data(), dk.data(), dv.data());

  SimtTile<T> dev = host;
  T *dq_in = upload(q), *dk_in = upload(k), *dv_in = upload(v), *ddout = upload(dout);
  KeyRanges* dranges = upload(b.row_ranges);
  dev.q = dq_in, dev.k = dk_in + k0 * Hkv * D, dev.v = dv_in + k0 * Hkv * D, dev.ranges = dranges;
  float *dout_f = upload(std::vector<float>(out.size())), *dlse = upload(std::vector<float>(lse.size()));
  float *ddq = upload(std::vector<float>(dq.size(), 0.0f)), *ddk = upload(std::vector<float>(dk.size(), 0.0f)),
        *ddv = upload(std::vector<float>(dv.size(), 0.0f));
  ASSERT_EQ(simt_forward_cuda(dev, dout_f, dlse, L, nullptr), 0);
  ASSERT_EQ(simt_backward_cuda(dev, dout_f, dlse, L, ddout, ddq, ddk, ddv, nullptr), 0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(close(download(dout_f, out.size()), out));
  EXPECT_TRUE(close(download(dlse, lse.size()), lse));
  EXPECT_TRUE(close(download(ddq, dq.size()), dq));
  EXPECT_TRUE(close(download(ddk, dk.size()), dk));
  EXPECT_TRUE(close(download(ddv, dv.size()), dv));
  for (void* p : {(void*)dq_in, (void*)dk_in, (void*)dv_in, (void*)ddout, (void*)dranges, (void*)dout_f, (void*)dlse,
                  (void*)ddq, (void*)ddk, (void*)ddv})
    cudaFree(p);
}

TEST(SimtGpu, KernelsGiveTheHostRowsResults) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess) << "no CUDA device: run this on a GPU (scripts/device_check.sh)";
  ASSERT_GT(devices, 0);
  const std::pair<const char*, testing::MaskFn> masks[] = {{"full", testing::full_row},
                                                           {"causal", testing::causal_row},
                                                           {"lambda", testing::lambda_mask(4, 64)},
                                                           {"two_range", testing::two_range_row}};
  for (const auto& [name, mask] : masks) {
    gpu_equals_host<float>(name, mask);
    gpu_equals_host<Bf16>(name, mask);
  }
}

}  // namespace
}  // namespace cpbench::kernels
