// host_tensor_ops_test.cpp — HostTensorOps, the TensorOps the CPU backend runs on: the bf16 wire
// encoding (round to nearest even, NaN and infinities kept), fp32 encoding exact, block copy and add
// over pitches, the pairwise LSE merge against kernels/cpu's n-way merge_partials; and the fence
// the executed-plan tests put around it (executor_test_util.h) flags what lies outside its buffers.
#include "core/runtime/host_tensor_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/runtime/executor_test_util.h"
#include "kernels/cpu/flash_attention.h"

namespace cpbench {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(HostTensorOps, Bf16RoundsToNearestEvenAndKeepsSpecials) {
  EXPECT_EQ(from_bf16(to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(from_bf16(to_bf16(-2.5f)), -2.5f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(from_bf16(to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // 1 + 3·2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties go to 1 + 2^-6.
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  // Just above halfway rounds up.
  EXPECT_EQ(from_bf16(to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(from_bf16(to_bf16(kInf)), kInf);
  EXPECT_EQ(from_bf16(to_bf16(-kInf)), -kInf);
}

TEST(HostTensorOps, EncodeDecodeFp32IsExactAndBf16WithinHalfAStep) {
  HostTensorOps ops;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 3.f);
  std::vector<float> x(1000);
  for (float& v : x) v = dist(rng);
  ByteBuffer wire = ops.bytes(4 * 1000);
  FloatBuffer back = ops.floats(1000, 0.f);
  ops.encode(wire.data(), x.data(), 1000, 4);
  ops.decode(back.data(), wire.data(), 1000, 4);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(back.data()[i], x[i]);
  ops.encode(wire.data(), x.data(), 1000, 2);
  ops.decode(back.data(), wire.data(), 1000, 2);
  for (int i = 0; i < 1000; ++i) ASSERT_LE(std::abs(back.data()[i] - x[i]), std::abs(x[i]) * std::ldexp(1.0f, -8));
}

TEST(HostTensorOps, CopyAndAddMoveBlocksBetweenPitches) {
  HostTensorOps ops;
  // src: 3 rows of pitch 5; dst: 3 rows of pitch 4; the block is 3 × 2 from column 1 to column 2.
  FloatBuffer src = ops.floats(15, 0.f), dst = ops.floats(12, -1.f);
  for (int i = 0; i < 15; ++i) src.data()[i] = static_cast<float>(i);
  ops.copy({dst.data() + 2, 4}, {src.data() + 1, 5}, 3, 2);
  const std::vector<float> copied{-1, -1, 1, 2, -1, -1, 6, 7, -1, -1, 11, 12};
  EXPECT_EQ(std::vector<float>(dst.data(), dst.data() + 12), copied);
  ops.add({dst.data() + 2, 4}, {src.data() + 1, 5}, 3, 2);
  const std::vector<float> added{-1, -1, 2, 4, -1, -1, 12, 14, -1, -1, 22, 24};
  EXPECT_EQ(std::vector<float>(dst.data(), dst.data() + 12), added);
}

TEST(HostTensorOps, PairwiseLseMergeEqualsTheNWayMerge) {
  HostTensorOps ops;
  const int64_t tokens = 7, heads = 3, d = 4;
  kernels::AttentionDims dims{heads, heads, d, 0.0};
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.f, 2.f);
  std::vector<kernels::PartialOutput> parts(3);
  for (auto& p : parts) {
    p.out.resize(tokens * heads * d);
    p.lse.resize(heads * tokens);
    for (float& v : p.out) v = dist(rng);
    for (float& v : p.lse) v = dist(rng);
  }
  // Rows no partial sees, and rows only some see.
  for (auto& p : parts) p.lse[0] = -kInf;
  parts[0].lse[5] = parts[2].lse[5] = -kInf;
  const kernels::PartialOutput want = kernels::merge_partials(parts, dims);
  FloatBuffer out = ops.floats(tokens * heads * d, 0.f), lse = ops.floats(heads * tokens, -kInf);
  for (const auto& p : parts)
    ops.merge({{out.data(), heads * d}, {lse.data(), tokens}, {p.out.data(), heads * d}, {p.lse.data(), tokens},
               tokens, heads, d});
  for (int64_t i = 0; i < heads * tokens; ++i) {
    if (want.lse[i] == -kInf) {
      EXPECT_EQ(lse.data()[i], -kInf) << i;
      continue;
    }
    EXPECT_NEAR(lse.data()[i], want.lse[i], 1e-5f) << i;
  }
  for (int64_t i = 0; i < tokens * heads * d; ++i) EXPECT_NEAR(out.data()[i], want.out[i], 1e-5f) << i;
  EXPECT_EQ(out.data()[0], 0.f);  // row (token 0, head 0): no partial saw a key
}

TEST(FencedTensorOps, FlagsMemoryItDidNotMake) {
  FencedTensorOps ops;
  FloatBuffer a = ops.floats(12, 0.f);
  std::vector<float> host(12, 0.f);
  ops.copy({a.data(), 4}, {a.data() + 8, 4}, 1, 4);  // inside
  EXPECT_TRUE(ops.violations().empty());
  ops.copy({a.data(), 4}, {host.data(), 4}, 3, 4);  // a host vector as the source
  ASSERT_EQ(ops.violations().size(), 1u);
  EXPECT_NE(ops.violations()[0].find("copy from"), std::string::npos);
  ops.add({a.data() + 4, 4}, {a.data(), 4}, 3, 4);  // two rows past the end
  EXPECT_EQ(ops.violations().size(), 2u);
  const float* gone;
  {
    FloatBuffer b = ops.floats(4, 1.f);
    gone = b.data();
  }
  ops.check(gone, 16, "a freed buffer");
  EXPECT_EQ(ops.violations().size(), 3u);
}

}  // namespace
}  // namespace cpbench
