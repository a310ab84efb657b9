// dataset_state.h — Tenplex's dataset state (SOSP'24; references/tenplex_tensoropt.md): where a
// job is in its epoch and which samples each data-parallel rank reads (each rank a contiguous
// share of every global batch; Megatron's pretraining sampler interleaves micro-batch slices
// instead — the same samples per step, in another order), and its re-partitioning when the DP size changes, so that training
// resumes mid-epoch without repeating or skipping a sample and with the same global batch.
// Requires: core/workload/rng.h. The epoch's order is a seeded permutation (Fisher-Yates over
// cpbench's SplitMix64: the same on every platform).
#pragma once

#include <cstdint>
#include <vector>

#include "core/common/expected.h"

namespace cpbench {

struct DatasetState {
  int64_t samples = 0;       // in the epoch
  uint64_t seed = 1;         // of the epoch's order
  int64_t global_batch = 0;  // samples per step (kept across a change)
  int64_t consumed = 0;      // samples of the epoch already trained on: the position
  int64_t dp = 1;            // data-parallel ranks reading it
};

// The epoch's sample order.
std::vector<int64_t> epoch_order(int64_t samples, uint64_t seed);

// The sample indices DP rank `d` reads in the next `steps` steps, in order: step k's global
// batch is the order's samples [consumed + k·B, consumed + (k + 1)·B), rank d its contiguous
// B/dp share. Stops at the epoch's end.
std::vector<int64_t> rank_samples(const DatasetState& state, int64_t d, int64_t steps);

// `state` after `steps` more steps.
DatasetState advance(DatasetState state, int64_t steps);

// The state under `dp` ranks: the same position and global batch, the shares recomputed.
// Error when the global batch does not split over dp.
Expected<DatasetState> repartition(const DatasetState& state, int64_t dp);

}  // namespace cpbench
