#include "core/workload/mask.h"

#include <algorithm>
#include <cmath>

namespace cpbench {

namespace {

const std::vector<std::string> kMaskNames = {"full", "causal", "lambda", "shared_question", "causal_blockwise"};

// Canonical form of [b0, e0) ∪ [b1, e1): empty ranges dropped, sorted, overlapping or touching
// ranges merged into one.
KeyRanges normalise(int64_t b0, int64_t e0, int64_t b1, int64_t e1) {
  bool has0 = b0 < e0, has1 = b1 < e1;
  if (!has0 && !has1) return {};
  if (!has0) return {b1, e1, e1, e1};
  if (!has1) return {b0, e0, e0, e0};
  if (b1 < b0) {
    std::swap(b0, b1);
    std::swap(e0, e1);
  }
  if (b1 <= e0) {
    int64_t e = std::max(e0, e1);
    return {b0, e, e, e};
  }
  return {b0, e0, b1, e1};
}

int64_t overlap(int64_t b, int64_t e, int64_t lo, int64_t hi) {
  return std::max<int64_t>(0, std::min(e, hi) - std::max(b, lo));
}

}  // namespace

const char* mask_kind_name(MaskKind kind) {
  switch (kind) {
    case MaskKind::full: return "full";
    case MaskKind::causal: return "causal";
    case MaskKind::lambda: return "lambda";
    case MaskKind::shared_question: return "shared_question";
    case MaskKind::causal_blockwise: return "causal_blockwise";
  }
  return "?";
}

KeyRanges mask_row(const MaskSpec& m, int64_t L, int64_t q) {
  switch (m.kind) {
    case MaskKind::full: return normalise(0, L, 0, 0);
    case MaskKind::causal: return normalise(0, q + 1, 0, 0);
    case MaskKind::lambda:
      // The sink (first S tokens) plus a window of W tokens ending at q (LM-Infinite's Λ shape).
      return normalise(0, std::min(m.sink_tokens, q + 1), std::max<int64_t>(0, q - m.window_tokens + 1), q + 1);
    case MaskKind::shared_question: {
      // Same arithmetic as DCP: int(L · fraction) question tokens, answers of (L − Q) // n tokens.
      int64_t question = static_cast<int64_t>(static_cast<double>(L) * m.question_fraction);
      if (q < question) return normalise(0, q + 1, 0, 0);
      int64_t per_answer = (L - question) / m.answers;
      int64_t last_start = question + (m.answers - 1) * per_answer;
      int64_t start = q < last_start ? question + (q - question) / per_answer * per_answer : last_start;
      return normalise(0, question, start, q + 1);
    }
    case MaskKind::causal_blockwise: {
      int64_t B = m.block_tokens;
      int64_t blocks = (L + B - 1) / B, b = q / B;
      if (b == 0 || b == blocks - 1) return normalise(0, q + 1, 0, 0);
      return normalise(0, B, std::max(B, q - m.local_blocks * B), q + 1);
    }
  }
  return {};
}

int64_t mask_pairs(const MaskSpec& m, int64_t L) {
  if (m.kind == MaskKind::full) return L * L;
  if (m.kind == MaskKind::causal) return L * (L + 1) / 2;
  int64_t pairs = 0;
  for (int64_t q = 0; q < L; ++q) pairs += mask_row(m, L, q).count();
  return pairs;
}

bool mask_pairs_closed_form(const MaskSpec& m) { return m.kind == MaskKind::full || m.kind == MaskKind::causal; }

int64_t mask_pairs_in_tile(const MaskSpec& m, int64_t L, int64_t q_begin, int64_t q_end, int64_t k_begin,
                           int64_t k_end) {
  // Closed forms for the two masks every layout prices most (the simulator counts the pairs of
  // every tile of every plan): a row of full sees [0, L), a causal row q sees [0, q + 1).
  const int64_t a = std::max<int64_t>(0, q_begin), b = std::min(q_end, L);
  const int64_t kb = std::max<int64_t>(0, k_begin), ke = std::min(k_end, L);
  if (m.kind == MaskKind::full) return a < b && kb < ke ? (b - a) * (ke - kb) : 0;
  if (m.kind == MaskKind::causal) {
    if (a >= b || kb >= ke) return 0;
    // Rows q in [kb, ke − 1) see q + 1 − kb keys of the tile; rows from ke − 1 on see all ke − kb.
    const int64_t lo = std::max(a, kb), hi = std::min(b, ke - 1);
    const int64_t n = std::max<int64_t>(0, hi - lo);
    const int64_t ramp = n * (lo + 1 - kb) + n * (n - 1) / 2;
    const int64_t full_rows = std::max<int64_t>(0, b - std::max(a, ke - 1));
    return ramp + full_rows * (ke - kb);
  }
  int64_t pairs = 0;
  for (int64_t q = std::max<int64_t>(0, q_begin); q < std::min(q_end, L); ++q) {
    KeyRanges r = mask_row(m, L, q);
    pairs += overlap(r.begin0, r.end0, k_begin, k_end) + overlap(r.begin1, r.end1, k_begin, k_end);
  }
  return pairs;
}

void mask_rows_per_key(const MaskSpec& m, int64_t L, int64_t q_begin, int64_t q_end, int64_t k_begin, int64_t k_end,
                       int64_t* rows) {
  const int64_t a = std::max<int64_t>(0, q_begin), b = std::min(q_end, L);
  const int64_t kb = std::max<int64_t>(0, k_begin), ke = std::min(k_end, L);
  if (a >= b || kb >= ke) return;
  if (mask_pairs_closed_form(m)) {
    // Full: every row; causal: the rows q ≥ k.
    for (int64_t k = kb; k < ke; ++k) rows[k - k_begin] += m.kind == MaskKind::full ? b - a : std::max<int64_t>(0, b - std::max(a, k));
    return;
  }
  // A difference array over the keys: each row adds 1 over its (at most two) key ranges.
  std::vector<int64_t> diff(ke - kb + 1, 0);
  auto add = [&](int64_t lo, int64_t hi) {
    lo = std::max(lo, kb);
    hi = std::min(hi, ke);
    if (lo >= hi) return;
    ++diff[lo - kb];
    --diff[hi - kb];
  };
  for (int64_t q = a; q < b; ++q) {
    const KeyRanges r = mask_row(m, L, q);
    add(r.begin0, r.end0);
    add(r.begin1, r.end1);
  }
  int64_t run = 0;
  for (int64_t k = kb; k < ke; ++k) rows[k - k_begin] += (run += diff[k - kb]);
}

MaskSpec parse_mask(JsonObject& o) {
  MaskSpec m;
  std::string kind = o.choice("kind", kMaskNames);
  if (kind == "full") m.kind = MaskKind::full;
  if (kind == "causal") m.kind = MaskKind::causal;
  if (kind == "lambda") {
    m.kind = MaskKind::lambda;
    m.sink_tokens = o.integer_or("sink_tokens", m.sink_tokens, 0, int64_t{1} << 30);
    m.window_tokens = o.integer_or("window_tokens", m.window_tokens, 1, int64_t{1} << 30);
  }
  if (kind == "shared_question") {
    m.kind = MaskKind::shared_question;
    m.question_fraction = o.number_or("question_fraction", m.question_fraction, 0, 1);
    m.answers = o.integer_or("answers", m.answers, 1, 1 << 20);
  }
  if (kind == "causal_blockwise") {
    m.kind = MaskKind::causal_blockwise;
    m.block_tokens = o.integer_or("block_tokens", m.block_tokens, 1, int64_t{1} << 30);
    m.local_blocks = o.integer_or("local_blocks", m.local_blocks, 0, 1 << 20);
  }
  o.finish();
  return m;
}

MaskSpec parse_mask_value(const json& value, const std::string& pointer, Diagnostics& diag) {
  if (value.is_string()) {
    auto m = mask_from_name(value.get<std::string>());
    if (m) return *m;
    diag.error(pointer, m.errors().list.front().message);
    return {};
  }
  if (!value.is_object()) {
    diag.error(pointer, "expected a mask name or an object, got " + json_type_name(value));
    return {};
  }
  JsonObject o(value, pointer, diag);
  return parse_mask(o);
}

json mask_json(const MaskSpec& mask) {
  json j = {{"kind", mask_kind_name(mask.kind)}};
  switch (mask.kind) {
    case MaskKind::lambda:
      j["sink_tokens"] = mask.sink_tokens;
      j["window_tokens"] = mask.window_tokens;
      break;
    case MaskKind::shared_question:
      j["question_fraction"] = mask.question_fraction;
      j["answers"] = mask.answers;
      break;
    case MaskKind::causal_blockwise:
      j["block_tokens"] = mask.block_tokens;
      j["local_blocks"] = mask.local_blocks;
      break;
    case MaskKind::full:
    case MaskKind::causal:
      break;
  }
  return j;
}

Expected<MaskSpec> mask_from_name(const std::string& name) {
  for (size_t i = 0; i < kMaskNames.size(); ++i)
    if (kMaskNames[i] == name) {
      MaskSpec m;
      m.kind = static_cast<MaskKind>(i);
      return m;
    }
  std::string known;
  for (const auto& n : kMaskNames) known += (known.empty() ? "\"" : ", \"") + n + "\"";
  return Error{"", "", "unknown mask \"" + name + "\" (expected one of " + known + ")"};
}

}  // namespace cpbench
