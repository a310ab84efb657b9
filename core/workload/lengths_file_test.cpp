// lengths_file_test.cpp — a user's lengths as their pipelines write them (plain, CSV with a header,
// JSON lines, a folder of them), errors that name the file and line, and a profile that replays the
// file's lengths as given or shuffled by epoch instead of resampling them.
#include "core/workload/lengths_file.h"

#include <algorithm>
#include <fstream>

#include <gtest/gtest.h>
#include <unistd.h>

#include "core/workload/batch.h"
#include "core/workload/length_profile.h"
#include "core/workload/sampling.h"

namespace cpbench {
namespace {

namespace fs = std::filesystem;

class LengthsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cpbench_lengths_file_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p;
  }
  // The one error's "file:line" and message.
  static std::string error_of(const Expected<LengthsFile>& f) { return f.ok() ? "(no error)" : f.error_str(); }
  fs::path dir_;
};

TEST_F(LengthsFileTest, PlainCsvWithHeaderAndQuotedText) {
  auto plain = read_lengths_file(write("a.txt", "# comment\n300\n\n100\n"));
  ASSERT_TRUE(plain.ok()) << plain.error_str();
  EXPECT_EQ(plain->lengths, (std::vector<int64_t>{300, 100}));
  EXPECT_EQ(plain->where(1), (dir_ / "a.txt").string() + ":4");

  // A header line names the columns; the known name "num_tokens" is taken without being asked.
  const fs::path csv = write("b.csv", "id,text,num_tokens\n1,\"hello, world\",4096\n2,\"a \"\"quote\"\"\",17\n");
  auto by_known = read_lengths_file(csv);
  ASSERT_TRUE(by_known.ok()) << by_known.error_str();
  EXPECT_EQ(by_known->lengths, (std::vector<int64_t>{4096, 17}));
  EXPECT_EQ(by_known->column, "num_tokens");
  auto by_name = read_lengths_file(csv, "id");
  ASSERT_TRUE(by_name.ok()) << by_name.error_str();
  EXPECT_EQ(by_name->lengths, (std::vector<int64_t>{1, 2}));

  auto single = read_lengths_file(write("c.csv", "seq\n5\n6\n"));  // one column: whatever its name
  ASSERT_TRUE(single.ok()) << single.error_str();
  EXPECT_EQ(single->lengths, (std::vector<int64_t>{5, 6}));
}

TEST_F(LengthsFileTest, JsonLinesAndAFolderOfThem) {
  write("corpus/b.jsonl", "{\"text\": \"x\", \"input_ids\": [1, 2, 3]}\n");
  write("corpus/a.jsonl", "{\"num_tokens\": 10}\n\n{\"num_tokens\": 20.0}\n");
  write("corpus/notes.txt", "ignored\n");
  auto folder = read_lengths_file(dir_ / "corpus");
  ASSERT_TRUE(folder.ok()) << folder.error_str();
  EXPECT_EQ(folder->lengths, (std::vector<int64_t>{10, 20, 3}));  // files by name, then lines
  EXPECT_EQ(folder->where(2), (dir_ / "corpus/b.jsonl").string() + ":1");
  auto field = read_lengths_file(write("d.jsonl", "{\"n\": 7, \"num_tokens\": 1}\n"), "n");
  ASSERT_TRUE(field.ok()) << field.error_str();
  EXPECT_EQ(field->lengths, std::vector<int64_t>{7});
}

