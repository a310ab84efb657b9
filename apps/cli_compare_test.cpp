// cli_compare_test.cpp — `cpbench compare` from a user's files: a lengths CSV and a Hugging Face
// config.json in, the ranked table, report, figure, spec and framework arguments out; the spec
// it writes reruns to the same results; bad input exits 2 naming the file, line or field and
// writes nothing.
#include <fstream>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace {

namespace fs = std::filesystem;

struct Run {
  int code;
  std::string out;
};

Run cpbench(const std::string& args) {
  FILE* f = popen((std::string(CPBENCH_BINARY) + " " + args + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  const int status = pclose(f);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class CompareCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cpbench_cli_compare_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // A long-tailed corpus: 200 sequences of 100 to 32,768 tokens, most short.
    std::ofstream csv(dir_ / "lengths.csv");
    csv << "doc,num_tokens\n";
    for (int i = 0; i < 200; ++i) csv << i << "," << (i % 20 == 0 ? 32768 - 97 * i : 100 + (i * 37) % 3000) << "\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string config() const { return (fs::path(CPBENCH_SOURCE_DIR) / "examples/llama3_8b/config.json").string(); }
  std::string common() const {
    return "compare --lengths " + (dir_ / "lengths.csv").string() + " --model " + config() +
           " --hardware h100_dgx --gpus 16 --global-batch-sequences 64 --quick --jobs 2";
  }
  fs::path dir_;
};

TEST_F(CompareCliTest, RanksEveryStrategyAndSaysWhatToRun) {
  const fs::path out = dir_ / "out";
  auto r = cpbench(common() + " --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* want : {"tokens/s/GPU", "Dynamic-CP dev", "Dynamic-CP main", "Dynamic-CP solver", "packing cp",
                           "DCP cp", "FSDP cp", "PTD-P searched", "speedup: over packing"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  const std::string report = slurp(out / "report.md");
  EXPECT_NE(report.find("## Ranking"), std::string::npos);
  EXPECT_NE(report.find("200 sequences"), std::string::npos) << report;
  EXPECT_NE(report.find("column `num_tokens`"), std::string::npos) << report;
  EXPECT_NE(slurp(out / "megatron_args.txt").find("--tensor-model-parallel-size"), std::string::npos);
  EXPECT_NE(slurp(out / "torchtitan.toml").find("[parallelism]"), std::string::npos);
  EXPECT_NE(slurp(out / "speedup.svg").find("<rect"), std::string::npos);
  // The spec it wrote reruns to the same numbers (results.csv has no wall-clock timings).
  auto again = cpbench("run " + (out / "compare.json").string() + " --jobs 2 --out " + (dir_ / "rerun").string());
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_EQ(slurp(dir_ / "rerun/compare/results.csv"), slurp(out / "compare/results.csv"));
}

TEST_F(CompareCliTest, BadInputExitsTwoNamingTheFileLineOrFieldAndWritesNothing) {
  const fs::path out = dir_ / "never";
  auto expect_bad = [&](const std::string& args, const std::string& text) {
    auto r = cpbench(args + " --out " + out.string());
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
    EXPECT_FALSE(fs::exists(out)) << args;
  };
  std::ofstream(dir_ / "empty.csv") << "num_tokens\n";
  std::ofstream(dir_ / "words.csv") << "num_tokens\n100\nmany\n";
  std::ofstream(dir_ / "config.json") << R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
      "num_hidden_layers": 32, "vocab_size": 128256})";
  const std::string rest = " --model " + config() + " --gpus 16 --global-batch-sequences 64";
  expect_bad("compare --lengths " + (dir_ / "empty.csv").string() + rest, "empty.csv: holds no lengths");
  expect_bad("compare --lengths " + (dir_ / "words.csv").string() + rest, "words.csv:3: expected an integer length");
  expect_bad("compare --lengths " + (dir_ / "lengths.csv").string() + " --model " + (dir_ / "config.json").string() +
                 " --gpus 16 --global-batch-sequences 64",
             "config.json: /intermediate_size: missing required key");
  expect_bad("compare --lengths " + (dir_ / "lengths.csv").string() + rest + " --max-length 8192",
             "lengths.csv:2: 32768 tokens, above --max-length 8192");
  expect_bad("compare --lengths " + (dir_ / "lengths.csv").string() + " --model " + config() + " --gpus 16",
             "give exactly one of --global-batch-sequences and --global-batch-tokens");
  expect_bad("compare --lengths " + (dir_ / "lengths.csv").string() + " --model llama_404b" + " --gpus 16 --global-batch-sequences 64",
             "--model: \"llama_404b\" is neither a config.json");
}

}  // namespace
