// gpu_test_util.h — what the kernels' GPU tests share: host vectors to device buffers and back
// (a failed CUDA call is a test failure), and tile_test_util.h's bf16 conversions and tile view.
// Requires: CUDA and GoogleTest (included by *_gpu_test.cpp files only).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/tile_test_util.h"

namespace cpbench::kernels::testing {

template <class T>
T* upload(const std::vector<T>& host) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(1, host.size()) * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}

template <class T>
std::vector<T> download(const T* p, size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

}  // namespace cpbench::kernels::testing
