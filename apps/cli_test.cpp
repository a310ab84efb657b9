// cli_test.cpp — the command line as scripts use it: exit codes, nothing written on bad input,
// progress, show, determinism, and a killed run resumed without losing a finished point.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "core/common/json_reader.h"
#include "core/experiment/journal.h"
#include "core/hardware/hardware.h"

namespace cpbench {
namespace {

namespace fs = std::filesystem;

struct Run {
  int code;
  std::string out;  // stdout and stderr together
};

// A shell command's exit code and its stdout and stderr together.
Run shell(const std::string& cmd) {
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int status = pclose(f);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

Run cpbench(const std::string& args) { return shell(std::string(CPBENCH_BINARY) + " " + args); }

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cpbench_cli_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write_spec(const std::string& name, json j) {
    fs::path f = dir_ / (name + ".json");
    std::ofstream(f) << j.dump(2);
    return f;
  }

  json small_spec(int points) {
    json seqs = json::array();
    for (int i = 1; i <= points; ++i) seqs.push_back(i);
    return {{"description", "cli test"},
            {"hardware", "a100_80gb_dgx"},
            {"model", "gpt_1.7b"},
            {"workload", {{"dataset", "fixed_2048"}, {"global_batch_sequences", 8}}},
            {"parallel", {{"num_gpus", 8}}},
            {"strategies", {"ptdp"}},
            {"grid", {{"workload.global_batch_sequences", seqs}}},
            {"metrics", {"params_b", "flops_per_iteration"}}};
  }

  fs::path dir_;
};

TEST_F(CliTest, VersionHelpAndUsageErrors) {
  EXPECT_EQ(cpbench("--version").code, 0);
  auto help = cpbench("run --help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("--resume"), std::string::npos);
  EXPECT_EQ(cpbench("frobnicate").code, 2);
  EXPECT_EQ(cpbench("run").code, 2);
  EXPECT_EQ(cpbench("run x --jobs 0").code, 2);
}

// --backend cuda needs a GPU: without one (CI, or a build without CUDA) it says so in one line,
// exits 1 and writes nothing; with one (a device machine) it runs the point and writes its results.
TEST_F(CliTest, CudaBackendWithoutADeviceSaysSoInOneLineAndWritesNothing) {
  const bool gpu = cpbench("--version").out.find("GPU 0:") != std::string::npos;
  const fs::path out = dir_ / "cuda";
  const auto r = cpbench("run dcp/micro_causal --first 1 --backend cuda --out " + out.string());
  if (gpu) {
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(fs::exists(out / "dcp_micro_causal" / "results.json")) << r.out;
    return;
  }
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(r.out.find("cpbench run: --backend cuda: "), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out)) << r.out;
  // --dry-run executes nothing, so it needs no device.
  EXPECT_EQ(cpbench("run dcp/micro_causal --first 1 --backend cuda --dry-run").code, 0);
  // exec and validate the same: one line, exit 1.
  for (const char* command : {"exec", "validate"}) {
    const auto e = cpbench(std::string(command) + " --backend cuda --ranks 2 --lengths 64,64");
    EXPECT_EQ(e.code, 1) << e.out;
    EXPECT_EQ(std::count(e.out.begin(), e.out.end(), '\n'), 1) << e.out;
    EXPECT_NE(e.out.find(std::string("cpbench ") + command + ": --backend cuda: "), std::string::npos) << e.out;
  }
}

// `cpbench commbench`: bad arguments exit 2 with the flag named; on one rank (no mpirun) a small run
// prints nccl-tests' table and exits 0, and --csv is refused (one rank prices nothing); --backend
// nccl without a device (or a build without NCCL) says so in one line and exits 1, writing nothing.
TEST_F(CliTest, CommbenchRefusesBadArgumentsAndNcclWithoutADevice) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"-b 0", "--min-bytes: at least 4"}, {"-b 1M -e 1K", "--max-bytes 1024 is below --min-bytes"},
      {"-e 8G", "--max-bytes: at most 4G"}, {"-b -5", "a size has no sign"}, {"-b 1X", "--min-bytes"},
      {"--ops foo", "--ops"}, {"--ops sendrecv,sendrecv", "sendrecv is named twice"}, {"-f 1", "--step-factor"},
      {"-n 0", "--iters"}, {"-w -1", "--warmup"}, {"--backend tcp", "--backend"}};
  for (const auto& [args, message] : bad) {
    const auto r = cpbench("commbench " + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << args << "\n" << r.out;
  }
  const fs::path csv = dir_ / "commbench.csv";
  const auto one = cpbench("commbench -e 64 --csv " + csv.string());
  EXPECT_EQ(one.code, 2) << one.out;
  EXPECT_NE(one.out.find("--csv needs 2 ranks or more"), std::string::npos) << one.out;
  const auto small = cpbench("commbench -b 8 -e 256 -f 4 -n 2 -w 1");
  EXPECT_EQ(small.code, 0) << small.out;
  for (const char* text : {"# cpbench commbench: backend mpi, 1 rank(s)", "# all_reduce (in place)", "#wrong",
                           "# Wrong elements       : 0 OK", "# Avg bus bandwidth    : "})
    EXPECT_NE(small.out.find(text), std::string::npos) << text << "\n" << small.out;

  const bool gpu = cpbench("--version").out.find("GPU 0:") != std::string::npos;
  const auto nccl = cpbench("commbench --backend nccl -e 64");
  if (gpu && nccl.out.find("built without NCCL") == std::string::npos) {
    EXPECT_EQ(nccl.code, 0) << nccl.out;
    return;
  }
  EXPECT_EQ(nccl.code, 1) << nccl.out;
  EXPECT_EQ(std::count(nccl.out.begin(), nccl.out.end(), '\n'), 1) << nccl.out;
  EXPECT_EQ(nccl.out.rfind("cpbench commbench: --backend nccl: ", 0), 0u) << nccl.out;
  // Two ranks with --csv: the same refusal, and no file.
  if (shell("command -v mpirun").code != 0) return;
  const auto two = shell("mpirun --oversubscribe --allow-run-as-root -np 2 " + std::string(CPBENCH_BINARY) +
                         " commbench --backend nccl -e 64 --csv " + csv.string());
  EXPECT_NE(two.code, 0) << two.out;
  EXPECT_NE(two.out.find("cpbench commbench: --backend nccl: "), std::string::npos) << two.out;
  EXPECT_FALSE(fs::exists(csv)) << two.out;
}

