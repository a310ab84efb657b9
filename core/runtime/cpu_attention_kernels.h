// cpu_attention_kernels.h — CpuAttentionKernels: AttentionKernels on kernels/cpu's tiled flash
// attention (OpenBLAS, OpenMP) over host memory, and execute_attention on them.
// Requires: kernels/cpu. The one place core/runtime reaches kernels/cpu for execution, so the
// executor and a GPU backend's binary do not depend on OpenBLAS.
#pragma once

#include "core/runtime/attention_kernels.h"
#include "core/runtime/executor.h"
#include "core/runtime/host_tensor_ops.h"
#include "kernels/cpu/flash_attention.h"

namespace cpbench {

class CpuAttentionKernels final : public AttentionKernels {
 public:
  explicit CpuAttentionKernels(const kernels::FlashConfig& config = {}) : config_(config) {}
  TensorOps& memory() override { return host_; }
  void tile_forward(const ForwardCall& call) override;
  void tile_backward(const BackwardCall& call) override;

 private:
  kernels::FlashConfig config_;
  HostTensorOps host_;
};

// execute_attention on kernels/cpu.
Expected<ExecutionReport> execute_attention(const AttentionPlan& plan, Communicator& comm, const AttentionInputs& in,
                                            bool backward, const kernels::FlashConfig& config = {});

}  // namespace cpbench
