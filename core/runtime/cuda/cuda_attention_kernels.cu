#include "core/runtime/cuda/cuda_attention_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>

#include "kernels/cuda/flash_mma.h"
#include "kernels/cuda/flash_simt_cuda.h"
#if defined(CPBENCH_HAVE_CUDNN)
#include "kernels/cudnn/sdpa_graph.h"
#endif

namespace cpbench {

namespace {

std::atomic<int64_t> cudnn_tiles{0}, tensor_core_tiles{0}, simt_tiles{0};

void check(int e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(static_cast<cudaError_t>(e)));
}

// The tile's key ranges in device memory, allocated and freed in stream order (the kernels that
// read them run before the free).
class DeviceRanges {
 public:
  DeviceRanges(const kernels::TileInput& t, cudaStream_t s) : stream_(s) {
    const size_t bytes = static_cast<size_t>(t.rows_q > 0 ? t.rows_q : 1) * sizeof(kernels::KeyRanges);
    check(cudaMallocAsync(reinterpret_cast<void**>(&p_), bytes, s), "cudaMallocAsync");
    if (t.rows_q > 0) check(cudaMemcpyAsync(p_, t.ranges, bytes, cudaMemcpyHostToDevice, s), "ranges upload");
  }
  ~DeviceRanges() { cudaFreeAsync(p_, stream_); }
  DeviceRanges(const DeviceRanges&) = delete;
  DeviceRanges& operator=(const DeviceRanges&) = delete;
  const kernels::KeyRanges* get() const { return p_; }

 private:
  kernels::KeyRanges* p_ = nullptr;
  cudaStream_t stream_;
};

// A device buffer that grows (in stream order) to the largest size asked of it.
class Scratch {
 public:
  ~Scratch() {
    if (p_) cudaFree(p_);
  }
  void* get(size_t bytes, cudaStream_t s) {
    if (bytes > bytes_) {
      if (p_) check(cudaFreeAsync(p_, s), "cudaFreeAsync");
      p_ = nullptr;
      check(cudaMallocAsync(&p_, bytes, s), "cudaMallocAsync");
      bytes_ = bytes;
    }
    return p_;
  }
  std::byte* bytes(size_t n, cudaStream_t s) { return static_cast<std::byte*>(get(n, s)); }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace

// The fast path's state: cuDNN's runner on the memory's stream and the bf16 copies of a tile.
struct CudaAttentionKernels::Fast {
#if defined(CPBENCH_HAVE_CUDNN)
  std::unique_ptr<kernels::SdpaRunner> cudnn;
#endif
  Scratch q, k, v, o, d_o, dq, dk, dv, grad32, stats;
};

CudaAttentionKernels::CudaAttentionKernels(Path path) {
  if (path == Path::exact) return;
#if defined(CPBENCH_HAVE_CUDNN)
  fast_ = std::make_unique<Fast>();
  std::string error;
  fast_->cudnn = kernels::SdpaRunner::create(memory_.stream(), &error);
  if (!fast_->cudnn) throw std::runtime_error("cuDNN for the fast attention path: " + error);
#else
  throw std::runtime_error("the fast attention path needs cuDNN and cudnn-frontend, which this build lacks");
#endif
}

CudaAttentionKernels::~CudaAttentionKernels() {
  for (auto [start, end] : events_) {
    cudaEventDestroy(static_cast<cudaEvent_t>(start));
    cudaEventDestroy(static_cast<cudaEvent_t>(end));
  }
}

template <class F>
void CudaAttentionKernels::timed(F call) {
  const auto stream = static_cast<cudaStream_t>(memory_.stream());
  cudaEvent_t start = nullptr, end = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&end), "cudaEventCreate");
  events_.emplace_back(start, end);
  check(cudaEventRecord(start, stream), "cudaEventRecord");
  call();
  check(cudaEventRecord(end, stream), "cudaEventRecord");
}

std::optional<double> CudaAttentionKernels::take_kernel_seconds() {
  double seconds = 0;
  for (auto [start, end] : events_) {
    float ms = 0;
    check(cudaEventSynchronize(static_cast<cudaEvent_t>(end)), "cudaEventSynchronize");
    check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)), "cudaEventElapsedTime");
    seconds += 1e-3 * ms;
    cudaEventDestroy(static_cast<cudaEvent_t>(start));
    cudaEventDestroy(static_cast<cudaEvent_t>(end));
  }
  events_.clear();
  return seconds;
}

CudaAttentionKernels::TileCounts CudaAttentionKernels::tiles_run() {
  return {cudnn_tiles.load(), tensor_core_tiles.load(), simt_tiles.load()};
}

void CudaAttentionKernels::tile_forward(const ForwardCall& c) {
  if (c.tile.rows_q == 0) return;
  const Route r = route(c.tile, false);
  timed([&] { run_tile_forward(c, r); });
}

void CudaAttentionKernels::tile_backward(const BackwardCall& c) {
  if (c.tile.rows_q == 0 && c.tile.rows_k == 0) return;
  const Route r = route(c.tile, true);
  timed([&] { run_tile_backward(c, r); });
}

