// cuda_attention_kernels.h — CudaAttentionKernels: the executor's tile kernels on one GPU, our SIMT
// kernel (kernels/cuda/flash_simt_cuda.h: any mask, GQA, fp32) on CudaTensorOps memory, every call
// on that memory's stream. The correctness path; cuDNN's graphs (kernels/cudnn) become the fast
// path for the tiles the classifier sends there.
// Requires: CUDA and a device (library cpbench_core_cuda); the calls' tensors in memory(), their key
// ranges on the host (copied to the device with each call, in stream order).
#pragma once

#include "core/runtime/attention_kernels.h"
#include "core/runtime/cuda/cuda_tensor_ops.h"

namespace cpbench {

class CudaAttentionKernels final : public AttentionKernels {
 public:
  TensorOps& memory() override { return memory_; }
  void tile_forward(const ForwardCall& call) override;
  void tile_backward(const BackwardCall& call) override;

 private:
  CudaTensorOps memory_;
};

}  // namespace cpbench
