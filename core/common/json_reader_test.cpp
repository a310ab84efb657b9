// json_reader_test.cpp — strict reading: a repeated key is an error naming its JSON pointer (nested
// in objects and arrays), and an integer beyond int64 is reported as written, not wrapped.
#include "core/common/json_reader.h"

#include <fstream>

#include <gtest/gtest.h>
#include <unistd.h>

namespace cpbench {
namespace {

namespace fs = std::filesystem;

Expected<json> parse_text(const std::string& text) {
  fs::path f = fs::temp_directory_path() / ("cpbench_json_reader_test_" + std::to_string(::getpid()) + ".json");
  std::ofstream(f) << text;
  auto j = load_json_file(f);
  fs::remove(f);
  return j;
}

TEST(JsonReader, DuplicateKeyIsAnErrorWithItsPointer) {
  struct Case {
    std::string text, pointer;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"a": 1, "a": 2})", "/a"},
           {R"({"parallel": {"tp": 1, "pp": 2, "tp": 4}})", "/parallel/tp"},
           {R"({"grid": [{"x": 1}, {"y": [1, {"z": 0, "z": 1}]}]})", "/grid/1/y/1/z"},
           {R"({"a/b": {"k": [], "k": {}}})", "/a~1b/k"},
       }) {
    auto j = parse_text(c.text);
    ASSERT_FALSE(j.ok()) << c.text;
    EXPECT_EQ(j.errors().list.front().pointer, c.pointer) << c.text;
    EXPECT_NE(j.error_str().find("duplicate key"), std::string::npos) << j.error_str();
  }
  // The same key in sibling objects is no repetition.
  auto ok = parse_text(R"({"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 1}, {"k": 2}]})");
  ASSERT_TRUE(ok.ok()) << ok.error_str();
  EXPECT_EQ((*ok)["c"][1]["k"], 2);
}

TEST(JsonReader, DeepNestingIsAParseErrorNotAnAllocationFailure) {
  // A million nested arrays (it ended in std::bad_alloc) and 257 nested objects: errors naming
  // the depth; 200 levels still read.
  auto deep = parse_text(std::string(1000000, '[') + std::string(1000000, ']'));
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.error_str().find("nested deeper than 256 levels"), std::string::npos) << deep.error_str().substr(0, 300);
  std::string objects;
  for (int i = 0; i < 257; ++i) objects += "{\"a\": ";
  objects += "1" + std::string(257, '}');
  EXPECT_FALSE(parse_text(objects).ok());
  auto fine = parse_text(std::string(200, '[') + std::string(200, ']'));
  EXPECT_TRUE(fine.ok()) << fine.error_str();
}

TEST(JsonReader, IntegerBeyondInt64IsReportedAsWritten) {
  const json j = json::parse(R"({"max_length": 9223372036854775808})");
  Diagnostics d("spec.json");
  JsonObject o(j, "", d);
  o.integer_or("max_length", 0, 1, int64_t{1} << 40);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.errors().str().find("got 9223372036854775808"), std::string::npos) << d.errors().str();
}

}  // namespace
}  // namespace cpbench
