// tile_mode.h — which mask mode of a fused attention library (cuDNN's SDPA through cudnn-frontend)
// computes a tile exactly, so that a GPU backend sends the tile there and everything else to its
// own kernel (issue 32: cuDNN the fast path, our kernel the correctness path for every tile).
// Requires: a TileInput's rows, ranges and key block (attention_problem.h); reads only the ranges.
// Note: cuDNN's modes are stated on the tile's own coordinates — query row i, key column j, s_q rows
// and s_kv keys: no mask (every j); causal top-left (j ≤ i); causal bottom-right
// (j ≤ i + s_kv − s_q); and either causal one with a sliding window of w keys (j > i + offset − w).
// A tile is sent there only when the mode's allowed set equals the tile's exactly and no row is
// fully masked (a library's output for a row without keys is not the executor's O = 0,
// LSE = −inf); an empty tile is no work at all.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/reference/attention_problem.h"

namespace cpbench::kernels {

enum class TileMask {
  empty,                // no allowed pair: nothing to compute
  full,                 // every row sees every key of the tile
  causal_top_left,      // j ≤ i (+ window)
  causal_bottom_right,  // j ≤ i + s_kv − s_q (+ window)
  custom,               // anything else: our kernel, reading the per-row ranges
};
const char* tile_mask_name(TileMask m);

struct TileMode {
  TileMask mask = TileMask::custom;
  int64_t window = 0;  // causal modes: keys j > i + offset − window only; 0 = no left bound
  bool operator==(const TileMode&) const = default;
};

// The mode computing `tile` exactly (TileInput: rows_q rows at tile.ranges, keys
// [key_begin, key_begin + rows_k) of the sequence).
TileMode classify_tile(const TileInput& tile);

// Whether the mode allows key column j for query row i of an s_q × s_kv tile (the definition the
// classifier is tested against).
bool tile_mode_allows(const TileMode& mode, int64_t s_q, int64_t s_kv, int64_t i, int64_t j);

}  // namespace cpbench::kernels
