// mask_test.cpp — every mask row against a brute-force (q, k) predicate written from the
// definitions in references/dcp.md, pair counts against brute force and closed forms, the
// two-range property, tile counts, and parsing.
#include "core/workload/mask.h"

#include <algorithm>
#include <functional>

#include <gtest/gtest.h>

#include <random>

namespace cpbench {
namespace {

// allowed(q, k) straight from the definitions, one token pair at a time.
bool allowed(const MaskSpec& m, int64_t L, int64_t q, int64_t k) {
  switch (m.kind) {
    case MaskKind::full: return true;
    case MaskKind::causal: return k <= q;
    case MaskKind::lambda: return k <= q && (k < m.sink_tokens || k > q - m.window_tokens);
    case MaskKind::shared_question: {
      int64_t question = static_cast<int64_t>(static_cast<double>(L) * m.question_fraction);
      int64_t per = (L - question) / m.answers;
      auto answer_of = [&](int64_t t) { return per == 0 ? m.answers - 1 : std::min((t - question) / per, m.answers - 1); };
      return k <= q && (q < question || k < question || answer_of(k) == answer_of(q));
    }
    case MaskKind::causal_blockwise: {
      int64_t B = m.block_tokens, b = q / B, last = (L + B - 1) / B - 1;
      return k <= q && (b == 0 || b == last || k < B || k >= q - m.local_blocks * B);
    }
  }
  return false;
}

std::vector<MaskSpec> masks_under_test() {
  std::vector<MaskSpec> out;
  for (auto kind : {MaskKind::full, MaskKind::causal, MaskKind::lambda, MaskKind::shared_question,
                    MaskKind::causal_blockwise}) {
    MaskSpec m;
    m.kind = kind;
    out.push_back(m);  // DCP's defaults
  }
  MaskSpec small_lambda;
  small_lambda.kind = MaskKind::lambda;
  small_lambda.sink_tokens = 4;
  small_lambda.window_tokens = 16;
  out.push_back(small_lambda);
  MaskSpec three_answers;
  three_answers.kind = MaskKind::shared_question;
  three_answers.answers = 3;
  three_answers.question_fraction = 0.35;
  out.push_back(three_answers);
  MaskSpec small_blocks;
  small_blocks.kind = MaskKind::causal_blockwise;
  small_blocks.block_tokens = 16;
  out.push_back(small_blocks);
  return out;
}

const std::vector<int64_t> kLengths = {1, 2, 3, 4, 5, 7, 17, 33, 64, 100, 257, 300, 513, 777, 1100};

TEST(Mask, RowsMatchBruteForceAndHaveAtMostTwoCanonicalRanges) {
  for (const auto& m : masks_under_test()) {
    for (int64_t L : kLengths) {
      int64_t brute_pairs = 0;
      for (int64_t q = 0; q < L; ++q) {
        KeyRanges r = mask_row(m, L, q);
        // Canonical: sorted, disjoint and not touching, inside [0, L), second empty if the first is.
        ASSERT_LE(0, r.begin0);
        ASSERT_LE(r.begin0, r.end0);
        ASSERT_LE(r.end0, r.begin1);
        ASSERT_LE(r.begin1, r.end1);
        ASSERT_LE(r.end1, L);
        if (r.begin1 < r.end1) {
          ASSERT_LT(r.begin0, r.end0);
          ASSERT_LT(r.end0, r.begin1) << "touching ranges should be merged";
        }
        int64_t row = 0;
        for (int64_t k = 0; k < L; ++k) {
          bool a = allowed(m, L, q, k);
          row += a;
          ASSERT_EQ(r.contains(k), a) << mask_kind_name(m.kind) << " L=" << L << " q=" << q << " k=" << k;
        }
        ASSERT_EQ(r.count(), row);
        ASSERT_GE(row, 1) << "every row sees at least itself";
        brute_pairs += row;
      }
      EXPECT_EQ(mask_pairs(m, L), brute_pairs) << mask_kind_name(m.kind) << " L=" << L;
    }
  }
}

TEST(Mask, ClosedFormsAndAHandCountedLambda) {
  MaskSpec m;
  m.kind = MaskKind::full;
  EXPECT_EQ(mask_pairs(m, 131072), int64_t{131072} * 131072);
  m.kind = MaskKind::causal;
  EXPECT_EQ(mask_pairs(m, 131072), int64_t{131072} * 131073 / 2);
  // Lambda, S = 64, W = 4096, L = 5000: rows q ≤ 4159 see [0, q] (the window reaches the sink);
  // rows q ≥ 4160 see 64 sink keys + 4096 window keys.
  m.kind = MaskKind::lambda;
  int64_t expected = int64_t{4160} * 4161 / 2 + (5000 - 4160) * (64 + 4096);
  EXPECT_EQ(mask_pairs(m, 5000), expected);
}

TEST(Mask, SharedQuestionFollowsDcpArithmetic) {
  MaskSpec m;
  m.kind = MaskKind::shared_question;
  // L = 1003: question = int(200.6) = 200; answers of (803 // 4) = 200 tokens; the last runs to 1002.
  KeyRanges r = mask_row(m, 1003, 1002);
  EXPECT_EQ(r.begin0, 0);
  EXPECT_EQ(r.end0, 200);
  EXPECT_EQ(r.begin1, 800);
  EXPECT_EQ(r.end1, 1003);
  r = mask_row(m, 1003, 450);  // second answer: [400, 600)
  EXPECT_EQ(r.begin1, 400);
  EXPECT_EQ(r.end1, 451);
}

TEST(Mask, TilePairsSumToTheWholeAndMatchBruteForce) {
  for (const auto& m : masks_under_test()) {
    for (int64_t L : {100, 513, 1100}) {
      const int64_t tile = 64;
      int64_t sum = 0;
      for (int64_t qb = 0; qb < L; qb += tile)
        for (int64_t kb = 0; kb < L; kb += tile) {
          int64_t got = mask_pairs_in_tile(m, L, qb, qb + tile, kb, kb + tile);
          int64_t brute = 0;
          for (int64_t q = qb; q < std::min(qb + tile, L); ++q)
            for (int64_t k = kb; k < std::min(kb + tile, L); ++k) brute += allowed(m, L, q, k);
          ASSERT_EQ(got, brute) << mask_kind_name(m.kind) << " L=" << L << " tile " << qb << "," << kb;
          sum += got;
        }
      EXPECT_EQ(sum, mask_pairs(m, L));
    }
  }
}

// Tiles of any shape — unaligned, empty, reaching past the sequence — against brute force (the
// full and causal closed forms most of all).
TEST(Mask, IrregularTilePairsMatchBruteForce) {
  std::mt19937_64 rng(7);
  for (const auto& m : masks_under_test()) {
    const int64_t L = 301;
    for (int i = 0; i < 400; ++i) {
      std::uniform_int_distribution<int64_t> pos(-20, L + 20);
      int64_t qb = pos(rng), qe = pos(rng), kb = pos(rng), ke = pos(rng);
      if (qb > qe) std::swap(qb, qe);
      if (kb > ke) std::swap(kb, ke);
      int64_t brute = 0;
      for (int64_t q = std::max<int64_t>(0, qb); q < std::min(qe, L); ++q)
        for (int64_t k = std::max<int64_t>(0, kb); k < std::min(ke, L); ++k) brute += allowed(m, L, q, k);
      ASSERT_EQ(mask_pairs_in_tile(m, L, qb, qe, kb, ke), brute)
          << mask_kind_name(m.kind) << " q [" << qb << ", " << qe << ") k [" << kb << ", " << ke << ")";
    }
  }
}

// A backward kernel's work per key: every key's count of attending rows matches brute force, for
// tiles that reach past the sequence's ends too (those keys count nothing).
TEST(Mask, RowsPerKeyMatchBruteForce) {
  std::mt19937_64 rng(11);
  for (const auto& m : masks_under_test()) {
    const int64_t L = 301;
    for (int i = 0; i < 200; ++i) {
      std::uniform_int_distribution<int64_t> pos(-20, L + 20);
      int64_t qb = pos(rng), qe = pos(rng), kb = pos(rng), ke = pos(rng);
      if (qb > qe) std::swap(qb, qe);
      if (kb > ke) std::swap(kb, ke);
      std::vector<int64_t> rows(static_cast<size_t>(ke - kb), 1);  // adds to what is there
      mask_rows_per_key(m, L, qb, qe, kb, ke, rows.data());
      for (int64_t k = kb; k < ke; ++k) {
        int64_t brute = 1;
        for (int64_t q = std::max<int64_t>(0, qb); q < std::min(qe, L); ++q) brute += k >= 0 && k < L && allowed(m, L, q, k);
        ASSERT_EQ(rows[k - kb], brute) << mask_kind_name(m.kind) << " key " << k;
      }
    }
  }
}

TEST(Mask, ParsesNamesAndObjects) {
  Diagnostics diag("spec.json");
  MaskSpec m = parse_mask_value(json("causal_blockwise"), "/mask", diag);
  EXPECT_EQ(m.kind, MaskKind::causal_blockwise);
  EXPECT_EQ(m.block_tokens, 256);
  m = parse_mask_value(json::parse(R"({"kind": "lambda", "sink_tokens": 16, "window_tokens": 1024})"), "/mask", diag);
  EXPECT_EQ(m.kind, MaskKind::lambda);
  EXPECT_EQ(m.sink_tokens, 16);
  EXPECT_EQ(m.window_tokens, 1024);
  EXPECT_TRUE(diag.ok()) << diag.errors().str();
}

TEST(Mask, ErrorsNameFileAndPointer) {
  Diagnostics diag("spec.json");
  parse_mask_value(json::parse(R"({"kind": "causal", "sink_tokens": 16})"), "/workload/mask", diag);
  parse_mask_value(json::parse(R"({"kind": "lambda", "window_tokens": 0})"), "/m2", diag);
  parse_mask_value(json("sliding"), "/m3", diag);
  parse_mask_value(json(3), "/m4", diag);
  const auto& e = diag.errors().list;
  ASSERT_EQ(e.size(), 4u) << diag.errors().str();
  EXPECT_EQ(e[0].file, "spec.json");
  EXPECT_EQ(e[0].pointer, "/workload/mask/sink_tokens");
  EXPECT_NE(e[0].message.find("unknown key"), std::string::npos);
  EXPECT_EQ(e[1].pointer, "/m2/window_tokens");
  EXPECT_EQ(e[2].pointer, "/m3");
  EXPECT_NE(e[2].message.find("\"causal_blockwise\""), std::string::npos);
  EXPECT_EQ(e[3].pointer, "/m4");
  EXPECT_FALSE(mask_from_name("sliding").ok());
}

}  // namespace
}  // namespace cpbench
