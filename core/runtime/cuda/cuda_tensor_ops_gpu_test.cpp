// cuda_tensor_ops_gpu_test.cpp (label gpu: run on a device by scripts/device_check.sh) — every
// TensorOps operation on the GPU gives what HostTensorOps gives on the same inputs: blocks over
// pitches copied and added exactly, the bf16 wire bit for bit (ties to even, NaN kept), the LSE
// merge within the last bits of expf/logf, −inf rows as the host treats them.
#include "core/runtime/cuda/cuda_tensor_ops.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/runtime/host_tensor_ops.h"

namespace cpbench {
namespace {

std::vector<float> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// `values` in the memory of `ops`.
FloatBuffer put(TensorOps& ops, const std::vector<float>& values) {
  FloatBuffer b = ops.floats(static_cast<int64_t>(values.size()), 0.0f);
  ops.upload({b.data(), 0}, {values.data(), 0}, 1, static_cast<int64_t>(values.size()));
  return b;
}

std::vector<float> get(TensorOps& ops, const FloatBuffer& b) {
  std::vector<float> v(static_cast<size_t>(b.size()));
  ops.download(v, b.data());
  return v;
}

TEST(CudaTensorOps, EveryOperationAsOnTheHost) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess) << "no CUDA device: run this on a GPU (scripts/device_check.sh)";
  CudaTensorOps gpu;
  HostTensorOps host;
  const int64_t rows = 37, width = 50, pitch = 64;
  std::vector<float> a = random_values(rows * pitch, 1), b = random_values(rows * pitch, 2);
  // Blocks over pitches: copy then add, into a destination of another pitch.
  std::vector<std::vector<float>> results;
  for (TensorOps* ops : {static_cast<TensorOps*>(&gpu), static_cast<TensorOps*>(&host)}) {
    FloatBuffer x = put(*ops, a), y = put(*ops, b), z = ops->floats(rows * 80, 7.0f);
    ops->copy({z.data() + 3, 80}, {x.data(), pitch}, rows, width);
    ops->add({z.data() + 3, 80}, {y.data() + 1, pitch}, rows, width);
    results.push_back(get(*ops, z));
  }
  EXPECT_EQ(results[0], results[1]);

  // The wire: bf16 ties, specials and NaN, bit for bit; fp32 as is.
  std::vector<float> wire = random_values(1000, 3);
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 1.00390625f /* a tie */, 3.0e38f, 1e-40f};
  wire.insert(wire.end(), std::begin(specials), std::end(specials));
  for (int value_bytes : {2, 4}) {
    std::vector<std::vector<float>> decoded;
    std::vector<std::vector<std::byte>> encoded;
    for (TensorOps* ops : {static_cast<TensorOps*>(&gpu), static_cast<TensorOps*>(&host)}) {
      const int64_t n = static_cast<int64_t>(wire.size());
      FloatBuffer src = put(*ops, wire), back = ops->floats(n, 0.0f);
      ByteBuffer bytes = ops->bytes(n * value_bytes), copied = ops->bytes(n * value_bytes);
      ops->encode(bytes.data(), src.data(), n, value_bytes);
      ops->copy_bytes(copied.data(), bytes.data(), n * value_bytes);
      ops->decode(back.data(), copied.data(), n, value_bytes);
      decoded.push_back(get(*ops, back));
    }
    ASSERT_EQ(decoded[0].size(), decoded[1].size());
    EXPECT_EQ(std::memcmp(decoded[0].data(), decoded[1].data(), decoded[0].size() * sizeof(float)), 0)
        << value_bytes << " bytes a value";
  }

  // The LSE merge, with −inf on either side of some rows.
  const int64_t tokens = 40, heads = 4, d = 64;
  std::vector<float> out = random_values(tokens * heads * d, 4), o = random_values(tokens * heads * d, 5);
  std::vector<float> out_lse = random_values(heads * tokens, 6), lse = random_values(heads * tokens, 7);
  for (int64_t i = 0; i < heads * tokens; i += 7) out_lse[i] = -std::numeric_limits<float>::infinity();
  for (int64_t i = 3; i < heads * tokens; i += 11) lse[i] = -std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> merged, merged_lse;
  for (TensorOps* ops : {static_cast<TensorOps*>(&gpu), static_cast<TensorOps*>(&host)}) {
    FloatBuffer acc = put(*ops, out), part = put(*ops, o), acc_lse = put(*ops, out_lse), part_lse = put(*ops, lse);
    ops->merge(LseMerge{{acc.data(), heads * d}, {acc_lse.data(), tokens}, {part.data(), heads * d},
                        {part_lse.data(), tokens}, tokens, heads, d});
    merged.push_back(get(*ops, acc));
    merged_lse.push_back(get(*ops, acc_lse));
  }
  for (size_t i = 0; i < merged[0].size(); ++i) ASSERT_NEAR(merged[0][i], merged[1][i], 1e-5f * (1 + std::fabs(merged[1][i]))) << i;
  for (size_t i = 0; i < merged_lse[0].size(); ++i) {
    if (std::isinf(merged_lse[1][i])) EXPECT_EQ(merged_lse[0][i], merged_lse[1][i]) << i;
    else EXPECT_NEAR(merged_lse[0][i], merged_lse[1][i], 1e-5f * (1 + std::fabs(merged_lse[1][i]))) << i;
  }
}

}  // namespace
}  // namespace cpbench
