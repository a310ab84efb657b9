#include "core/runtime/cuda/cuda_attention_kernels.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/flash_simt_cuda.h"

namespace cpbench {

namespace {

void check(int e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(static_cast<cudaError_t>(e)));
}

// The tile's key ranges in device memory, allocated and freed in stream order (the kernels that
// read them run before the free).
class DeviceRanges {
 public:
  DeviceRanges(const kernels::TileInput& t, cudaStream_t s) : stream_(s) {
    const size_t bytes = static_cast<size_t>(t.rows_q > 0 ? t.rows_q : 1) * sizeof(kernels::KeyRanges);
    check(cudaMallocAsync(reinterpret_cast<void**>(&p_), bytes, s), "cudaMallocAsync");
    if (t.rows_q > 0) check(cudaMemcpyAsync(p_, t.ranges, bytes, cudaMemcpyHostToDevice, s), "ranges upload");
  }
  ~DeviceRanges() { cudaFreeAsync(p_, stream_); }
  DeviceRanges(const DeviceRanges&) = delete;
  DeviceRanges& operator=(const DeviceRanges&) = delete;
  const kernels::KeyRanges* get() const { return p_; }

 private:
  kernels::KeyRanges* p_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace

void CudaAttentionKernels::tile_forward(const ForwardCall& c) {
  if (c.tile.rows_q == 0) return;
  const auto stream = static_cast<cudaStream_t>(memory_.stream());
  DeviceRanges ranges(c.tile, stream);
  check(kernels::simt_forward_cuda(kernels::simt_tile(c.tile, ranges.get()), c.out, c.lse, c.tile.rows_q, stream), "forward");
}

void CudaAttentionKernels::tile_backward(const BackwardCall& c) {
  if (c.tile.rows_q == 0 && c.tile.rows_k == 0) return;
  const auto stream = static_cast<cudaStream_t>(memory_.stream());
  DeviceRanges ranges(c.tile, stream);
  check(kernels::simt_backward_cuda(kernels::simt_tile(c.tile, ranges.get()), c.out, c.lse, c.lse_stride, c.dout, c.dq, c.dk,
                                    c.dv, stream),
        "backward");
}

}  // namespace cpbench