// --ranks is --backend cuda's: with cpu the ranks are mpirun's, and the flag is refused.
TEST_F(CliTest, ExecRanksApplyToTheCudaBackendOnly) {
  const auto r = cpbench("exec --ranks 2 --lengths 64,64");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--ranks: applies to --backend cuda"), std::string::npos) << r.out;
  EXPECT_EQ(cpbench("exec --backend gpu --lengths 64,64").code, 2);
}

// --kernels fast is bf16 arithmetic on a GPU: with the cpu backend or fp32 values it is refused
// before anything runs; asked for rightly, without a device it is the device's one line (exit 1).
TEST_F(CliTest, FastKernelsNeedTheCudaBackendAndBf16) {
  for (const char* args : {"exec --kernels fast --dtype bf16 --lengths 64,64",
                           "validate --backend cuda --ranks 2 --kernels fast --lengths 64,64"}) {
    const auto r = cpbench(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find("--kernels fast: applies to --backend cuda with --dtype bf16"), std::string::npos) << r.out;
  }
  EXPECT_EQ(cpbench("exec --backend cuda --ranks 2 --kernels quick --dtype bf16 --lengths 64,64").code, 2);
  const auto r = cpbench("exec --backend cuda --ranks 2 --kernels fast --dtype bf16 --lengths 64,64");
  if (r.code != 0) {
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("--backend cuda"), std::string::npos) << r.out;
  }
}

TEST_F(CliTest, ListShowsRegisteredExperimentsButNotPresets) {
  auto r = cpbench("list");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("megatron_ptdp/table1"), std::string::npos);
  EXPECT_EQ(r.out.find("hardware/"), std::string::npos);
  EXPECT_EQ(r.out.find("models/"), std::string::npos);
}

// `presets` counts each preset's constants by kind; `--audit` lists them; an unknown name exits 2.
TEST_F(CliTest, PresetsAuditListsEveryConstantWithItsKind) {
  auto summary = cpbench("presets");
  EXPECT_EQ(summary.code, 0) << summary.out;
  EXPECT_NE(summary.out.find("stacks/mcore_te_fa3_h100"), std::string::npos) << summary.out;
  auto rows = cpbench("presets --audit h100_dgx");
  EXPECT_EQ(rows.code, 0) << rows.out;
  EXPECT_NE(rows.out.find("gpu/peak_dense_tflops"), std::string::npos) << rows.out;
  EXPECT_NE(rows.out.find("datasheet"), std::string::npos) << rows.out;
  EXPECT_EQ(cpbench("presets no_such_preset").code, 2);
}

TEST_F(CliTest, BadSpecExitsTwoAndWritesNothing) {
  json j = small_spec(2);
  j["parallel"]["tpp"] = 2;
  auto f = write_spec("bad", j);
  auto r = cpbench("run " + f.string() + " --out " + (dir_ / "out").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(f.string() + ": /parallel/tpp: unknown key"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "out"));
  EXPECT_EQ(cpbench("run no/such/experiment").code, 2);
  EXPECT_EQ(cpbench("run " + f.string() + " --set parallel.tp").code, 2);
}

