// cpu_attention_kernels.cpp — AttentionKernels on kernels/cpu.
#include "core/runtime/cpu_attention_kernels.h"

namespace cpbench {

kernels::PartialOutput CpuAttentionKernels::tile_forward(const kernels::TileInput& tile) {
  return kernels::flash_tile_forward(tile, config_);
}

void CpuAttentionKernels::tile_backward(const kernels::TileInput& tile, const float* out, const float* lse,
                                        int64_t lse_stride, const float* dout, float* dq, float* dk, float* dv) {
  kernels::flash_tile_backward(tile, out, lse, lse_stride, dout, dq, dk, dv, config_);
}

Expected<ExecutionReport> execute_attention(const AttentionPlan& plan, Communicator& comm, const AttentionInputs& in,
                                            bool backward, const kernels::FlashConfig& config) {
  CpuAttentionKernels cpu(config);
  return execute_attention(plan, comm, cpu, in, backward);
}

}  // namespace cpbench
