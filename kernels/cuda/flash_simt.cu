// flash_simt.cu — the SIMT attention kernels (flash_simt_cuda.h): each thread runs one row of
// flash_simt.h, the code CI runs on the CPU.
#include "kernels/cuda/flash_simt_cuda.h"

#include <cuda_runtime.h>

namespace cpbench::kernels {

namespace {

constexpr int kThreads = 128;

int blocks_for(int64_t items) { return static_cast<int>((items + kThreads - 1) / kThreads); }

template <class T>
__global__ void forward_kernel(SimtTile<T> t, float* out, float* lse, int64_t lse_stride) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= t.rows_q * t.heads_q) return;
  const int64_t i = item / t.heads_q, h = item % t.heads_q;
  float acc[kSimtMaxHeadDim];
  simt_forward_row(t, i, h, acc, out + (i * t.heads_q + h) * t.head_dim, lse + h * lse_stride + i);
}

template <class T>
__global__ void dq_kernel(SimtTile<T> t, const float* out, const float* lse, int64_t lse_stride, const T* dout,
                          float* dq) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= t.rows_q * t.heads_q) return;
  const int64_t i = item / t.heads_q, h = item % t.heads_q, at = (i * t.heads_q + h) * t.head_dim;
  simt_dq_row(t, i, h, out + at, lse[h * lse_stride + i], dout + at, dq + at);
}

template <class T>
__global__ void dkv_kernel(SimtTile<T> t, const float* out, const float* lse, int64_t lse_stride, const T* dout,
                           float* dk, float* dv) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= t.rows_k * t.heads_kv) return;
  const int64_t j = item / t.heads_kv, g = item % t.heads_kv, at = (j * t.heads_kv + g) * t.head_dim;
  simt_dkv_row(t, j, g, out, lse, lse_stride, dout, dk + at, dv + at);
}

}  // namespace

template <class T>
int simt_forward_cuda(const SimtTile<T>& t, float* out, float* lse, int64_t lse_stride, void* stream) {
  if (t.head_dim > kSimtMaxHeadDim) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t items = t.rows_q * t.heads_q;
  if (items == 0) return 0;
  forward_kernel<T><<<blocks_for(items), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(t, out, lse, lse_stride);
  return static_cast<int>(cudaGetLastError());
}

template <class T>
int simt_backward_cuda(const SimtTile<T>& t, const float* out, const float* lse, int64_t lse_stride, const T* dout,
                       float* dq, float* dk, float* dv, void* stream) {
  if (t.head_dim > kSimtMaxHeadDim) return static_cast<int>(cudaErrorInvalidValue);
  auto s = static_cast<cudaStream_t>(stream);
  if (const int64_t items = t.rows_q * t.heads_q; items > 0)
    dq_kernel<T><<<blocks_for(items), kThreads, 0, s>>>(t, out, lse, lse_stride, dout, dq);
  if (const int64_t items = t.rows_k * t.heads_kv; items > 0)
    dkv_kernel<T><<<blocks_for(items), kThreads, 0, s>>>(t, out, lse, lse_stride, dout, dk, dv);
  return static_cast<int>(cudaGetLastError());
}

template int simt_forward_cuda<float>(const SimtTile<float>&, float*, float*, int64_t, void*);
template int simt_forward_cuda<Bf16>(const SimtTile<Bf16>&, float*, float*, int64_t, void*);
template int simt_backward_cuda<float>(const SimtTile<float>&, const float*, const float*, int64_t, const float*,
                                       float*, float*, float*, void*);
template int simt_backward_cuda<Bf16>(const SimtTile<Bf16>&, const float*, const float*, int64_t, const Bf16*,
                                      float*, float*, float*, void*);

}  // namespace cpbench::kernels
