// cpu_attention_kernels.cpp — AttentionKernels on kernels/cpu.
#include "core/runtime/cpu_attention_kernels.h"

namespace cpbench {

void CpuAttentionKernels::tile_forward(const ForwardCall& c) {
  kernels::flash_tile_forward(c.tile, c.out, c.lse, c.tile.rows_q, config_);
}

void CpuAttentionKernels::tile_backward(const BackwardCall& c) {
  kernels::flash_tile_backward(c.tile, c.out, c.lse, c.lse_stride, c.dout, c.dq, c.dk, c.dv, config_);
}

Expected<ExecutionReport> execute_attention(const AttentionPlan& plan, Communicator& comm, const AttentionInputs& in,
                                            bool backward, const kernels::FlashConfig& config) {
  CpuAttentionKernels cpu(config);
  return execute_attention(plan, comm, cpu, in, backward);
}

}  // namespace cpbench
