// cuda_attention_kernels.h — CudaAttentionKernels: the executor's tile kernels on one GPU, every
// call on its memory's stream (CudaTensorOps). Two paths:
// - exact (the default): our SIMT kernel (kernels/cuda/flash_simt_cuda.h: any mask, GQA) in fp32,
//   the correctness path for every tile a plan can hold;
// - fast: bf16 arithmetic, as training runs it. A tile whose mask is one of cuDNN's modes
//   (kernels/reference/tile_mode.h's classifier) goes to cuDNN's fused SDPA (kernels/cudnn), forward
//   and backward; any other tile, forward and backward, to our tensor-core kernels
//   (kernels/cuda/flash_mma.h, head dims 64 and 128), and what neither takes to the SIMT kernel. The tile's fp32 Q, K, V (and O,
//   dO) are rounded to bf16 first, so its results carry bf16's error: it is for plans whose values
//   travel as bf16 (value_bytes 2), whose check allows that error.
// Requires: CUDA and a device (library cpbench_core_cuda); the fast path also cuDNN and
// cudnn-frontend at build time (CPBENCH_HAVE_CUDNN; without them asking for it throws). The calls'
// tensors in memory(), their key ranges on the host (copied to the device with each call, in
// stream order).
// Note: cuDNN's statistics are the natural-log LSE in [B, H, S, 1]; a tile is one sequence (B = 1),
// so they are the executor's [Hq, rows_q] exactly and the forward writes them in place; the
// backward's LSE rows, at a stride of lse_stride, are packed for it first.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/runtime/attention_kernels.h"
#include "core/runtime/cuda/cuda_tensor_ops.h"
#include "kernels/reference/tile_mode.h"

namespace cpbench {

class CudaAttentionKernels final : public AttentionKernels {
 public:
  enum class Path { exact, fast };
  explicit CudaAttentionKernels(Path path = Path::exact);
  ~CudaAttentionKernels() override;

  TensorOps& memory() override { return memory_; }
  void tile_forward(const ForwardCall& call) override;
  void tile_backward(const BackwardCall& call) override;
  // Every tile call is bracketed by two CUDA events on the stream; their intervals summed.
  std::optional<double> take_kernel_seconds() override;

  // Tile calls run by each kernel since the process started, over every object (the fast path's
  // tests read which kernels a plan's tiles reached).
  struct TileCounts {
    int64_t cudnn = 0, tensor_core = 0, simt = 0;
  };
  static TileCounts tiles_run();

 private:
  struct Fast;
  // Which kernel computes a tile. Chosen before the tile's events are recorded: choosing cuDNN
  // builds its graph for the tile's shape on the first such tile (host work, milliseconds), which
  // must not count as kernel time.
  // The tile's mask as cuDNN's modes see it rides along, classified once.
  struct Route {
    enum Kernel { simt, cudnn, tensor_core } kernel = simt;
    kernels::TileMode mode;
  };
  Route route(const kernels::TileInput& tile, bool backward);
  void fast_forward(const ForwardCall& call, const Route& route);
  void fast_backward(const BackwardCall& call, const Route& route);
  void run_tile_forward(const ForwardCall& call, const Route& route);
  void run_tile_backward(const BackwardCall& call, const Route& route);
  // Records `call` between two events on the stream, kept until take_kernel_seconds.
  template <class F>
  void timed(F call);

  CudaTensorOps memory_;
  std::unique_ptr<Fast> fast_;
  std::vector<std::pair<void*, void*>> events_;  // (start, end) cudaEvent_t of each call not yet taken
};

}  // namespace cpbench
