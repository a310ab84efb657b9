// sdpa_graph.h — cuDNN's fused attention (SDPA) as the GPU backend's fast path: the forward (with
// the softmax statistics the executor merges) and backward graphs of one tile, in a mode of
// tile_mode.h, built with cudnn-frontend (NVIDIA's header-only graph API; installed by
// scripts/setup.sh from PyPI's nvidia-cudnn-frontend, never committed).
// Requires: cuDNN 9 and cudnn-frontend at build time (CMake builds cpbench_cudnn when both are
// found). validate() needs no GPU: it checks the graph against cuDNN's support rules for a given
// SM version, which is how CI (no GPU) checks every mode the fast path can emit at sm 90.
// SdpaRunner executes them on a device (a GPU is needed from `create` on).
// Note: cudnn-frontend's header is included by sdpa_graph.cpp only (one translation unit: it takes
// ~45 s and ~1.8 GB to compile). The tensors are THD rows as the executor holds them: a token's
// heads side by side ([T, H, D], row stride H·D), given to cuDNN as [B, H, S, D] with strides
// {S·H·D, D, H·D, 1}; with `ragged`, B packed sequences of up to S tokens each located by ragged
// offsets and their lengths (padding mask), as TransformerEngine drives cuDNN on THD packs. The
// statistics come back as [B, H, S, 1] fp32 (cuDNN's layout); the executor's LSE is [Hq, T]: the
// conversion is the caller's, explicitly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "kernels/reference/tile_mode.h"

namespace cpbench::kernels {

struct SdpaShape {
  int64_t batch = 1;      // sequences (B)
  int64_t heads_q = 1;    // Hq
  int64_t heads_kv = 1;   // Hkv (GQA when < Hq)
  int64_t s_q = 1;        // query rows per sequence (the longest, when ragged)
  int64_t s_kv = 1;       // key rows per sequence (the longest, when ragged)
  int64_t head_dim = 128;
  bool bf16 = true;       // bf16, else fp16 (cuDNN's fused SDPA has no fp32 path)
  bool ragged = false;    // THD: sequences of different lengths packed, by offsets and lengths
  float scale = 0.0f;     // the softmax scale; 0 = 1/sqrt(head_dim)
};

// The outcome of one check: ok, or cuDNN's (or cpbench's) reason.
struct SdpaStatus {
  bool ok = false;
  std::string message;
};

// Whether cpbench hands `mode` to cuDNN at all: full and the causal modes (with or without a
// window); empty and custom tiles never reach it.
bool sdpa_mode_supported(const TileMode& mode);

// The forward graph (O and the softmax statistics) or the backward graph (dQ, dK, dV from Q, K,
// V, O, dO and the statistics) of `mode` on `shape`, validated for SM version `sm` (90: Hopper).
// A mode cuDNN is not asked to run (sdpa_mode_supported) is refused with the reason.
SdpaStatus validate_sdpa_graph(const SdpaShape& shape, const TileMode& mode, bool backward, int sm);

// Device pointers of one call. Q, O, dO, dQ: [T, Hq, D] rows (bf16 or fp16 as the shape says);
// K, V, dK, dV: [T, Hkv, D]; stats: fp32 [B, Hq, S_q, 1] (natural-log LSE per row, cuDNN's layout).
// With a ragged shape: each sequence's length (B int32 each) and where each sequence's rows start,
// in elements (B + 1 int32: the row offset times H·D) for Q's layout and for K's.
struct SdpaTensors {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;      // forward's output
  float* stats = nullptr;  // forward's output
  const void* o_in = nullptr;         // backward's inputs: the forward's O and stats, and dO
  const float* stats_in = nullptr;
  const void* d_o = nullptr;
  void* dq = nullptr;  // backward's outputs (written, not added to)
  void* dk = nullptr;
  void* dv = nullptr;
  const int32_t* seq_len_q = nullptr;
  const int32_t* seq_len_kv = nullptr;
  const int32_t* offsets_q = nullptr;
  const int32_t* offsets_kv = nullptr;
};

// cuDNN's SDPA on a device: one cuDNN handle on one stream, each (shape, mode, direction)'s graph
// built once (validated, planned by cuDNN's heuristics mode A, its plan compiled) and cached, one
// workspace grown to the largest plan's need. Calls are asynchronous on the stream.
class SdpaRunner {
 public:
  // A runner on `stream` (a cudaStream_t; null = the default stream), or null with *error set.
  static std::unique_ptr<SdpaRunner> create(void* stream, std::string* error);
  ~SdpaRunner();
  SdpaRunner(const SdpaRunner&) = delete;
  SdpaRunner& operator=(const SdpaRunner&) = delete;

  // Builds (or finds) the graph without running it: where cuDNN refuses a shape, the reason.
  SdpaStatus prepare(const SdpaShape& shape, const TileMode& mode, bool backward);
  SdpaStatus forward(const SdpaShape& shape, const TileMode& mode, const SdpaTensors& tensors);
  SdpaStatus backward(const SdpaShape& shape, const TileMode& mode, const SdpaTensors& tensors);

 private:
  struct Impl;
  explicit SdpaRunner(std::unique_ptr<Impl> impl);
  std::pair<SdpaStatus, const void*> graph_for(const SdpaShape& shape, const TileMode& mode, bool backward);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cpbench::kernels
