// sdpa_graph.h — cuDNN's fused attention (SDPA) as the GPU backend's fast path: the forward (with
// the softmax statistics the executor merges) and backward graphs of one tile, in a mode of
// tile_mode.h, built with cudnn-frontend (NVIDIA's header-only graph API; installed by
// scripts/setup.sh from PyPI's nvidia-cudnn-frontend, never committed).
// Requires: cuDNN 9 and cudnn-frontend at build time (CMake builds cpbench_cudnn when both are
// found). validate() needs no GPU: it checks the graph against cuDNN's support rules for a given
// SM version, which is how CI (no GPU) checks every mode the fast path can emit at sm 90.
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

}  // namespace cpbench::kernels
