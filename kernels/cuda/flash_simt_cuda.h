// flash_simt_cuda.h — the SIMT attention kernels on a GPU: one thread per query row and head
// (forward, dQ) or per key row and KV head (dK, dV), each running flash_simt.h's row functions.
// Requires: CUDA (library cpbench_cuda); every pointer in device memory, the tile's ranges too.
// Note: the correctness path (any mask, any tile); the fast path is cuDNN (kernels/cudnn). The
// launch returns the CUDA error of the launch (0 = cudaSuccess); the work is asynchronous on
// `stream` (a cudaStream_t; null = the default stream).
#pragma once

#include "kernels/cuda/flash_simt.h"

namespace cpbench::kernels {

template <class T>
int simt_forward_cuda(const SimtTile<T>& t, float* out, float* lse, int64_t lse_stride, void* stream);

template <class T>
int simt_backward_cuda(const SimtTile<T>& t, const float* out, const float* lse, int64_t lse_stride, const T* dout,
                       float* dq, float* dk, float* dv, void* stream);

}  // namespace cpbench::kernels
