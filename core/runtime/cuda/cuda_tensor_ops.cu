#include "core/runtime/cuda/cuda_tensor_ops.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "core/runtime/lse_merge.h"
#include "kernels/cuda/bf16.h"

namespace cpbench {

namespace {

constexpr int kThreads = 256;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__global__ void fill_kernel(float* p, int64_t n, float value) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) p[i] = value;
}

__global__ void add_kernel(Rows<float> dst, Rows<const float> src, int64_t rows, int64_t width) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * width) return;
  const int64_t r = i / width, c = i % width;
  dst.at[r * dst.pitch + c] += src.at[r * src.pitch + c];
}

// One thread per (head, token) row: the row HostTensorOps::merge loops over.
__global__ void merge_kernel(LseMerge m) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < m.heads * m.tokens) merge_lse_row(m, i / m.tokens, i % m.tokens);
}

__global__ void encode_bf16_kernel(uint16_t* dst, const float* src, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = kernels::to_bf16(src[i]).bits;
}

__global__ void decode_bf16_kernel(float* dst, const uint16_t* src, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = kernels::to_f32(kernels::Bf16{src[i]});
}

template <class T>
std::shared_ptr<T[]> device_alloc(int64_t n) {
  void* p = nullptr;
  check(cudaMalloc(&p, static_cast<size_t>(n > 0 ? n : 1) * sizeof(T)), "cudaMalloc");
  return std::shared_ptr<T[]>(static_cast<T*>(p), [](T* q) { cudaFree(q); });
}

}  // namespace

CudaTensorOps::CudaTensorOps() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = s;
}

CudaTensorOps::~CudaTensorOps() {
  cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void CudaTensorOps::synchronize() { check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "synchronize"); }

FloatBuffer CudaTensorOps::floats(int64_t n, float value) {
  auto p = device_alloc<float>(n);
  if (n > 0) fill_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream_)>>>(p.get(), n, value);
  check(cudaGetLastError(), "fill");
  return {std::move(p), n};
}

ByteBuffer CudaTensorOps::bytes(int64_t n) { return {device_alloc<std::byte>(n), n}; }

void CudaTensorOps::copy(Rows<float> dst, Rows<const float> src, int64_t rows, int64_t width) {
  if (rows <= 0 || width <= 0) return;
  check(cudaMemcpy2DAsync(dst.at, dst.pitch * sizeof(float), src.at, src.pitch * sizeof(float), width * sizeof(float),
                          rows, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream_)),
        "copy");
}

void CudaTensorOps::add(Rows<float> dst, Rows<const float> src, int64_t rows, int64_t width) {
  if (rows <= 0 || width <= 0) return;
  add_kernel<<<blocks_for(rows * width), kThreads, 0, static_cast<cudaStream_t>(stream_)>>>(dst, src, rows, width);
  check(cudaGetLastError(), "add");
}

void CudaTensorOps::merge(const LseMerge& m) {
  if (m.heads * m.tokens <= 0) return;
  merge_kernel<<<blocks_for(m.heads * m.tokens), kThreads, 0, static_cast<cudaStream_t>(stream_)>>>(m);
  check(cudaGetLastError(), "merge");
}

void CudaTensorOps::copy_bytes(std::byte* dst, const std::byte* src, int64_t n) {
  if (n > 0)
    check(cudaMemcpyAsync(dst, src, static_cast<size_t>(n), cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream_)),
          "copy_bytes");
}

void CudaTensorOps::encode(std::byte* dst, const float* src, int64_t n, int value_bytes) {
  if (n <= 0) return;
  if (value_bytes == 4) return copy_bytes(dst, reinterpret_cast<const std::byte*>(src), n * 4);
  encode_bf16_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream_)>>>(
      reinterpret_cast<uint16_t*>(dst), src, n);
  check(cudaGetLastError(), "encode");
}

void CudaTensorOps::decode(float* dst, const std::byte* src, int64_t n, int value_bytes) {
  if (n <= 0) return;
  if (value_bytes == 4) return copy_bytes(reinterpret_cast<std::byte*>(dst), src, n * 4);
  decode_bf16_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream_)>>>(
      dst, reinterpret_cast<const uint16_t*>(src), n);
  check(cudaGetLastError(), "decode");
}

void CudaTensorOps::upload(Rows<float> dst, Rows<const float> host, int64_t rows, int64_t width) {
  if (rows <= 0 || width <= 0) return;
  check(cudaMemcpy2DAsync(dst.at, dst.pitch * sizeof(float), host.at, host.pitch * sizeof(float),
                          width * sizeof(float), rows, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream_)),
        "upload");
}

void CudaTensorOps::download(std::span<float> host, const float* src) {
  if (!host.empty())
    check(cudaMemcpyAsync(host.data(), src, host.size() * sizeof(float), cudaMemcpyDeviceToHost,
                          static_cast<cudaStream_t>(stream_)),
          "download");
  synchronize();
}

}  // namespace cpbench
