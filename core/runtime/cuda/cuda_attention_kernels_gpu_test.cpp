// cuda_attention_kernels_gpu_test.cpp (label gpu: run on a device by scripts/device_check.sh) —
// the executor's tile calls on the GPU (CudaAttentionKernels) give what the same SIMT rows give on
// the host (checked against the reference in CI by flash_simt_test): a whole tile and a tile over
// part of the keys, causal and DCP's lambda masks, GQA, forward and backward (dQ, dK, dV added into
// what the buffers held). Host-side, no OpenBLAS: the binary needs only the CUDA and C++ runtimes.
#include "core/runtime/cuda/cuda_attention_kernels.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "core/runtime/host_tensor_ops.h"
#include "kernels/cuda/flash_simt.h"
#include "kernels/reference/attention_testing.h"

namespace cpbench {
namespace {

namespace kt = kernels::testing;

// The SIMT rows on the host behind the AttentionKernels interface: what the GPU is compared with.
class HostSimtKernels final : public AttentionKernels {
 public:
  TensorOps& memory() override { return host_; }
  void tile_forward(const ForwardCall& c) override {
    kernels::simt_forward_host(kernels::simt_tile(c.tile, c.tile.ranges), c.out, c.lse, c.tile.rows_q);
  }
  void tile_backward(const BackwardCall& c) override {
    kernels::simt_backward_host(kernels::simt_tile(c.tile, c.tile.ranges), c.out, c.lse, c.lse_stride, c.dout, c.dq, c.dk, c.dv);
  }

 private:
  HostTensorOps host_;
};

struct TileResults {
  std::vector<float> out, lse, dq, dk, dv;
};

// One forward and one backward call of the tile (rows [0, L) against keys [k0, k0 + rows_k)) on
// `kernels`, the tensors uploaded to its memory; the results read back.
TileResults run_tile(AttentionKernels& kernels, const kernels::VarlenBatch& b, int64_t L, int64_t k0, int64_t rows_k,
             const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
             const std::vector<float>& dout) {
  TensorOps& m = kernels.memory();
  const int64_t Hq = b.dims.heads_q, Hkv = b.dims.heads_kv, D = b.dims.head_dim;
  auto put = [&](const std::vector<float>& x) {
    FloatBuffer buf = m.floats(static_cast<int64_t>(x.size()), 0.0f);
    m.upload({buf.data(), 0}, {x.data(), 0}, 1, static_cast<int64_t>(x.size()));
    return buf;
  };
  FloatBuffer dq_in = put(q), dk_in = put(k), dv_in = put(v), ddout = put(dout);
  FloatBuffer out = m.floats(L * Hq * D, 0.0f), lse = m.floats(Hq * L, 0.0f);
  FloatBuffer dq = m.floats(L * Hq * D, 0.5f), dk = m.floats(rows_k * Hkv * D, 0.25f), dv = m.floats(rows_k * Hkv * D, 0.0f);
  kernels::TileInput tile{b.dims, dq_in.data(), L, b.row_ranges.data(), dk_in.data() + k0 * Hkv * D,
                          dv_in.data() + k0 * Hkv * D, rows_k, k0};
  kernels.tile_forward(ForwardCall{tile, out.data(), lse.data()});
  kernels.tile_backward(BackwardCall{tile, out.data(), lse.data(), L, ddout.data(), dq.data(), dk.data(), dv.data()});
  TileResults r;
  for (auto [buf, host] : {std::pair{&out, &r.out}, {&lse, &r.lse}, {&dq, &r.dq}, {&dk, &r.dk}, {&dv, &r.dv}}) {
    host->resize(static_cast<size_t>(buf->size()));
    m.download(*host, buf->data());
  }
  return r;
}

::testing::AssertionResult close(const std::vector<float>& x, const std::vector<float>& ref) {
  return kt::all_close(std::span<const float>(x), std::span<const float>(ref), 1e-4, 1e-3);
}

TEST(CudaAttentionKernels, TileCallsAsTheSameRowsOnTheHost) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess) << "no CUDA device: run this on a GPU (scripts/device_check.sh)";
  CudaAttentionKernels gpu;
  HostSimtKernels cpu;
  const int64_t L = 333, Hq = 8, Hkv = 2, D = 64;
  for (const auto& [name, mask] : {std::pair<std::string, kt::MaskFn>{"causal", kt::causal_row},
                                   {"lambda", kt::lambda_mask(4, 100)}}) {
    const kernels::VarlenBatch b = kt::make_batch({Hq, Hkv, D, 0.0}, {L}, {L}, mask);
    const auto q = kt::random_tensor(L * Hq * D, 1), k = kt::random_tensor(L * Hkv * D, 2),
               v = kt::random_tensor(L * Hkv * D, 3), dout = kt::random_tensor(L * Hq * D, 4);
    for (auto [k0, rows_k] : {std::pair<int64_t, int64_t>{0, L}, {120, 150}}) {
      SCOPED_TRACE(name + " keys from " + std::to_string(k0));
      const TileResults on_gpu = run_tile(gpu, b, L, k0, rows_k, q, k, v, dout);
      const TileResults on_cpu = run_tile(cpu, b, L, k0, rows_k, q, k, v, dout);
      EXPECT_TRUE(close(on_gpu.out, on_cpu.out));
      EXPECT_TRUE(close(on_gpu.lse, on_cpu.lse));
      EXPECT_TRUE(close(on_gpu.dq, on_cpu.dq));
      EXPECT_TRUE(close(on_gpu.dk, on_cpu.dk));
      EXPECT_TRUE(close(on_gpu.dv, on_cpu.dv));
    }
  }
  // The device timed its tile calls itself: a positive time, taken once; the host's kernels
  // leave the timing to the host's clock.
  const std::optional<double> device = gpu.take_kernel_seconds();
  ASSERT_TRUE(device.has_value());
  EXPECT_GT(*device, 0.0);
  EXPECT_EQ(gpu.take_kernel_seconds(), 0.0);
  EXPECT_FALSE(cpu.take_kernel_seconds().has_value());
}

}  // namespace
}  // namespace cpbench
