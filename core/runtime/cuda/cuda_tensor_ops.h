// cuda_tensor_ops.h — CudaTensorOps: TensorOps on one GPU's memory (tensor_ops.h says what each
// operation does): buffers from cudaMalloc, blocks moved with cudaMemcpy2DAsync, add, the LSE merge
// and the bf16 wire encoding one kernel each, all in order on the object's own stream.
// Requires: CUDA (library cpbench_core_cuda, built when nvcc is found) and a device; the object
// uses the device current when it is made.
// Note: calls are asynchronous on stream() except download, which waits for everything before it
// (the host reads the result). A Communicator that reads or writes these buffers from the host
// must call synchronize() first; one that works on the stream (NCCL) needs not. The wire encoding
// is bf16.h's, the same bits HostTensorOps writes.
#pragma once

#include "core/runtime/tensor_ops.h"

namespace cpbench {

class CudaTensorOps final : public TensorOps {
 public:
  CudaTensorOps();  // creates its stream on the current device; throws std::runtime_error without one
  ~CudaTensorOps() override;
  CudaTensorOps(const CudaTensorOps&) = delete;
  CudaTensorOps& operator=(const CudaTensorOps&) = delete;

  FloatBuffer floats(int64_t n, float value) override;
  ByteBuffer bytes(int64_t n) override;
  void copy(Rows<float> dst, Rows<const float> src, int64_t rows, int64_t width) override;
  void add(Rows<float> dst, Rows<const float> src, int64_t rows, int64_t width) override;
  void merge(const LseMerge& m) override;
  void copy_bytes(std::byte* dst, const std::byte* src, int64_t n) override;
  void encode(std::byte* dst, const float* src, int64_t n, int value_bytes) override;
  void decode(float* dst, const std::byte* src, int64_t n, int value_bytes) override;
  void upload(Rows<float> dst, Rows<const float> host, int64_t rows, int64_t width) override;
  void download(std::span<float> host, const float* src) override;

  void* stream() const { return stream_; }  // a cudaStream_t
  void synchronize();                        // waits for every call made so far

 private:
  void* stream_ = nullptr;
};

}  // namespace cpbench
