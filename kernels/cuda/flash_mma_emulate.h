// flash_mma_emulate.h — the tensor-core kernels' own code (flash_mma_body.h) run on the CPU: each
// thread block's 128 threads as threads of this process, their barriers as barriers, and each warp
// instruction (mma.sync m16n8k16, ldmatrix .x4 .trans, shuffles) computed from the operands all 32
// lanes hold, by the PTX ISA's fragment layouts written out here independently of the kernels' own
// indexing (flash_mma.h). This is how CI, without a GPU, checks these kernels' arithmetic against
// the reference, as flash_simt_host does for the SIMT kernel.
// Requires: nothing beyond the C++ standard library (threads, barriers).
// Note: slow (every warp instruction waits for its 32 threads): for tests at small sizes. The
// tensor cores' fp32 accumulation order differs from the emulation's, so results agree to
// rounding, not bit for bit.
#pragma once

#include <cstdint>

#include "kernels/cuda/flash_mma.h"

namespace cpbench::kernels {

// As mma_forward_cuda and mma_backward_cuda (same arguments and results, host memory): the tile
// must satisfy mma_forward_supports / mma_backward_supports, else std::invalid_argument.
void mma_forward_emulated(const SimtTile<Bf16>& t, float* out, float* lse, int64_t lse_stride);
void mma_backward_emulated(const SimtTile<Bf16>& t, const float* out, const float* lse, int64_t lse_stride,
                           const Bf16* dout, float* dq, float* dk, float* dv);

}  // namespace cpbench::kernels
