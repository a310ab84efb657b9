// flash_simt_test.cpp — the GPU kernel's arithmetic (flash_simt.h), run on the CPU through the host
// driver, against the double-accumulating reference: every mask kind (full, causal, DCP's lambda,
// two ranges with fully masked rows), GQA, head dims 32/59/64/128, odd lengths, fp32 and bf16
// inputs, forward and backward; tiles over parts of the keys merge to the whole. Tolerances as
// kernels/cpu's test: O and LSE atol 2e-5, rtol 2e-4; gradients atol 1e-4, rtol 1e-3.
#include "kernels/cuda/flash_simt.h"

#include <gtest/gtest.h>

#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <tuple>
#include <vector>

#include "kernels/cpu/flash_attention.h"
#include "kernels/reference/attention_ref.h"
#include "kernels/reference/attention_testing.h"

namespace cpbench::kernels {
namespace {

using testing::all_close;
using testing::make_batch;
using testing::MaskFn;
using testing::random_tensor;

::testing::AssertionResult close(const std::vector<float>& x, const std::vector<float>& ref, double atol, double rtol) {
  return all_close(std::span<const float>(x), std::span<const float>(ref), atol, rtol);
}

constexpr double kOutAtol = 2e-5, kOutRtol = 2e-4, kGradAtol = 1e-4, kGradRtol = 1e-3;

template <class T>
struct Inputs {
  std::vector<float> q, k, v, dout;  // what the reference reads (bf16-rounded for Bf16)
  std::vector<T> tq, tk, tv, tdout;  // what the kernel reads
};

template <class T>
Inputs<T> make_inputs(int64_t rows, const AttentionDims& dims, uint64_t seed) {
  Inputs<T> in;
  in.q = random_tensor(rows * dims.heads_q * dims.head_dim, seed);
  in.k = random_tensor(rows * dims.heads_kv * dims.head_dim, seed + 1);
  in.v = random_tensor(rows * dims.heads_kv * dims.head_dim, seed + 2);
  in.dout = random_tensor(rows * dims.heads_q * dims.head_dim, seed + 3);
  for (auto [from, to] : {std::pair{&in.q, &in.tq}, {&in.k, &in.tk}, {&in.v, &in.tv}, {&in.dout, &in.tdout}})
    for (float& x : *from) {
      if constexpr (std::is_same_v<T, Bf16>) {
        to->push_back(to_bf16(x));
        x = to_f32(to->back());
      } else {
        to->push_back(x);
      }
    }
  return in;
}

template <class T>
SimtTile<T> tile_of(const Inputs<T>& in, const VarlenBatch& b, int64_t rows) {
  SimtTile<T> t;
  t.q = in.tq.data();
  t.k = in.tk.data();
  t.v = in.tv.data();
  t.ranges = b.row_ranges.data();
  t.rows_q = t.rows_k = rows;
  t.heads_q = b.dims.heads_q;
  t.heads_kv = b.dims.heads_kv;
  t.head_dim = b.dims.head_dim;
  t.scale = static_cast<float>(b.dims.softmax_scale());
  return t;
}

template <class T>
void check_against_reference(int64_t head_dim, const std::string& mask, int64_t L) {
  SCOPED_TRACE("d" + std::to_string(head_dim) + " " + mask + " L" + std::to_string(L));
  const VarlenBatch b = make_batch({4, 2, head_dim, 0.0}, {L}, {L}, testing::mask_by_name(mask));
  const Inputs<T> in = make_inputs<T>(L, b.dims, 40 + head_dim + L);
  const SimtTile<T> t = tile_of(in, b, L);
  std::vector<float> out(in.q.size()), lse(static_cast<size_t>(4 * L));
  simt_forward_host(t, out.data(), lse.data(), L);
  const auto ref = attention_forward_ref<float>(b, in.q, in.k, in.v);
  EXPECT_TRUE(close(out, ref.out, kOutAtol, kOutRtol));
  EXPECT_TRUE(close(lse, ref.lse, kOutAtol, kOutRtol));
  std::vector<float> dq(in.q.size(), 0.0f), dk(in.k.size(), 0.0f), dv(in.v.size(), 0.0f);
  simt_backward_host(t, out.data(), lse.data(), L, in.tdout.data(), dq.data(), dk.data(), dv.data());
  const auto grads = attention_backward_ref<float>(b, in.q, in.k, in.v, in.dout);
  EXPECT_TRUE(close(dq, grads.dq, kGradAtol, kGradRtol));
  EXPECT_TRUE(close(dk, grads.dk, kGradAtol, kGradRtol));
  EXPECT_TRUE(close(dv, grads.dv, kGradAtol, kGradRtol));
}

class SimtVsReference : public ::testing::TestWithParam<std::tuple<int64_t, std::string>> {};

TEST_P(SimtVsReference, Fp32AndBf16ForwardAndBackward) {
  const auto [d, mask] = GetParam();
  for (int64_t L : {1, 7, 100, 257}) {
    check_against_reference<float>(d, mask, L);
    check_against_reference<Bf16>(d, mask, L);
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDimsAndMasks, SimtVsReference,
                         ::testing::Combine(::testing::Values(32, 59, 64, 128),
                                            ::testing::Values("full", "causal", "lambda", "two_range")),
                         [](const auto& info) {
                           return "d" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });

// A ring or DCP computes a sequence's keys as several tiles (key_begin > 0) and merges (O, LSE);
// the merge of the SIMT tiles equals its whole tile, and their dK, dV are the whole's rows.
TEST(SimtTiles, KeySplitsMergeToTheWholeTile) {
  const int64_t L = 201, D = 32;
  for (const std::string mask : {"causal", "lambda", "two_range"}) {
    SCOPED_TRACE(mask);
    const VarlenBatch b = make_batch({4, 2, D, 0.0}, {L}, {L}, testing::mask_by_name(mask));
    const Inputs<float> in = make_inputs<float>(L, b.dims, 5);
    const SimtTile<float> whole = tile_of(in, b, L);
    PartialOutput one{std::vector<float>(in.q.size()), std::vector<float>(static_cast<size_t>(4 * L))};
    simt_forward_host(whole, one.out.data(), one.lse.data(), L);
    std::vector<float> dq(in.q.size(), 0.0f), dk(in.k.size(), 0.0f), dv(in.v.size(), 0.0f);
    simt_backward_host(whole, one.out.data(), one.lse.data(), L, in.tdout.data(), dq.data(), dk.data(), dv.data());

    std::vector<PartialOutput> parts;
    std::vector<float> dq_parts(in.q.size(), 0.0f), dk_parts(in.k.size(), 0.0f), dv_parts(in.v.size(), 0.0f);
    const int64_t cuts[] = {0, 64, 150, L};
    for (int p = 0; p < 3; ++p) {
      SimtTile<float> t = whole;
      t.k += cuts[p] * 2 * D;
      t.v += cuts[p] * 2 * D;
      t.rows_k = cuts[p + 1] - cuts[p];
      t.key_begin = cuts[p];
      PartialOutput part{std::vector<float>(in.q.size()), std::vector<float>(static_cast<size_t>(4 * L))};
      simt_forward_host(t, part.out.data(), part.lse.data(), L);
      parts.push_back(std::move(part));
      // Backward over the tile with the final (whole) O and LSE, as the executor runs it.
      simt_backward_host(t, one.out.data(), one.lse.data(), L, in.tdout.data(), dq_parts.data(),
                         dk_parts.data() + cuts[p] * 2 * D, dv_parts.data() + cuts[p] * 2 * D);
    }
    const PartialOutput merged = merge_partials(parts, b.dims);
    EXPECT_TRUE(close(merged.out, one.out, 1e-6, 1e-5));
    EXPECT_TRUE(close(merged.lse, one.lse, 1e-6, 1e-5));
    EXPECT_TRUE(close(dq_parts, dq, 1e-6, 1e-5));
    EXPECT_TRUE(close(dk_parts, dk, 0, 0));  // the same sums, key row by key row
    EXPECT_TRUE(close(dv_parts, dv, 0, 0));
  }
}

}  // namespace
}  // namespace cpbench::kernels
