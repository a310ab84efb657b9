// gpu_test_util.h — what the kernels' GPU tests share: host vectors to device buffers and back
// (a failed CUDA call is a test failure), and fp32 values as bf16 and back.
// Requires: CUDA and GoogleTest (included by *_gpu_test.cpp files only).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/bf16.h"

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

inline std::vector<Bf16> bf16(const std::vector<float>& x) {
  std::vector<Bf16> out;
  for (float v : x) out.push_back(to_bf16(v));
  return out;
}

inline std::vector<float> f32(const std::vector<Bf16>& x) {
  std::vector<float> out;
  for (Bf16 v : x) out.push_back(to_f32(v));
  return out;
}

}  // namespace cpbench::kernels::testing
