// sdpa_runner_gpu_test.cpp (label gpu: built where cuDNN and cudnn-frontend are, run on a device by
// scripts/device_check.sh) — cuDNN's SDPA through SdpaRunner computes what our SIMT kernel computes
// on the same bf16 inputs and the mask the tile mode defines (tile_mode_allows): every mode the
// fast path emits (full, causal top-left and bottom-right, each causal one with a window), MHA and
// GQA, head dims 64 and 128, dense and THD-ragged (three sequences packed), forward (O and the
// natural-log LSE in cuDNN's [B, H, S, 1]) and backward (dQ, dK, dV). Tolerances: cuDNN writes O
// and the gradients in bf16 (relative rounding 2⁻⁹): O atol and rtol 1e-2, LSE 1e-3, gradients 3e-2.
#include "kernels/cudnn/sdpa_graph.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cuda/flash_simt.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/reference/attention_testing.h"

namespace cpbench::kernels {
namespace {

using testing::bf16;
using testing::download;
using testing::f32;
using testing::upload;

// Sequences of lens[b] query rows and lens_kv[b] keys packed as THD rows; the SIMT reference runs
// each sequence as its own tile with the ranges tile_mode_allows gives.
void cudnn_equals_simt(const TileMode& mode, int64_t D, int64_t Hkv, const std::vector<int64_t>& lens,
                       const std::vector<int64_t>& lens_kv, bool ragged) {
  SCOPED_TRACE(std::string(tile_mask_name(mode.mask)) + " window " + std::to_string(mode.window) + " d" +
               std::to_string(D) + " kv " + std::to_string(Hkv) + (ragged ? " ragged" : " dense"));
  const int64_t Hq = 8, B = static_cast<int64_t>(lens.size());
  std::vector<int64_t> cu{0}, cu_kv{0};
  for (int64_t b = 0; b < B; ++b) cu.push_back(cu.back() + lens[b]), cu_kv.push_back(cu_kv.back() + lens_kv[b]);
  const int64_t T = cu.back(), Tk = cu_kv.back();
  const int64_t S = *std::max_element(lens.begin(), lens.end()), Skv = *std::max_element(lens_kv.begin(), lens_kv.end());
  const auto q = bf16(testing::random_tensor(T * Hq * D, 21)), k = bf16(testing::random_tensor(Tk * Hkv * D, 22)),
             v = bf16(testing::random_tensor(Tk * Hkv * D, 23)), dout = bf16(testing::random_tensor(T * Hq * D, 24));

  // The reference, sequence by sequence.
  std::vector<float> out(T * Hq * D), lse(B * Hq * S, 0.0f), dq(T * Hq * D, 0.0f), dk(Tk * Hkv * D, 0.0f), dv = dk;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<KeyRanges> ranges;
    for (int64_t i = 0; i < lens[b]; ++i) {
      KeyRanges r;
      for (int64_t j = 0; j < lens_kv[b]; ++j)
        if (tile_mode_allows(mode, lens[b], lens_kv[b], i, j)) r.b0 = r.e0 == 0 ? j : r.b0, r.e0 = j + 1;
      ranges.push_back(r);
    }
    const SimtTile<Bf16> t = testing::tile_of(q.data() + cu[b] * Hq * D, k.data() + cu_kv[b] * Hkv * D,
                                              v.data() + cu_kv[b] * Hkv * D, ranges.data(), lens[b], lens_kv[b], 0,
                                              AttentionDims{Hq, Hkv, D, 0.0});
    std::vector<float> lse_b(Hq * lens[b]);
    simt_forward_host(t, out.data() + cu[b] * Hq * D, lse_b.data(), lens[b]);
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < lens[b]; ++i) lse[(b * Hq + h) * S + i] = lse_b[h * lens[b] + i];
    simt_backward_host(t, out.data() + cu[b] * Hq * D, lse_b.data(), lens[b], dout.data() + cu[b] * Hq * D,
                       dq.data() + cu[b] * Hq * D, dk.data() + cu_kv[b] * Hkv * D, dv.data() + cu_kv[b] * Hkv * D);
  }