TEST_F(CliTest, RunWritesResultsAndShowPrintsThem) {
  auto f = write_spec("ok", small_spec(3));
  auto r = cpbench("run " + f.string() + " --out " + (dir_ / "out").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[3/3]"), std::string::npos) << r.out;  // plain progress lines off a terminal
  EXPECT_TRUE(fs::exists(dir_ / "out" / "ok" / "results.json"));
  EXPECT_TRUE(fs::exists(dir_ / "out" / "ok" / "results.csv"));
  auto show = cpbench("show " + (dir_ / "out" / "ok").string());
  EXPECT_EQ(show.code, 0);
  EXPECT_NE(show.out.find("flops_per_iteration"), std::string::npos) << show.out;
  EXPECT_EQ(cpbench("show " + f.string()).code, 2);  // a spec is not a results file
}

TEST_F(CliTest, DryRunPrintsEachPointsPlanAndPredictionAndWritesNothing) {
  json spec = small_spec(3);
  spec["grid"]["workload.global_batch_sequences"] = {8, 16, 24};  // dp 8: each has a plan
  auto f = write_spec("dry", spec);
  const std::string out = " --out " + (dir_ / "out").string();
  auto r = cpbench("run " + f.string() + " --dry-run" + out);
  ASSERT_EQ(r.code, 0) << r.out;
  size_t predicted = 0;
  for (size_t at = 0; (at = r.out.find("predicted (sim): step ", at)) != std::string::npos; ++at) ++predicted;
  EXPECT_EQ(predicted, 3u) << r.out;
  EXPECT_NE(r.out.find("workload.global_batch_sequences=24/strategy=ptdp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dry: 3 points"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "out"));
  auto first = cpbench("run " + f.string() + " --dry-run --first 2" + out);
  ASSERT_EQ(first.code, 0) << first.out;
  EXPECT_NE(first.out.find("dry: 2 points"), std::string::npos) << first.out;
  // An attention micro-benchmark predicts one layer's attention, not a step (it printed "step 0 s").
  auto attention = cpbench("run dcp/micro_causal --dry-run --first 3" + out);
  ASSERT_EQ(attention.code, 0) << attention.out;
  size_t layers = 0;
  for (size_t at = 0; (at = attention.out.find("predicted (sim): attention 0.", at)) != std::string::npos; ++at) ++layers;
  EXPECT_EQ(layers, 3u) << attention.out;
  EXPECT_EQ(attention.out.find("step 0 s"), std::string::npos) << attention.out;
  // micro_causal averages 8 batches: the dry run shows the first one's plan and says so.
  EXPECT_NE(attention.out.find("batch 1 of 8 (the run reports their mean)"), std::string::npos) << attention.out;
  // Points are printed as they are expanded; a bad value in a later one still ends the run as bad
  // input, naming where it was written.
  json bad = spec;
  bad["grid"]["workload.global_batch_sequences"][2] = -5;
  auto b = cpbench("run " + write_spec("bad", bad).string() + " --dry-run" + out);
  EXPECT_EQ(b.code, 2) << b.out;
  EXPECT_NE(b.out.find("/grid/workload.global_batch_sequences/2"), std::string::npos) << b.out;
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

TEST_F(CliTest, LongPointsAreNamedWhileTheyRun) {
  // The Dynamic-CP solver on 8192 GitHub sequences takes about 2 s here (Release, 2 cores; the
  // heartbeat looks every 50 ms): with --progress-every 0.1 the run names the point with its
  // elapsed time before its progress line, and by default (10 s) it does not.
  auto spec = load_json_file(fs::path(CPBENCH_SOURCE_DIR) / "experiments" / "dynamic_cp" / "github.json");
  ASSERT_TRUE(spec.ok()) << spec.error_str();
  json j = *spec;
  j["workload"]["global_batch_sequences"] = 8192;
  j["strategies"] = json::array({{{"name", "dynamic_cp_solver"}, {"label", "Dynamic-CP (solver)"}}});
  j.erase("published");
  const std::string file = write_spec("long", j).string();
  const std::string out = " --out " + (dir_ / "out").string();
  auto r = cpbench("run " + file + " --progress-every 0.1" + out);
  ASSERT_EQ(r.code, 0) << r.out;
  const size_t still = r.out.find("long: still running strategy=Dynamic-CP (solver) (");
  ASSERT_NE(still, std::string::npos) << r.out;
  EXPECT_LT(still, r.out.find("[1/1] strategy=Dynamic-CP (solver)")) << r.out;
  auto quiet = cpbench("run " + file + out + "2");
  ASSERT_EQ(quiet.code, 0) << quiet.out;
  EXPECT_EQ(quiet.out.find("still running"), std::string::npos) << quiet.out;
}

TEST_F(CliTest, DamagedResultsFileIsBadInputForShowAndResume) {
  // Wrong types where --resume and show read: exit 2 naming the file and pointer, never an abort,
  // and --resume leaves the damaged file as it was.
  auto f = write_spec("dmg", small_spec(2));
  fs::path out = dir_ / "out", results = out / "dmg" / "results.json";
  ASSERT_EQ(cpbench("run " + f.string() + " --out " + out.string()).code, 0);
  const json good = *load_json_file(results);
  struct Damage {
    std::string pointer, expected;
    std::function<void(json&)> apply;
  };
  std::vector<Damage> damages = {
      {"/points/0/status", "expected one of", [](json& j) { j["points"][0]["status"] = nullptr; }},
      {"/points/1/id", "expected a string", [](json& j) { j["points"][1]["id"] = 3; }},
      {"/points/0", "expected an object", [](json& j) { j["points"] = {1, 2}; }},
      {"/points/0/metrics/params_b", "expected a number or null", [](json& j) { j["points"][0]["metrics"]["params_b"] = "x"; }},
      {"/comparisons", "expected an array", [](json& j) { j["comparisons"] = 5; }},
      {"/provenance/seed", "expected a non-negative integer", [](json& j) { j["provenance"]["seed"] = -1; }},
  };
  for (const Damage& d : damages) {
    json bad = good;
    d.apply(bad);
    std::ofstream(results) << bad.dump(2);
    const std::string where = results.string() + ": " + d.pointer + ": " + d.expected;
    auto show = cpbench("show " + (out / "dmg").string());
    EXPECT_EQ(show.code, 2) << d.pointer << "\n" << show.out;
    EXPECT_NE(show.out.find(where), std::string::npos) << show.out;
    auto resume = cpbench("run " + f.string() + " --out " + out.string() + " --resume");
    EXPECT_EQ(resume.code, 2) << d.pointer << "\n" << resume.out;
    EXPECT_NE(resume.out.find(where), std::string::npos) << resume.out;
    EXPECT_EQ(*load_json_file(results), bad) << "--resume rewrote a file it refused";
  }
}

TEST_F(CliTest, ExecRangeChecksNumericFlags) {
  const std::string shape = " --layout single --lengths 64 --heads 2 --kv-heads 2 --head-dim 16";
  for (const char* t : {"0", "-1", "nan", "inf", "1e300"}) {
    auto r = cpbench(std::string("exec --timeout ") + t + shape);
    EXPECT_EQ(r.code, 2) << t << "\n" << r.out;
    EXPECT_NE(r.out.find("--timeout"), std::string::npos) << r.out;
  }
  EXPECT_EQ(cpbench("exec --timeout 30" + shape).code, 0);
  for (const char* bad : {"--lengths 3000000000", "--lengths 0", "--heads 0", "--head-dim -4", "--lengths 64,-1"}) {
    auto r = cpbench(std::string("exec --layout single --heads 2 --kv-heads 2 --head-dim 16 --lengths 64 ") + bad);
    EXPECT_EQ(r.code, 2) << bad << "\n" << r.out;
  }
  // In range for the flag, too large for any machine's memory: refused before allocating.
  auto huge = cpbench("exec --layout single --lengths 2000000000,2000000000 --heads 64 --kv-heads 64 --head-dim 256");
  EXPECT_EQ(huge.code, 2) << huge.out;
  EXPECT_NE(huge.out.find("would hold about"), std::string::npos) << huge.out;
}

TEST_F(CliTest, Table1ParamsReproduced) {
  auto r = cpbench("run megatron_ptdp/table1 --out " + (dir_ / "out").string());
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = load_json_file(dir_ / "out" / "megatron_ptdp" / "table1" / "results.json");
  ASSERT_TRUE(j.ok());
  int params = 0;
  for (const auto& c : (*j)["comparisons"]) {
    if (c["metric"] != "params_b") continue;
    ++params;
    EXPECT_TRUE(c["pass"].get<bool>()) << c.dump();
    EXPECT_LE(std::fabs(c["reproduced"].get<double>() - c["published"].get<double>()), 0.1) << c.dump();
  }
  EXPECT_EQ(params, 10);
  auto show = cpbench("show " + (dir_ / "out" / "megatron_ptdp" / "table1" / "results.json").string());
  EXPECT_NE(show.out.find("published vs reproduced"), std::string::npos);
  EXPECT_NE(show.out.find("1T params_b"), std::string::npos) << show.out;
}

TEST_F(CliTest, CalibrateWritesAFittedPresetThatLoads) {
  // GEMMs "measured" 10% slower than the shipped A100 model predicts at full size: the fitted
  // preset must say where its constants came from, and run like any preset.
  fs::path csv = dir_ / "measured.csv";
  std::ofstream(csv) << "op,shape,time_s\n"
                        "gemm,m=8192;n=8192;k=8192,0.00530\n"
                        "gemm,m=16384;n=16384;k=16384,0.0418\n"
                        "gemm,m=4096;n=4096;k=4096,0.00072\n";
  fs::path out = dir_ / "fitted.json";
  auto r = cpbench("calibrate " + csv.string() + " --preset a100_80gb_dgx --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = load_json_file(out);
  ASSERT_TRUE(j.ok());
  std::string source = (*j)["efficiency"]["gemm_peak_fraction"]["source"];
  EXPECT_NE(source.find("fitted by cpbench calibrate from " + csv.string()), std::string::npos) << source;
  // What is written is the hardware's default stack, fitted and named after its file: no machine
  // facts, its memory overheads and fit records kept.
  EXPECT_EQ((*j)["name"], "fitted");
  EXPECT_FALSE(j->contains("gpu"));
  EXPECT_EQ((*j)["fits"][0]["experiment"], "megatron_ptdp/table1");
  auto stack = load_stack(out);
  ASSERT_TRUE(stack.ok()) << stack.error_str();
  // A broken measurement file names the file and line, exit 2, nothing written.
  std::ofstream(csv) << "gemm,m=8192;n=8192,0.005\n";
  fs::remove(out);
  r = cpbench("calibrate " + csv.string() + " --preset a100_80gb_dgx --out " + out.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(csv.string()), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(CliTest, CalibrateWarnsOfAConstantPinnedAtItsBound) {
  // GEMMs "measured" a thousand times slower than an A100 runs them: the fitted rate would be below
  // the 0.01 of peak the model allows, so it ends on that bound and the fit says so.
  fs::path csv = dir_ / "slow.csv", out = dir_ / "slow.json";
  std::ofstream(csv) << "op,shape,time_s\n"
                        "gemm,m=8192;n=8192;k=8192,4.8\n"
                        "gemm,m=16384;n=16384;k=16384,38\n"
                        "gemm,m=4096;n=4096;k=4096,0.6\n";
  auto r = cpbench("calibrate " + csv.string() + " --preset a100_80gb_dgx --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.out;  // the stack is written: a warning, not an error
  EXPECT_NE(r.out.find("warning: " + out.string() + ": /efficiency/gemm_peak_fraction = 0.01 is at the lower bound"),
            std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("gemm_tile_overhead_k"), std::string::npos) << r.out;  // only what is pinned
  // GEMMs 10% slower than the model's: a fraction inside its range, no warning.
  std::ofstream(csv) << "op,shape,time_s\n"
                        "gemm,m=8192;n=8192;k=8192,0.00530\n"
                        "gemm,m=16384;n=16384;k=16384,0.0418\n"
                        "gemm,m=4096;n=4096;k=4096,0.00072\n";
  r = cpbench("calibrate " + csv.string() + " --preset a100_80gb_dgx --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("warning"), std::string::npos) << r.out;
}

// `cd DIR && BINARY ARGS`, stdout and stderr together.
// CPBENCH_EXPERIMENTS (which ctest sets to the checkout's folder) is unset: these runs test where
// cpbench looks by itself.
Run cpbench_in(const fs::path& dir, const fs::path& binary, const std::string& args) {
  return shell("cd '" + dir.string() + "' && env -u CPBENCH_EXPERIMENTS '" + binary.string() + "' " + args);
}

TEST_F(CliTest, ExperimentsFolderIsFoundAtRunTimeNotBakedIn) {
  // A copy of the binary outside any checkout finds no experiments/: exit 2, naming where it looked.
  fs::create_directories(dir_ / "bin");
  fs::copy_file(CPBENCH_BINARY, dir_ / "bin" / "cpbench");
  auto lost = cpbench_in(dir_, dir_ / "bin" / "cpbench", "list");
  EXPECT_EQ(lost.code, 2) << lost.out;
  EXPECT_NE(lost.out.find((dir_ / "bin" / "experiments").string()), std::string::npos) << lost.out;
  EXPECT_NE(lost.out.find((dir_ / "experiments").string()), std::string::npos) << lost.out;
  EXPECT_NE(lost.out.find("--experiments"), std::string::npos) << lost.out;
  // Inside a project with its own experiments/, from a folder below it: that folder's specs.
  fs::create_directories(dir_ / "proj" / "experiments" / "hardware");
  fs::create_directories(dir_ / "proj" / "experiments" / "mine");
  fs::create_directories(dir_ / "proj" / "sub");
  std::ofstream(dir_ / "proj" / "experiments" / "mine" / "only.json") << small_spec(1).dump(2);
  auto own = cpbench_in(dir_ / "proj" / "sub", dir_ / "bin" / "cpbench", "list");
  EXPECT_EQ(own.code, 0) << own.out;
  EXPECT_NE(own.out.find("mine/only"), std::string::npos) << own.out;
  EXPECT_EQ(own.out.find("megatron_ptdp/table1"), std::string::npos) << own.out;
  // A binary in a checkout's build/ run from outside it: the checkout's experiments/, its parent's.
  fs::create_directories(dir_ / "checkout" / "build");
  fs::create_directories(dir_ / "checkout" / "experiments" / "hardware");
  fs::create_directories(dir_ / "checkout" / "experiments" / "theirs");
  std::ofstream(dir_ / "checkout" / "experiments" / "theirs" / "spec.json") << small_spec(1).dump(2);
  fs::copy_file(CPBENCH_BINARY, dir_ / "checkout" / "build" / "cpbench");
  auto built = cpbench_in(dir_, dir_ / "checkout" / "build" / "cpbench", "list");
  EXPECT_EQ(built.code, 0) << built.out;
  EXPECT_NE(built.out.find("theirs/spec"), std::string::npos) << built.out;
  // CPBENCH_EXPERIMENTS names the folder wherever the binary and the current directory are.
  auto named = shell("cd '" + dir_.string() + "' && CPBENCH_EXPERIMENTS='" + (dir_ / "proj" / "experiments").string() +
                     "' '" + (dir_ / "bin" / "cpbench").string() + "' list");
  EXPECT_EQ(named.code, 0) << named.out;
  EXPECT_NE(named.out.find("mine/only"), std::string::npos) << named.out;
  // show reads a results file only: it needs no experiments/ folder.
  ASSERT_EQ(cpbench("run " + write_spec("s", small_spec(1)).string() + " --out " + (dir_ / "out").string()).code, 0);
  auto show = cpbench_in(dir_, dir_ / "bin" / "cpbench", "show " + (dir_ / "out" / "s").string());
  EXPECT_EQ(show.code, 0) << show.out;
}

TEST_F(CliTest, ExecChecksAPlanAndRefusesABadBatch) {
  // One rank (no mpirun): the zigzag layout at cp = 1 still pads, runs and is checked.
  auto ok = cpbench("exec --layout zigzag --mask causal --lengths 37,100,5 --pad --backward --heads 4 --kv-heads 2 "
                    "--head-dim 16");
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_NE(ok.out.find("rank 0: compute"), std::string::npos) << ok.out;
  // Without --pad an odd length breaks zigzag's rule: a clear error, exit 2.
  auto bad = cpbench("exec --layout zigzag --mask causal --lengths 37 --heads 4 --kv-heads 2 --head-dim 16");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("zigzag"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("37"), std::string::npos) << bad.out;
}

TEST_F(CliTest, CalibrateExperimentRefusesTrainingRowsItCannotFind) {
  // Labels hold commas, so --train-match picks them by pattern; a bad pattern, one that matches
  // nothing and an unknown --train label are bad input (exit 2), and nothing is written.
  const fs::path out = dir_ / "fitted.json";
  const std::string base = "calibrate --experiment megatron_ptdp/table1 --fit hbm_efficiency --out " + out.string();
  auto bad = cpbench(base + " --train-match '('");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--train-match"), std::string::npos) << bad.out;
  auto none = cpbench(base + " --train-match 'no such label'");
  EXPECT_EQ(none.code, 2) << none.out;
  EXPECT_NE(none.out.find("matches no published value"), std::string::npos) << none.out;
  auto unknown = cpbench(base + " --train 'no such label'");
  EXPECT_EQ(unknown.code, 2) << unknown.out;
  EXPECT_NE(unknown.out.find("no published value of the fitted metrics is labelled 'no such label'"), std::string::npos)
      << unknown.out;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(CliTest, OneRunAtATimePerResultsFolder) {
  // A run holding out/spec (here the test itself) makes a second run into it exit 2, naming the
  // holder, and leaves the folder as it was; once released, the same run goes ahead.
  auto f = write_spec("spec", small_spec(2));
  const fs::path out = dir_ / "out";
  {
    auto held = RunLock::acquire(out / "spec", "the test's own run");
    ASSERT_TRUE(held.ok()) << held.error_str();
    auto second = cpbench("run " + f.string() + " --out " + out.string());
    EXPECT_EQ(second.code, 2) << second.out;
    EXPECT_NE(second.out.find("another cpbench run is writing this results folder (the test's own run)"),
              std::string::npos)
        << second.out;
    EXPECT_FALSE(fs::exists(out / "spec" / "results.json"));
    // Held in this process, a second lock on the same folder is refused too.
    EXPECT_FALSE(RunLock::acquire(out / "spec", "another").ok());
  }
  auto r = cpbench("run " + f.string() + " --out " + out.string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(out / "spec" / "results.json"));
}

TEST_F(CliTest, FlagsThatCannotApplyAreRefused) {
  // A frontier spec: --resume and --trace would be ignored; --first 0 is no count.
  json frontier = small_spec(2);
  frontier["frontier"] = {{"objectives", {"step_time_s", "num_gpus"}}};
  frontier["metrics"] = {"step_time_s"};
  auto f = write_spec("frontier", frontier);
  const std::string out = " --out " + (dir_ / "out").string();
  for (const std::string flag : {"--resume", "--trace"}) {
    auto r = cpbench("run " + f.string() + out + " " + flag);
    EXPECT_EQ(r.code, 2) << flag << ": " << r.out;
    EXPECT_NE(r.out.find("does not apply to a frontier spec"), std::string::npos) << r.out;
  }
  EXPECT_FALSE(fs::exists(dir_ / "out"));
  EXPECT_EQ(cpbench("run " + write_spec("plain", small_spec(2)).string() + out + " --first 0").code, 2);
  // exec: an empty length is no sequence; --lengths and --dataset together would ignore one.
  auto empty = cpbench("exec --lengths 64,,64");
  EXPECT_EQ(empty.code, 2) << empty.out;
  EXPECT_NE(empty.out.find("--lengths: item 2 is empty"), std::string::npos) << empty.out;
  EXPECT_EQ(cpbench("exec --lengths 64,").code, 2);
  EXPECT_EQ(cpbench("exec --lengths 64,x").code, 2);
  auto both = cpbench("exec --lengths 64 --dataset long_data_collections");
  EXPECT_EQ(both.code, 2) << both.out;
  EXPECT_NE(both.out.find("not both"), std::string::npos) << both.out;
}

TEST_F(CliTest, WritesToAFolderOrNowhereAreErrors) {
  // search --spec-out and calibrate --out name a file: a folder is refused before any work.
  auto s = cpbench("search megatron_ptdp/table1 --top 1 --spec-out " + dir_.string());
  EXPECT_EQ(s.code, 2) << s.out;
  EXPECT_NE(s.out.find("is a folder"), std::string::npos) << s.out;
  auto c = cpbench("calibrate --experiment megatron_ptdp/table1 --fit hbm_efficiency --out " + dir_.string());
  EXPECT_EQ(c.code, 2) << c.out;
  EXPECT_NE(c.out.find("--out: is a folder"), std::string::npos) << c.out;
  // A file under a regular file cannot be written: the failure names the path, and no "wrote".
  std::ofstream(dir_ / "plain") << "x";
  auto w = cpbench("search megatron_ptdp/table1 --top 1 --spec-out " + (dir_ / "plain" / "x.json").string());
  EXPECT_NE(w.code, 0) << w.out;
  EXPECT_NE(w.out.find((dir_ / "plain").string()), std::string::npos) << w.out;
  EXPECT_EQ(w.out.find("cpbench: wrote"), std::string::npos) << w.out;
}

TEST_F(CliTest, CalibrateLocalThenValidate) {
  // The machine and its stack go to their two folders; the hardware names the stack by name.
  fs::create_directories(dir_ / "hardware");
  fs::create_directories(dir_ / "stacks");
  fs::path preset = dir_ / "hardware" / "cpu_local.json", stack = dir_ / "stacks" / "cpu_local.json";
  EXPECT_EQ(cpbench("calibrate --local --out " + stack.string()).code, 2);  // --hardware-out is required
  auto cal = cpbench("calibrate --local --out " + stack.string() + " --hardware-out " + preset.string());
  ASSERT_EQ(cal.code, 0) << cal.out;
  auto j = load_json_file(preset);
  ASSERT_TRUE(j.ok()) << j.error_str();
  EXPECT_NE((*j)["gpu"]["peak_dense_tflops"]["source"].get<std::string>().find("measured by cpbench calibrate --local"),
            std::string::npos);
  EXPECT_EQ((*j)["default_stack"], "cpu_local");
  EXPECT_FALSE(j->contains("efficiency"));
  auto s = load_json_file(stack);
  ASSERT_TRUE(s.ok()) << s.error_str();
  EXPECT_FALSE(s->contains("gpu"));
  EXPECT_NE((*s)["efficiency"]["gemm_peak_fraction"]["source"].get<std::string>().find("fitted by cpbench calibrate"),
            std::string::npos);
  auto merged = load_hardware(preset);
  ASSERT_TRUE(merged.ok()) << merged.error_str();
  EXPECT_EQ(merged->stack, "cpu_local");
  EXPECT_TRUE(fs::exists(dir_ / "stacks" / "cpu_local.csv"));
  auto val = cpbench("validate --preset " + preset.string() + " --layout single --mask causal --lengths 512,300 "
                     "--heads 2 --kv-heads 2 --head-dim 32");
  ASSERT_EQ(val.code, 0) << val.out;
  EXPECT_NE(val.out.find("step time: measured"), std::string::npos) << val.out;
  EXPECT_NE(val.out.find("simulated"), std::string::npos) << val.out;
}

// The journal's point lines (the header, line 1, left out), each as written.
std::vector<json> journal_points(const fs::path& journal) {
  std::vector<json> out;
  std::ifstream in(journal);
  std::string line;
  for (bool header = true; std::getline(in, line); header = false)
    if (!header) {
      json j = json::parse(line, nullptr, false);
      if (!j.is_discarded()) out.push_back(j);
    }
  return out;
}

TEST_F(CliTest, KilledRunResumesWithoutLosingAFinishedPoint) {
  // Enough points that the run is still going when it is killed.
  auto f = write_spec("long", small_spec(1500));
  fs::path out = dir_ / "out", results = out / "long" / "results.json", journal = out / "long" / "results.journal.jsonl";
  pid_t pid = fork();
  if (pid == 0) {
    execl(CPBENCH_BINARY, CPBENCH_BINARY, "run", f.c_str(), "--out", out.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 2000 && journal_points(journal).size() < 20; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  // Finished points are appended to the journal; results.json was written once, at the start, and
  // not rewritten after every point (which made a sweep's cost grow with the square of its points).
  const std::vector<json> kept = journal_points(journal);
  ASSERT_GE(kept.size(), 20u);
  ASSERT_LT(kept.size(), 1500u) << "the run finished before it was killed; make it longer";
  auto killed = load_json_file(results);
  ASSERT_TRUE(killed.ok()) << killed.error_str();
  EXPECT_EQ((*killed)["points"].size(), 0u);

  auto resumed = cpbench("run " + f.string() + " --out " + out.string() + " --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  auto after = load_json_file(results);
  ASSERT_EQ((*after)["points"].size(), 1500u);
  // Every journalled point kept as it was, not run again (its wall-clock planner time is the same).
  for (const json& k : kept) {
    const json& p = (*after)["points"][k["index"].get<size_t>()];
    EXPECT_EQ(p["id"], k["id"]);
    EXPECT_EQ(p["metrics"], k["metrics"]);
    EXPECT_EQ(p["timings"], k["timings"]);
  }
  EXPECT_FALSE(fs::exists(journal)) << "a completed run leaves results.json and results.csv only";

  // A fresh run gives the same points: same spec and seed, same results (wall-clock timings aside).
  ASSERT_EQ(cpbench("run " + f.string() + " --out " + (dir_ / "fresh").string()).code, 0);
  auto fresh = load_json_file(dir_ / "fresh" / "long" / "results.json");
  auto without_timings = [](json points) {
    for (json& p : points) p.erase("timings");
    return points;
  };
  EXPECT_EQ(without_timings((*fresh)["points"]), without_timings((*after)["points"]));
}

TEST_F(CliTest, ResumeRejectsADamagedOrForeignJournal) {
  auto f = write_spec("s", small_spec(3));
  fs::path out = dir_ / "out", journal = out / "s" / "results.journal.jsonl";
  ASSERT_EQ(cpbench("run " + f.string() + " --out " + out.string()).code, 0);
  auto results_before = load_json_file(out / "s" / "results.json");
  // A journal line naming a point the spec does not have: file and line named, exit 2, nothing written.
  auto header = load_json_file(out / "s" / "results.json");
  std::ofstream(journal) << json{{"cpbench_journal", 1}, {"experiment", "s"}, {"spec", (*header)["spec"]}}.dump() << "\n"
                         << R"({"index": 7, "id": "x", "status": "ok", "reason": "", "metrics": {}, "timings": {}})"
                         << "\n";
  auto r = cpbench("run " + f.string() + " --out " + out.string() + " --resume");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(journal.string() + ":2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/index"), std::string::npos) << r.out;
  EXPECT_EQ(*load_json_file(out / "s" / "results.json"), *results_before);
  // Another spec's journal.
  std::ofstream(journal) << json{{"cpbench_journal", 1}, {"experiment", "s"}, {"spec", json::object()}}.dump() << "\n";
  r = cpbench("run " + f.string() + " --out " + out.string() + " --resume");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("different spec"), std::string::npos) << r.out;
  // A last line cut short by a kill is not an error: that point runs again.
  std::ofstream(journal) << json{{"cpbench_journal", 1}, {"experiment", "s"}, {"spec", (*header)["spec"]}}.dump()
                         << "\n{\"index\": 0, \"id";
  r = cpbench("run " + f.string() + " --out " + out.string() + " --resume");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ((*load_json_file(out / "s" / "results.json"))["points"].size(), 3u);
}

// Wall-clock seconds of one `cpbench ARGS` (which must succeed).
double seconds_to_run(const std::string& args) {
  const auto start = std::chrono::steady_clock::now();
  auto r = cpbench(args);
  EXPECT_EQ(r.code, 0) << r.out.substr(0, 2000);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST_F(CliTest, SweepCostIsLinearInItsPoints) {
  // Points of equal cost (one per seed): four times the points must cost about four times as
  // much. Rewriting results.json after every point made it sixteen (docs/performance.md: 500 and
  // 2000 points took 3.2 s and 58 s); 8 leaves room for a loaded machine.
  const std::string spec = std::string(CPBENCH_SOURCE_DIR) + "/apps/testdata/sweep_4000.json";
  const double t500 = seconds_to_run("run " + spec + " --first 500 --out " + (dir_ / "a").string());
  const double t2000 = seconds_to_run("run " + spec + " --first 2000 --out " + (dir_ / "b").string());
  EXPECT_LT(t2000 / t500, 8.0) << "500 points: " << t500 << " s, 2000 points: " << t2000 << " s";
}

}  // namespace
}  // namespace cpbench
