// batch.h — one iteration's global batch: the sequence lengths every strategy plans for.
// Requires: length_profile.h, sampling.h. A batch is either a number of sequences or a token
// budget, drawn from a profile by seed; the same request always gives the same batch.
// Note: by token budget, drawing stops before the first sequence that would overflow the budget
// (that sequence is dropped, not cut), so total_tokens() ≤ tokens (with min_fill, batches below it
// are dropped and drawing goes on); the clamp is tightened to
// max_length ≤ tokens so the first sequence always fits and a batch is never empty.
#pragma once

#include <cstdint>
#include <vector>

#include "core/workload/length_profile.h"
#include "core/workload/mask.h"
#include "core/workload/sampling.h"

namespace cpbench {

// Σ L and Σ L² of a list of sequence lengths: what linear layers and attention scale with.
int64_t sum_tokens(const std::vector<int64_t>& lengths);
double sum_squares(const std::vector<int64_t>& lengths);

struct GlobalBatch {
  std::vector<int64_t> lengths;  // tokens of each sequence, in draw order
  MaskSpec mask;                 // every sequence's attention mask (the workload's; causal by default)

  int64_t total_tokens() const;  // Σ L: what linear layers see
  double sum_sq() const;         // Σ L²: what full (non-causal) attention scales with
  int64_t max_length() const;    // 0 for an empty batch
  bool operator==(const GlobalBatch&) const = default;
};

struct BatchRequest {
  int64_t sequences = 0;    // > 0: exactly this many sequences
  int64_t tokens = 0;       // used when sequences == 0: a budget of tokens, see the header note
  int64_t min_length = 1;   // clamp applied to every length (replaces the profile's clamp)
  int64_t max_length = 1;
  uint64_t seed = 1;
  double length_scale = 1.0;  // multiplies each draw before clipping (DCP micro-benchmarks: 0.5–4×)
  // Token-budget mode: a batch filled below this fraction of the budget is discarded and the next
  // one drawn from the same stream (DCP's micro-benchmarks keep batches at least 75% full); 0 keeps
  // the first batch. Up to 10,000 batches are tried; then the fullest is kept.
  double min_fill = 0;
  // Lengths over max_length: clipped to it, or left out as DCP's batch scripts do (sampling.h).
  Overlong overlong = Overlong::clip;
};

// Requires sequences > 0 or tokens > 0, and 1 ≤ min_length ≤ max_length. The lengths are the
// stream of LengthSampler(profile, seed, min_length, max_length', length_scale), where max_length'
// = min(max_length, tokens) in budget mode: batch i of a run should use its own seed.
GlobalBatch make_global_batch(const LengthProfile& profile, const BatchRequest& request);

// The first n batches of that stream (requires n ≥ 1), each as make_global_batch draws it, one after the
// other: the sequence that overflows a batch opens the next, as DCP's get_*_batches.py pack a
// shuffled dataset; the first equals make_global_batch's.
std::vector<GlobalBatch> make_global_batches(const LengthProfile& profile, const BatchRequest& request, int n);

}  // namespace cpbench
