#include "core/workload/batch.h"

#include <algorithm>

#include "core/workload/sampling.h"

namespace cpbench {

int64_t sum_tokens(const std::vector<int64_t>& lengths) {
  int64_t s = 0;
  for (int64_t l : lengths) s += l;
  return s;
}

double sum_squares(const std::vector<int64_t>& lengths) {
  double s = 0;
  for (int64_t l : lengths) s += static_cast<double>(l) * static_cast<double>(l);
  return s;
}

int64_t GlobalBatch::total_tokens() const { return sum_tokens(lengths); }

double GlobalBatch::sum_sq() const { return sum_squares(lengths); }

int64_t GlobalBatch::max_length() const {
  return lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
}

GlobalBatch make_global_batch(const LengthProfile& profile, const BatchRequest& r) {
  return make_global_batches(profile, r, 1).front();
}

std::vector<GlobalBatch> make_global_batches(const LengthProfile& profile, const BatchRequest& r, int n) {
  std::vector<GlobalBatch> out;
  if (r.sequences > 0) {
    LengthSampler sampler(profile, r.seed, r.min_length, r.max_length, r.length_scale, r.overlong);
    for (int k = 0; k < n; ++k) {
      GlobalBatch& batch = out.emplace_back();
      batch.lengths.reserve(static_cast<size_t>(r.sequences));
      for (int64_t i = 0; i < r.sequences; ++i) batch.lengths.push_back(sampler.next());
    }
    return out;
  }
  if (r.tokens <= 0) return std::vector<GlobalBatch>(static_cast<size_t>(n));
  // A sequence longer than the whole budget could never be placed: cap it at the budget.
  int64_t max_len = std::min(r.max_length, r.tokens);
  int64_t min_len = std::min(r.min_length, max_len);
  LengthSampler sampler(profile, r.seed, min_len, max_len, r.length_scale, r.overlong);
  int64_t carry = -1;  // the sequence that overflowed the previous batch opens the next one
  for (int k = 0; k < n; ++k) {
    GlobalBatch batch, best;
    bool kept = false;
    for (int attempt = 0; attempt < 10000 && !kept; ++attempt) {
      batch.lengths.clear();
      int64_t total = 0;
      for (;;) {
        const int64_t l = carry >= 0 ? carry : sampler.next();
        carry = -1;
        if (total + l > r.tokens) {
          carry = l;
          break;
        }
        batch.lengths.push_back(l);
        total += l;
      }
      kept = static_cast<double>(total) >= r.min_fill * static_cast<double>(r.tokens);
      if (!kept && total > best.total_tokens()) best = batch;
    }
    out.push_back(kept ? batch : best);
  }
  return out;
}

}  // namespace cpbench
