// mask.h — attention masks of one sequence as at most two key ranges per query row: full, causal,
// lambda (attention sink + sliding window), shared_question and causal_blockwise (DCP, SOSP'25).
// Requires: core/common/json_reader.h. Positions are 0-based inside one sequence of L tokens; a
// packed batch applies the mask to each sequence separately (no attention across documents).
// Note: definitions follow DCP's public mask functions (dcp/runtime/flash_attention/utils.py), as
// summarised in references/dcp.md; every row's ranges are returned disjoint, sorted and merged.
#pragma once

#include <cstdint>
#include <string>

#include "core/common/expected.h"
#include "core/common/json_reader.h"

namespace cpbench {

enum class MaskKind { full, causal, lambda, shared_question, causal_blockwise };

// Parameters beside `kind` matter only for their kind; defaults are DCP's evaluation settings.
struct MaskSpec {
  MaskKind kind = MaskKind::causal;
  int64_t sink_tokens = 64;        // lambda: the first tokens every query sees
  int64_t window_tokens = 4096;    // lambda: query q also sees (q − window, q]
  double question_fraction = 0.2;  // shared_question: question = floor(L · fraction) tokens
  int64_t answers = 4;             // shared_question: answers split the rest evenly, the last takes the remainder
  int64_t block_tokens = 256;      // causal_blockwise: block size B
  int64_t local_blocks = 2;        // causal_blockwise: a middle block's window reaches k·B tokens back
  bool operator==(const MaskSpec&) const = default;
};

// Half-open key ranges [begin0, end0) ∪ [begin1, end1), begin0 ≤ end0 ≤ begin1 ≤ end1. A row with
// one range has begin1 == end1 == end0; the second range is never non-empty when the first is empty.
struct KeyRanges {
  int64_t begin0 = 0, end0 = 0, begin1 = 0, end1 = 0;

  int64_t count() const { return (end0 - begin0) + (end1 - begin1); }
  bool contains(int64_t k) const { return (k >= begin0 && k < end0) || (k >= begin1 && k < end1); }
};

const char* mask_kind_name(MaskKind kind);

// Keys query q (0 ≤ q < L) may attend to:
//   full:             [0, L)
//   causal:           [0, q]
//   lambda:           [0, min(S, q+1)) ∪ [max(0, q−W+1), q+1)
//   shared_question:  Q = floor(f·L), a = (L−Q)/n; q < Q: causal; else [0, Q) ∪ [start of q's answer, q]
//                     (answer j starts at Q + j·a; the last answer runs to the end)
//   causal_blockwise: n_b = ceil(L/B), b = q/B; b = 0 or b = n_b−1: causal; else
//                     [0, B) ∪ [max(B, q − k·B), q]: the local window reaches k·B tokens back
//                     from q, as DCP's code does, rather than to the start of block b − k
KeyRanges mask_row(const MaskSpec& mask, int64_t L, int64_t q);

// Number of allowed (q, k) pairs of a sequence of L tokens: closed form for full and causal,
// O(L) otherwise.
int64_t mask_pairs(const MaskSpec& mask, int64_t L);

// Whether mask_pairs_in_tile counts a tile in closed form (full, causal) rather than row by row.
bool mask_pairs_closed_form(const MaskSpec& m);

// Allowed pairs with q in [q_begin, q_end) and k in [k_begin, k_end): a tile's work; closed form
// for full and causal, O(rows) otherwise.
int64_t mask_pairs_in_tile(const MaskSpec& mask, int64_t L, int64_t q_begin, int64_t q_end, int64_t k_begin,
                           int64_t k_end);

// For each key of [k_begin, k_end), how many query rows of [q_begin, q_end) attend to it (a
// backward kernel's work per key), added into rows[k − k_begin] (k_end − k_begin entries):
// closed form for full and causal, one pass over the rows otherwise.
void mask_rows_per_key(const MaskSpec& mask, int64_t L, int64_t q_begin, int64_t q_end, int64_t k_begin, int64_t k_end,
                       int64_t* rows);

// Reads {"kind": "lambda", "sink_tokens": 64, "window_tokens": 4096} etc.; only the kind's own
// parameters are accepted. Calls o.finish().
MaskSpec parse_mask(JsonObject& o);

// A mask given either as a name ("causal") with default parameters, or as an object.
MaskSpec parse_mask_value(const json& value, const std::string& pointer, Diagnostics& diag);

// The object parse_mask reads back to the same mask: the kind and that kind's own parameters.
json mask_json(const MaskSpec& mask);

// A mask by name with default parameters; an error lists the known names.
Expected<MaskSpec> mask_from_name(const std::string& name);

}  // namespace cpbench