void CudaAttentionKernels::run_tile_forward(const ForwardCall& c, const Route& r) {
  if (r.kernel != Route::simt) return fast_forward(c, r);
  const auto stream = static_cast<cudaStream_t>(memory_.stream());
  DeviceRanges ranges(c.tile, stream);
  check(kernels::simt_forward_cuda(kernels::simt_tile(c.tile, ranges.get()), c.out, c.lse, c.tile.rows_q, stream), "forward");
  ++simt_tiles;
}

void CudaAttentionKernels::run_tile_backward(const BackwardCall& c, const Route& r) {
  if (r.kernel != Route::simt) return fast_backward(c, r);
  const auto stream = static_cast<cudaStream_t>(memory_.stream());
  DeviceRanges ranges(c.tile, stream);
  check(kernels::simt_backward_cuda(kernels::simt_tile(c.tile, ranges.get()), c.out, c.lse, c.lse_stride, c.dout, c.dq, c.dk,
                                    c.dv, stream),
        "backward");
  ++simt_tiles;
}

#if defined(CPBENCH_HAVE_CUDNN)

namespace {

// One tile as cuDNN's dense SDPA sees it: one sequence of rows_q queries against rows_k keys.
kernels::SdpaShape sdpa_shape(const kernels::TileInput& t) {
  kernels::SdpaShape s;
  s.heads_q = t.dims.heads_q;
  s.heads_kv = t.dims.heads_kv;
  s.s_q = t.rows_q;
  s.s_kv = t.rows_k;
  s.head_dim = t.dims.head_dim;
  s.scale = static_cast<float>(t.dims.softmax_scale());
  return s;
}

// Whether cuDNN computes the tile: a mode it has, both sides non-empty, a head dim its fused
// kernels take on Hopper and Ampere alike, and a graph it agrees to build.
bool cudnn_takes(kernels::SdpaRunner& runner, const kernels::TileInput& t, const kernels::TileMode& mode, bool backward) {
  if (!kernels::sdpa_mode_supported(mode) || t.rows_q == 0 || t.rows_k == 0) return false;
  if (t.dims.head_dim % 8 != 0 || t.dims.head_dim > 128) return false;
  return runner.prepare(sdpa_shape(t), mode, backward).ok;
}

// The tile on its bf16 copies, for our tensor-core kernels (its ranges set by the caller).
kernels::SimtTile<kernels::Bf16> bf16_tile(const kernels::TileInput& t, const std::byte* q16, const std::byte* k16,
                                           const std::byte* v16) {
  kernels::SimtTile<kernels::Bf16> m;
  m.q = reinterpret_cast<const kernels::Bf16*>(q16);
  m.k = reinterpret_cast<const kernels::Bf16*>(k16);
  m.v = reinterpret_cast<const kernels::Bf16*>(v16);
  m.rows_q = t.rows_q, m.rows_k = t.rows_k, m.key_begin = t.key_begin;
  m.heads_q = t.dims.heads_q, m.heads_kv = t.dims.heads_kv, m.head_dim = t.dims.head_dim;
  m.scale = static_cast<float>(t.dims.softmax_scale());
  return m;
}

}  // namespace

CudaAttentionKernels::Route CudaAttentionKernels::route(const kernels::TileInput& t, bool backward) {
  if (!fast_) return {};
  const kernels::TileMode mode = kernels::classify_tile(t);
  if (mode.mask == kernels::TileMask::empty) return {};  // no pair: O = 0, LSE = −inf, no gradient
  if (cudnn_takes(*fast_->cudnn, t, mode, backward)) return {Route::cudnn, mode};
  // Our tensor-core kernels read the tile's bf16 copies, which Scratch allocates 256-byte aligned:
  // what they may refuse is the shape.
  const kernels::SimtTile<kernels::Bf16> m = bf16_tile(t, nullptr, nullptr, nullptr);
  const bool ours = backward ? kernels::mma_backward_supports(m, nullptr) : kernels::mma_forward_supports(m);
  return {ours ? Route::tensor_core : Route::simt, mode};
}

void CudaAttentionKernels::fast_forward(const ForwardCall& c, const Route& r) {
  const kernels::TileInput& t = c.tile;
  const auto stream = static_cast<cudaStream_t>(memory_.stream());
  const int64_t nq = t.rows_q * t.dims.heads_q * t.dims.head_dim, nk = t.rows_k * t.dims.heads_kv * t.dims.head_dim;
  std::byte* q16 = fast_->q.bytes(2 * nq, stream);
  std::byte* k16 = fast_->k.bytes(2 * std::max<int64_t>(nk, 1), stream);
  std::byte* v16 = fast_->v.bytes(2 * std::max<int64_t>(nk, 1), stream);
  memory_.encode(q16, t.q, nq, 2);
  memory_.encode(k16, t.k, nk, 2);
  memory_.encode(v16, t.v, nk, 2);
  if (r.kernel == Route::cudnn) {
    std::byte* o16 = fast_->o.bytes(2 * nq, stream);
    kernels::SdpaTensors x;
    x.q = q16, x.k = k16, x.v = v16, x.o = o16, x.stats = c.lse;  // [1, Hq, rows_q, 1] = the executor's [Hq, rows_q]
    if (const kernels::SdpaStatus st = fast_->cudnn->forward(sdpa_shape(t), r.mode, x); !st.ok)
      throw std::runtime_error("cuDNN SDPA forward: " + st.message);
    memory_.decode(c.out, o16, nq, 2);
    ++cudnn_tiles;
    return;
  }
  kernels::SimtTile<kernels::Bf16> m = bf16_tile(t, q16, k16, v16);
  DeviceRanges ranges(t, stream);
  m.ranges = ranges.get();
  check(kernels::mma_forward_cuda(m, c.out, c.lse, t.rows_q, stream), "tensor-core forward");
  ++tensor_core_tiles;
}