  std::string error;
  auto runner = SdpaRunner::create(nullptr, &error);
  ASSERT_TRUE(runner) << error;
  SdpaShape shape;
  shape.batch = B, shape.heads_q = Hq, shape.heads_kv = Hkv, shape.s_q = S, shape.s_kv = Skv, shape.head_dim = D;
  shape.ragged = ragged;
  std::vector<int32_t> seq_q, seq_kv, off_q, off_kv;
  for (int64_t b = 0; b < B; ++b) seq_q.push_back(lens[b]), seq_kv.push_back(lens_kv[b]);
  for (int64_t b = 0; b <= B; ++b) off_q.push_back(cu[b] * Hq * D), off_kv.push_back(cu_kv[b] * Hkv * D);
  Bf16 *dq_in = upload(q), *dk_in = upload(k), *dv_in = upload(v), *ddout = upload(dout);
  Bf16 *d_out = upload(std::vector<Bf16>(out.size())), *d_dq = upload(std::vector<Bf16>(dq.size())),
       *d_dk = upload(std::vector<Bf16>(dk.size())), *d_dv = upload(std::vector<Bf16>(dv.size()));
  float* d_stats = upload(std::vector<float>(lse.size(), 0.0f));
  int32_t *d_seq_q = upload(seq_q), *d_seq_kv = upload(seq_kv), *d_off_q = upload(off_q), *d_off_kv = upload(off_kv);
  SdpaTensors t;
  t.q = dq_in, t.k = dk_in, t.v = dv_in, t.o = d_out, t.stats = d_stats;
  t.o_in = d_out, t.stats_in = d_stats, t.d_o = ddout, t.dq = d_dq, t.dk = d_dk, t.dv = d_dv;
  if (ragged) t.seq_len_q = d_seq_q, t.seq_len_kv = d_seq_kv, t.offsets_q = d_off_q, t.offsets_kv = d_off_kv;
  const SdpaStatus fwd = runner->forward(shape, mode, t);
  ASSERT_TRUE(fwd.ok) << fwd.message;
  const SdpaStatus bwd = runner->backward(shape, mode, t);
  ASSERT_TRUE(bwd.ok) << bwd.message;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(testing::all_close(f32(download(d_out, out.size())), out, 1e-2, 1e-2));
  // Padding rows of a ragged pack's statistics are cuDNN's to fill: only the sequences' rows count.
  std::vector<float> stats = download(d_stats, lse.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = lens[b]; i < S; ++i) stats[(b * Hq + h) * S + i] = 0.0f;
  EXPECT_TRUE(testing::all_close(stats, lse, 1e-3, 1e-3));
  EXPECT_TRUE(testing::all_close(f32(download(d_dq, dq.size())), dq, 3e-2, 3e-2));
  EXPECT_TRUE(testing::all_close(f32(download(d_dk, dk.size())), dk, 3e-2, 3e-2));
  EXPECT_TRUE(testing::all_close(f32(download(d_dv, dv.size())), dv, 3e-2, 3e-2));
  for (void* p : {(void*)dq_in, (void*)dk_in, (void*)dv_in, (void*)ddout, (void*)d_out, (void*)d_dq, (void*)d_dk,
                  (void*)d_dv, (void*)d_stats, (void*)d_seq_q, (void*)d_seq_kv, (void*)d_off_q, (void*)d_off_kv})
    cudaFree(p);
}

TEST(SdpaRunnerGpu, EveryModeGivesTheSimtKernelsResults) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess) << "no CUDA device: run this on a GPU (scripts/device_check.sh)";
  ASSERT_GT(devices, 0);
  const TileMode modes[] = {{TileMask::full, 0},
                            {TileMask::causal_top_left, 0},
                            {TileMask::causal_bottom_right, 0},
                            {TileMask::causal_top_left, 64},
                            {TileMask::causal_bottom_right, 96}};
  for (const TileMode& mode : modes)
    for (int64_t D : {64, 128})
      for (int64_t Hkv : {8, 2}) {
        // Dense: one sequence, more keys than rows (bottom-right sits at the last keys).
        cudnn_equals_simt(mode, D, Hkv, {256}, {mode.mask == TileMask::causal_top_left ? 256 : 384}, false);
        // Ragged: three sequences of different lengths, as many keys as rows each.
        cudnn_equals_simt(mode, D, Hkv, {100, 37, 163}, {100, 37, 163}, true);
      }
}

}  // namespace
}  // namespace cpbench::kernels