TEST_F(LengthsFileTest, BadInputNamesTheFileLineAndWhatWasExpected) {
  const std::string empty = error_of(read_lengths_file(write("empty.csv", "# nothing\n\n")));
  EXPECT_NE(empty.find("empty.csv: holds no lengths"), std::string::npos) << empty;
  const std::string header_only = error_of(read_lengths_file(write("h.csv", "length\n")));
  EXPECT_NE(header_only.find("holds no lengths"), std::string::npos) << header_only;

  const std::string word = error_of(read_lengths_file(write("w.csv", "length\n12\nlots\n0\n")));
  EXPECT_NE(word.find("w.csv:3: expected an integer length in tokens in [1, 1073741824], got \"lots\""),
            std::string::npos) << word;
  EXPECT_NE(word.find("w.csv:4: expected an integer length"), std::string::npos) << word;

  const std::string no_column = error_of(read_lengths_file(write("n.csv", "id,text\n1,a\n")));
  EXPECT_NE(no_column.find("n.csv:1: no column of token counts in the header (\"id\", \"text\")"), std::string::npos)
      << no_column;
  const std::string wrong_column = error_of(read_lengths_file(write("m.csv", "id,len\n1,2\n"), "tokens"));
  EXPECT_NE(wrong_column.find("no column \"tokens\""), std::string::npos) << wrong_column;
  const std::string ragged = error_of(read_lengths_file(write("r.csv", "id,length\n1,2\n3\n")));
  EXPECT_NE(ragged.find("r.csv:3: expected 2 fields"), std::string::npos) << ragged;

  const std::string json = error_of(read_lengths_file(write("j.jsonl", "{\"length\": 5}\n[1]\n{\"length\": -2}\n{\"x\": 1}\n")));
  EXPECT_NE(json.find("j.jsonl:2: expected a JSON object"), std::string::npos) << json;
  EXPECT_NE(json.find("j.jsonl:3: expected \"length\" to be an integer length"), std::string::npos) << json;
  EXPECT_NE(json.find("j.jsonl:4: no token-count field"), std::string::npos) << json;

  EXPECT_NE(error_of(read_lengths_file(dir_ / "nope.csv")).find("no such lengths file"), std::string::npos);
}

// A profile over a file: its clamp defaults to the file's range, and "order" replays the file.
class ReplayTest : public LengthsFileTest {
 protected:
  LengthProfile profile(const std::string& order) {
    std::string lines;
    for (int i = 1; i <= 10; ++i) lines += std::to_string(i * 100) + "\n";
    write("ten.txt", lines);
    const fs::path f = write("p.json", R"({"kind": "empirical", "lengths_file": "ten.txt", "order": ")" + order + "\"}");
    auto j = load_json_file(f);
    Diagnostics diag(f.string());
    JsonObject o(*j, "", diag);
    LengthProfile p = parse_length_profile(o, dir_);
    EXPECT_TRUE(diag.ok()) << diag.errors().str();
    return p;
  }
};

TEST_F(ReplayTest, FileOrderReplaysAsWrittenAndWraps) {
  const LengthProfile p = profile("file");
  EXPECT_EQ(p.min_length, 100);
  EXPECT_EQ(p.max_length, 1000);
  LengthSampler s(p, 7, p.min_length, p.max_length);
  std::vector<int64_t> got;
  for (int i = 0; i < 12; ++i) got.push_back(s.next());
  EXPECT_EQ(got, (std::vector<int64_t>{100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 100, 200}));
}

TEST_F(ReplayTest, ShuffleTakesEveryLengthOncePerPassInASeededOrder) {
  const LengthProfile p = profile("shuffle");
  auto pass = [&](uint64_t seed) {
    LengthSampler s(p, seed, p.min_length, p.max_length);
    std::vector<int64_t> first, second;
    for (int i = 0; i < 10; ++i) first.push_back(s.next());
    for (int i = 0; i < 10; ++i) second.push_back(s.next());
    return std::pair{first, second};
  };
  auto [a1, a2] = pass(1);
  EXPECT_EQ(pass(1).first, a1) << "the same seed gives the same order";
  EXPECT_NE(pass(2).first, a1);
  EXPECT_NE(a1, a2) << "each pass draws a new order";
  for (auto v : {a1, a2}) {
    std::sort(v.begin(), v.end());
    EXPECT_EQ(v, (std::vector<int64_t>{100, 200, 300, 400, 500, 600, 700, 800, 900, 1000})) << "without replacement";
  }
  // Batches of a token budget take the stream as it comes: three batches hold 15 distinct
  // lengths of the file before any repeats.
  BatchRequest r;
  r.sequences = 5;
  r.min_length = p.min_length;
  r.max_length = p.max_length;
  auto batches = make_global_batches(p, r, 2);
  std::vector<int64_t> all = batches[0].lengths;
  all.insert(all.end(), batches[1].lengths.begin(), batches[1].lengths.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "no length twice in one pass";
}

}  // namespace
}  // namespace cpbench