void CudaAttentionKernels::fast_backward(const BackwardCall& c, const Route& r) {
  const kernels::TileInput& t = c.tile;
  const auto stream = static_cast<cudaStream_t>(memory_.stream());
  const int64_t hq = t.dims.heads_q, d = t.dims.head_dim;
  const int64_t nq = t.rows_q * hq * d, nk = t.rows_k * t.dims.heads_kv * d;
  std::byte *q16 = fast_->q.bytes(2 * nq, stream), *k16 = fast_->k.bytes(2 * nk, stream),
            *v16 = fast_->v.bytes(2 * nk, stream), *do16 = fast_->d_o.bytes(2 * nq, stream);
  memory_.encode(q16, t.q, nq, 2);
  memory_.encode(k16, t.k, nk, 2);
  memory_.encode(v16, t.v, nk, 2);
  memory_.encode(do16, c.dout, nq, 2);
  if (r.kernel == Route::tensor_core) {
    // Our tensor-core backward: the masks cuDNN has no mode for. It adds into the fp32 gradients.
    kernels::SimtTile<kernels::Bf16> m = bf16_tile(t, q16, k16, v16);
    DeviceRanges ranges(t, stream);
    m.ranges = ranges.get();
    check(kernels::mma_backward_cuda(m, c.out, c.lse, c.lse_stride, reinterpret_cast<const kernels::Bf16*>(do16), c.dq,
                                     c.dk, c.dv, stream),
          "tensor-core backward");
    ++tensor_core_tiles;
    return;
  }
  std::byte *o16 = fast_->o.bytes(2 * nq, stream), *dq16 = fast_->dq.bytes(2 * nq, stream),
            *dk16 = fast_->dk.bytes(2 * nk, stream), *dv16 = fast_->dv.bytes(2 * nk, stream);
  memory_.encode(o16, c.out, nq, 2);
  // cuDNN reads the statistics as [1, Hq, rows_q, 1]: the executor's rows h at lse + h·lse_stride.
  const float* stats = c.lse;
  if (c.lse_stride != t.rows_q) {
    auto* packed = static_cast<float*>(fast_->stats.get(static_cast<size_t>(hq * t.rows_q) * sizeof(float), stream));
    check(cudaMemcpy2DAsync(packed, t.rows_q * sizeof(float), c.lse, c.lse_stride * sizeof(float),
                            t.rows_q * sizeof(float), hq, cudaMemcpyDeviceToDevice, stream),
          "LSE rows packed for cuDNN");
    stats = packed;
  }
  kernels::SdpaTensors x;
  x.q = q16, x.k = k16, x.v = v16, x.o_in = o16, x.stats_in = stats, x.d_o = do16;
  x.dq = dq16, x.dk = dk16, x.dv = dv16;
  if (const kernels::SdpaStatus st = fast_->cudnn->backward(sdpa_shape(t), r.mode, x); !st.ok)
    throw std::runtime_error("cuDNN SDPA backward: " + st.message);
  // cuDNN writes the tile's gradients; the executor's are sums over tiles: decoded, then added.
  auto* grad = static_cast<float*>(fast_->grad32.get(static_cast<size_t>(std::max(nq, nk)) * sizeof(float), stream));
  auto add_into = [&](float* dst, const std::byte* src16, int64_t rows, int64_t width) {
    memory_.decode(grad, src16, rows * width, 2);
    memory_.add({dst, width}, {grad, width}, rows, width);
  };
  add_into(c.dq, dq16, t.rows_q, hq * d);
  add_into(c.dk, dk16, t.rows_k, t.dims.heads_kv * d);
  add_into(c.dv, dv16, t.rows_k, t.dims.heads_kv * d);
  ++cudnn_tiles;
}

#else

// Without cuDNN there is no fast path (the constructor refuses it): every tile is the SIMT kernel's.
CudaAttentionKernels::Route CudaAttentionKernels::route(const kernels::TileInput&, bool) { return {}; }
void CudaAttentionKernels::fast_forward(const ForwardCall&, const Route&) {}
void CudaAttentionKernels::fast_backward(const BackwardCall&, const Route&) {}

#endif

}  // namespace cpbench
