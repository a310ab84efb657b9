// spec_test.cpp — spec parsing: a valid spec expands as documented; each kind of bad input is an
// error that names the file and the JSON pointer to edit.
#include "core/experiment/spec.h"

#include <fstream>

#include <gtest/gtest.h>

#include "core/experiment/registry.h"

namespace cpbench {
namespace {

namespace fs = std::filesystem;

class SpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cpbench_spec_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A small valid spec; `edit` changes it before it is written.
  fs::path write(const std::function<void(json&)>& edit = [](json&) {}) {
    json j = {
        {"description", "test"},
        {"hardware", "a100_80gb_dgx"},
        {"model", "gpt_1.7b"},
        {"workload", {{"dataset", "fixed_2048"}, {"global_batch_sequences", 64}}},
        {"parallel", {{"num_gpus", 8}, {"tp", 2}}},
        {"strategies", {"ptdp", {{"name", "ptdp"}, {"label", "tp4"}, {"set", {{"parallel.tp", 4}}}}}},
        {"cases", {{{"name", "small"}}, {{"name", "big"}, {"model", "gpt_3.6b"}, {"published", {{"params_b", 3.6}}}}}},
        {"grid", {{"parallel.micro_batch_size", {1, 2, 4}}}},
        {"metrics", {"params_b"}},
    };
    edit(j);
    fs::path f = dir_ / "spec.json";
    std::ofstream(f) << j.dump(2);
    return f;
  }

  Expected<Spec> load(const fs::path& f, std::vector<std::pair<std::string, std::string>> sets = {}) {
    return load_spec(f, "test/spec", SpecOptions{default_experiments_dir(), std::move(sets), {}});
  }

  // The single error's text; fails the test when loading succeeded.
  std::string error_of(const Expected<Spec>& s) {
    EXPECT_FALSE(s.ok());
    return s.ok() ? "" : s.error_str();
  }

  fs::path dir_;
};

TEST_F(SpecTest, ValidSpecExpandsCasesGridAndStrategies) {
  auto f = write();
  auto spec = load(f);
  ASSERT_TRUE(spec.ok()) << spec.error_str();
  ASSERT_EQ(spec->points.size(), 2u * 3u * 2u);
  const auto& p0 = spec->points[0];
  EXPECT_EQ(p0.id, "case=small/parallel.micro_batch_size=1/strategy=ptdp");
  EXPECT_EQ(p0.parallel.tp, 2);
  EXPECT_EQ(p0.parallel.micro_batch_size, 1);
  EXPECT_EQ(p0.model.hidden, 2304);
  EXPECT_EQ(spec->points[1].label, "tp4");
  EXPECT_EQ(spec->points[1].parallel.tp, 4);  // the strategy entry's set
  const auto& last = spec->points.back();
  EXPECT_EQ(last.case_name, "big");
  EXPECT_EQ(last.model.hidden, 3072);
  EXPECT_EQ(last.parallel.micro_batch_size, 4);
  EXPECT_EQ(last.params["parallel.micro_batch_size"], 4);
  // The case's published value becomes one comparison per selected point.
  ASSERT_EQ(spec->published.size(), 1u);
  EXPECT_EQ(spec->published[0].select.case_name, "big");
  // The resolved spec carries the presets it used.
  EXPECT_TRUE(spec->resolved["presets"]["models"].contains("gpt_3.6b"));
}

TEST_F(SpecTest, SetOverridesEveryPointAndIsRecorded) {
  auto spec = load(write(), {{"parallel.num_gpus", "16"}, {"workload.seed", "7"}});
  ASSERT_TRUE(spec.ok()) << spec.error_str();
  for (const auto& p : spec->points) {
    EXPECT_EQ(p.parallel.num_gpus, 16);
    EXPECT_EQ(p.workload.seed, 7u);
  }
  EXPECT_EQ(spec->resolved["overrides"]["parallel.num_gpus"], 16);
}

TEST_F(SpecTest, MisspelledTopLevelKey) {
  auto f = write([](json& j) { j["metric"] = j["metrics"]; });
  auto e = error_of(load(f));
  EXPECT_NE(e.find(f.string() + ": /metric: unknown key \"metric\""), std::string::npos) << e;
}

TEST_F(SpecTest, MisspelledKeyInsideACaseNamesTheCase) {
  auto f = write([](json& j) { j["cases"][1]["parallel"] = {{"tpp", 2}}; });
  auto e = error_of(load(f));
  EXPECT_NE(e.find(f.string() + ": /cases/1/parallel/tpp: unknown key"), std::string::npos) << e;
}

TEST_F(SpecTest, WrongType) {
  auto f = write([](json& j) { j["parallel"]["tp"] = "two"; });
  auto e = error_of(load(f));
  EXPECT_NE(e.find(f.string() + ": /parallel/tp: expected an integer"), std::string::npos) << e;
  EXPECT_NE(e.find("got a string"), std::string::npos) << e;
}

TEST_F(SpecTest, ImpossibleValue) {
  auto f = write([](json& j) { j["parallel"]["num_gpus"] = 0; });
  auto e = error_of(load(f));
  EXPECT_NE(e.find("/parallel/num_gpus: expected an integer in [1,"), std::string::npos) << e;
}

TEST_F(SpecTest, WrongTypeFromAGridValueNamesTheGridEntry) {
  auto f = write([](json& j) { j["grid"]["parallel.micro_batch_size"][2] = 2.5; });
  auto e = error_of(load(f));
  EXPECT_NE(e.find(f.string() + ": /grid/parallel.micro_batch_size/2: expected an integer"), std::string::npos) << e;
}

TEST_F(SpecTest, UnknownPreset) {
  auto f = write([](json& j) { j["hardware"] = "a100_80gb_dgxx"; });
  auto e = error_of(load(f));
  EXPECT_NE(e.find(f.string() + ": /hardware: unknown hardware preset \"a100_80gb_dgxx\" (known: "), std::string::npos) << e;
  EXPECT_NE(e.find("a100_80gb_dgx,"), std::string::npos) << e;
}

TEST_F(SpecTest, StackChosenPerCaseOrByDefault) {
  auto f = write([](json& j) { j["cases"][0]["stack"] = "mcore_te_fa3_h100"; });
  auto spec = load(f);
  ASSERT_TRUE(spec.ok()) << spec.error_str();
  EXPECT_EQ(spec->points.front().cluster.stack, "mcore_te_fa3_h100");
  EXPECT_EQ(spec->points.front().cluster.name, "a100_80gb_dgx");  // the machine stays
  EXPECT_EQ(spec->points.back().cluster.stack, "megatron_sc21_a100");  // the hardware's default
  EXPECT_EQ(spec->resolved["presets"]["stacks"].size(), 2u);
  // The resolved spec holds a stack's shared constants filled in (mcore_te_fa3_h100's GEMM
  // constants are fa2_h200's): it reads alone, as the stack loads.
  const json& used = spec->resolved["presets"]["stacks"]["mcore_te_fa3_h100"];
  auto loaded = load_stack(default_experiments_dir() / "stacks" / "mcore_te_fa3_h100.json");
  ASSERT_TRUE(loaded.ok()) << loaded.error_str();
  EXPECT_EQ(used["efficiency"], *loaded->efficiency);
  EXPECT_FALSE(used["efficiency"]["gemm_peak_fraction"].contains("from"));
  auto bad = write([](json& j) { j["cases"][0]["stack"] = "fa9"; });
  auto e = error_of(load(bad));
  EXPECT_NE(e.find(bad.string() + ": /cases/0/stack: unknown stack preset \"fa9\" (known: "), std::string::npos) << e;
  EXPECT_NE(e.find("megatron_sc21_a100"), std::string::npos) << e;
  // An inline stack missing a constant names the spec and the pointer inside it.
  auto stack = load_json_file(default_experiments_dir() / "stacks" / "megatron_sc21_a100.json");
  ASSERT_TRUE(stack.ok());
  json incomplete = *stack;
  incomplete["efficiency"].erase("pcie_latency_us");
  auto in = write([&](json& j) { j["stack"] = incomplete; });
  e = error_of(load(in));
  EXPECT_NE(e.find(in.string() + ": /stack/efficiency/pcie_latency_us: missing required key"), std::string::npos) << e;
}

TEST_F(SpecTest, InlineHardwareWithABadInlineStackNamesTheSpec) {
  // The machine and its stack both written in the spec: an out-of-range constant is reported at
  // the spec file and the pointer inside it, before any point runs (not as the cost model's
  // "hardware preset \"h100_dgx\"", which names no file).
  auto hardware = load_json_file(default_experiments_dir() / "hardware" / "h100_dgx.json");
  auto stack = load_stack_json(default_experiments_dir() / "stacks" / "mcore_te_fa3_h100.json");
  ASSERT_TRUE(hardware.ok() && stack.ok());
  (*stack)["efficiency"]["hbm_efficiency"]["value"] = -1;
  (*hardware)["default_stack"] = *stack;
  auto f = write([&](json& j) { j["hardware"] = *hardware; });
  auto e = error_of(load(f));
  EXPECT_NE(e.find(f.string() + ": /hardware/default_stack/efficiency/hbm_efficiency/value: expected a number in"),
            std::string::npos) << e;
  EXPECT_EQ(e.find("hardware preset"), std::string::npos) << e;
}

TEST_F(SpecTest, UnknownPresetInACase) {
  auto f = write([](json& j) { j["cases"][0]["model"] = "gpt_9b"; });
  auto e = error_of(load(f));
  EXPECT_NE(e.find(f.string() + ": /cases/0/model: unknown model preset \"gpt_9b\""), std::string::npos) << e;
}

TEST_F(SpecTest, InlinePresetErrorsPointInsideIt) {
  auto f = write([](json& j) {
    auto m = load_json_file(default_experiments_dir() / "models" / "gpt_1.7b.json");
    (*m)["layerz"] = 3;
    j["model"] = *m;
  });
  auto e = error_of(load(f));
  EXPECT_NE(e.find(f.string() + ": /model/layerz: unknown key"), std::string::npos) << e;
}

TEST_F(SpecTest, UnknownStrategy) {
  auto f = write([](json& j) { j["strategies"][0] = "ringg"; });
  auto e = error_of(load(f));
  EXPECT_NE(e.find("/strategies/0: unknown strategy \"ringg\" (known: ptdp"), std::string::npos) << e;
}

TEST_F(SpecTest, UnknownMetric) {
  auto f = write([](json& j) { j["metrics"] = {"tflops"}; });
  auto e = error_of(load(f));
  EXPECT_NE(e.find("/metrics: unknown metric \"tflops\""), std::string::npos) << e;
}

TEST_F(SpecTest, BadSetNamesTheCommandLine) {
  auto e = error_of(load(write(), {{"parallel.pp", "\"x\""}}));
  EXPECT_NE(e.find("command line: --set parallel.pp: expected an integer"), std::string::npos) << e;
  e = error_of(load(write(), {{"metrics", "[]"}}));
  EXPECT_NE(e.find("command line: --set metrics: \"metrics\" is not a per-point key"), std::string::npos) << e;
}

TEST_F(SpecTest, SetOnAPathTheSpecVariesIsRefused) {
  // The grid's axis, a strategy entry's set and a case's patch each vary their path over the
  // points: a --set there would run every point at one value under labels naming the others.
  auto e = error_of(load(write(), {{"parallel.micro_batch_size", "2"}}));
  EXPECT_NE(e.find("command line: --set parallel.micro_batch_size: this path varies between the spec's points: the grid "
                   "axis \"parallel.micro_batch_size\""),
            std::string::npos)
      << e;
  e = error_of(load(write(), {{"parallel.tp", "2"}}));
  EXPECT_NE(e.find("strategy entry \"tp4\""), std::string::npos) << e;
  EXPECT_NE(e.find("/strategies/1/set) sets \"parallel.tp\""), std::string::npos) << e;
  e = error_of(load(write(), {{"model", "gpt_1.7b"}}));
  EXPECT_NE(e.find("case \"big\""), std::string::npos) << e;
  // A whole object over an axis, and an axis's object, overlap too.
  e = error_of(load(write(), {{"parallel", "{\"num_gpus\": 8}"}}));
  EXPECT_NE(e.find("the grid axis \"parallel.micro_batch_size\""), std::string::npos) << e;
  // A path nothing varies is a plain override.
  auto ok = load(write(), {{"parallel.pp", "1"}, {"workload.seed", "3"}});
  EXPECT_TRUE(ok.ok()) << ok.error_str();
}

// Every registered experiment: a --set of any path its grid, cases or strategy entries set is
// refused (exit 2 in the CLI), so no run can label points with values they did not use.
TEST(SpecSets, EveryExperimentRefusesASetOfWhatItVaries) {
  size_t checked = 0;
  for (const std::string& name : list_experiments(default_experiments_dir())) {
    auto ref = resolve_experiment(name, default_experiments_dir());
    ASSERT_TRUE(ref.ok()) << ref.error_str();
    auto raw = load_json_file(ref->file);
    ASSERT_TRUE(raw.ok()) << raw.error_str();
    std::vector<std::string> varied;
    const json grid = raw->value("grid", json::object()), strategies = raw->value("strategies", json::array());
    for (const auto& [axis, values] : grid.items()) varied.push_back(axis);
    for (const json& st : strategies)
      if (st.is_object() && st.contains("set"))
        for (const auto& [path, v] : st["set"].items()) varied.push_back(path);
    for (const std::string& path : varied) {
      auto spec = load_spec(ref->file, ref->name, SpecOptions{default_experiments_dir(), {{path, "1"}}, {}});
      ASSERT_FALSE(spec.ok()) << ref->name << " --set " << path << "=1";
      EXPECT_NE(spec.error_str().find("--set " + path + ": this path varies between the spec's points"), std::string::npos)
          << ref->name << ": " << spec.error_str();
      ++checked;
    }
  }
  EXPECT_GT(checked, 50u);
}

TEST_F(SpecTest, PublishedSelectorMustMatch) {
  auto f = write([](json& j) {
    j["published"] = {{"values", {{{"metric", "params_b"}, {"value", 1.7}, {"case", "medium"}}}}};
  });
  auto e = error_of(load(f));
  EXPECT_NE(e.find("/published/values/0/case: no case is named \"medium\""), std::string::npos) << e;
}

TEST_F(SpecTest, AValueTakesTheBestPointOrTheNearestNotBoth) {
  auto f = write([](json& j) {
    j["published"] = {{"values", {{{"metric", "params_b"}, {"value", 1.7}, {"best", true}, {"nearest", true}}}}};
  });
  auto e = error_of(load(f));
  EXPECT_NE(e.find("/published/values/0/best: a value takes either the best point or the one nearest"), std::string::npos)
      << e;
  f = write([](json& j) { j["published"] = {{"values", {{{"metric", "params_b"}, {"value", 1.7}, {"best", true}}}}}; });
  EXPECT_TRUE(load(f).ok());
}

TEST_F(SpecTest, SearchSpaceIsReadAndSetPerStrategy) {
  auto f = write([](json& j) {
    j["search"] = {{"tp", {1, 2}}, {"recompute", {"none", "full"}}, {"tp_comm_overlap", {false, true}}};
    j["strategies"] = {{{"name", "ptdp_search"}, {"label", "third"}, {"set", {{"search.rank", 3}, {"search.offload_ratio", {0, 0.5}}}}}};
  });
  auto spec = load(f);
  ASSERT_TRUE(spec.ok()) << spec.error_str();
  const SearchSpace& s = spec->points.front().search;
  EXPECT_EQ(s.tp, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(s.cp, SearchSpace{}.cp);  // not given: the default axis
  EXPECT_EQ(s.recompute, (std::vector<std::string>{"none", "full"}));
  EXPECT_EQ(s.offload_ratio, (std::vector<double>{0, 0.5}));
  EXPECT_EQ(s.tp_comm_overlap, (std::vector<bool>{false, true}));
  EXPECT_TRUE(s.overlap_param_gather.empty());
  EXPECT_EQ(s.rank, 3);
}

TEST_F(SpecTest, BadSearchAxisNamesTheField) {
  auto f = write([](json& j) { j["search"] = {{"pp", {2, 0}}, {"recompute", {"some"}}, {"offload_ratio", 0.5}}; });
  auto e = error_of(load(f));
  EXPECT_NE(e.find(f.string() + ": /search/pp: expected integers in [1, 4096], got 0"), std::string::npos) << e;
  EXPECT_NE(e.find("/search/recompute: expected a non-empty array of \"none\""), std::string::npos) << e;
  EXPECT_NE(e.find("/search/offload_ratio: expected a non-empty array of numbers in [0, 1]"), std::string::npos) << e;
}

TEST_F(SpecTest, ReconfigurationPointsTakeReconfigurationStrategies) {
  auto base = [](json& j) {
    j.erase("grid");
    j.erase("cases");
    j["hardware"] = "tenplex_onprem";
    j["parallel"] = {{"num_gpus", 8}, {"tp", 4}, {"pp", 2}};
  };
  // A change of layout, read whole.
  auto f = write([&](json& j) {
    base(j);
    j["reconfigure"] = {{"num_gpus", 4}, {"tp", 4}, {"pp", 1}, {"lost", {3}}, {"target_gpus", {4, 5, 6, 7}}, {"max_seq", 1024}};
    j["strategies"] = {"tenplex", "central_store"};
  });
  auto spec = load(f);
  ASSERT_TRUE(spec.ok()) << spec.error_str();
  const ReconfigureConfig& r = spec->points.front().reconfigure;
  EXPECT_TRUE(r.present);
  EXPECT_EQ(r.num_gpus, 4);
  EXPECT_EQ(r.tp, 4);
  EXPECT_EQ(r.lost, (std::vector<int64_t>{3}));
  EXPECT_EQ(r.target_gpus, (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(r.max_seq, 1024);
  EXPECT_TRUE(spec->points.front().cluster.reconfiguration.present);
  // A reconfiguration strategy without "reconfigure", an iteration strategy with it.
  f = write([&](json& j) {
    base(j);
    j["hardware"] = "a100_80gb_dgx";
    j["strategies"] = {"tenplex"};
  });
  auto e = error_of(load(f));
  EXPECT_NE(e.find("/strategies/0: strategy \"tenplex\" prices a change of layout: the point needs a \"reconfigure\" object"), std::string::npos) << e;
  f = write([&](json& j) {
    base(j);
    j["reconfigure"] = {{"num_gpus", 16}};
    j["strategies"] = {"ptdp"};
  });
  e = error_of(load(f));
  EXPECT_NE(e.find("/strategies/0: strategy \"ptdp\" plans an iteration, but the point has \"reconfigure\""), std::string::npos) << e;
  // The reconfiguration-only stack has no iteration constants.
  f = write([&](json& j) {
    base(j);
    j["strategies"] = {"ptdp"};
  });
  e = error_of(load(f));
  EXPECT_NE(e.find("/hardware: stack tenplex_state_store prices reconfigurations only"), std::string::npos) << e;
  // What no model can plan is refused at load, where it was written.
  f = write([&](json& j) {
    base(j);
    j["parallel"]["cp"] = 2;
    j["parallel"]["num_gpus"] = 16;
    j["reconfigure"] = {{"num_gpus", 12}, {"tp", 8}, {"target_gpus", {0, 1}}, {"lost", {16}}};
    j["strategies"] = {"tenplex"};
  });
  e = error_of(load(f));
  EXPECT_NE(e.find("/parallel/cp: a reconfiguration re-shards TP, PP and DP state"), std::string::npos) << e;
  EXPECT_NE(e.find("/reconfigure/num_gpus: the layout after: tp·pp = 8 does not divide 12 GPUs"), std::string::npos) << e;
  EXPECT_NE(e.find("/reconfigure/target_gpus: expected one GPU per rank of the layout after (12), got 2"), std::string::npos) << e;
  EXPECT_NE(e.find("/reconfigure/lost/0: rank 16 is not a rank of the layout before (16 ranks)"), std::string::npos) << e;
  f = write([&](json& j) {
    base(j);
    j["hardware"] = "a100_80gb_dgx";
    j["reconfigure"] = {{"num_gpus", 16}, {"tp", 4}, {"pp", 2}};
    j["strategies"] = {"tenplex"};
  });
  e = error_of(load(f));
  EXPECT_NE(e.find("/hardware: stack megatron_sc21_a100 has no \"reconfiguration\" constants"), std::string::npos) << e;
  f = write([&](json& j) {
    base(j);
    j["reconfigure"] = {{"num_gpus", 16}, {"tp", 4}, {"pp", 2}};
    j["strategies"] = {"tenplex"};
    j["frontier"] = json::object();
  });
  e = error_of(load(f));
  EXPECT_NE(e.find("/frontier: a frontier run searches iteration layouts"), std::string::npos) << e;
  f = write([&](json& j) {
    base(j);
    j["reconfigure"] = {{"num_gpus", 16}, {"lost", {-1}}};
    j["strategies"] = {"tenplex"};
  });
  e = error_of(load(f));
  EXPECT_NE(e.find("/reconfigure/lost/0: expected a GPU or rank index"), std::string::npos) << e;
}

TEST_F(SpecTest, FrontierObjectivesAreMinimisedMetrics) {
  auto f = write([](json& j) { j["frontier"] = {{"objectives", {"step_time_s", "mfu"}}}; });
  auto e = error_of(load(f));
  EXPECT_NE(e.find("/frontier/objectives/1: expected an objective to minimise ("), std::string::npos) << e;
  EXPECT_NE(e.find("got \"mfu\""), std::string::npos) << e;
  f = write([](json& j) { j["frontier"] = json::object(); });
  auto spec = load(f);
  ASSERT_TRUE(spec.ok()) << spec.error_str();
  EXPECT_EQ(spec->frontier_objectives.size(), 4u);
}

TEST_F(SpecTest, SpeedupBaselineMustBeAStrategyLabel) {
  auto f = write([](json& j) { j["plot"] = {{"speedup_over", "tp8"}, {"x_label", "micro-batch size"}}; });
  auto e = error_of(load(f));
  EXPECT_NE(e.find("/plot/speedup_over: no strategy entry is labelled \"tp8\""), std::string::npos) << e;
  f = write([](json& j) { j["plot"] = {{"speedup_over", "tp4"}, {"x_label", "micro-batch size"}}; });
  EXPECT_TRUE(load(f).ok());
}

TEST_F(SpecTest, BatchSizeGivenTwice) {
  auto f = write([](json& j) { j["workload"]["global_batch_tokens"] = 4096; });
  auto e = error_of(load(f));
  EXPECT_NE(e.find("/workload/global_batch_sequences: give exactly one of"), std::string::npos) << e;
}

TEST_F(SpecTest, OverlongAndBatchesAreCheckedAndDropHasNoFloor) {
  auto f = write([](json& j) { j["workload"]["overlong"] = "cut"; });
  auto e = error_of(load(f));
  EXPECT_NE(e.find(f.string() + ": /workload/overlong: expected one of"), std::string::npos) << e;
  f = write([](json& j) { j["workload"]["batches"] = 0; });
  e = error_of(load(f));
  EXPECT_NE(e.find("/workload/batches: expected an integer in [1,"), std::string::npos) << e;
  f = write([](json& j) { j["workload"]["batches"] = 2; j["frontier"] = json::object(); });
  e = error_of(load(f));
  EXPECT_NE(e.find("/frontier: a frontier run plans each point once"), std::string::npos) << e;
  f = write([](json& j) {
    j["workload"] = {{"dataset", "longalign_10k"}, {"global_batch_tokens", 131072}, {"overlong", "drop"}, {"batches", 3}};
  });
  auto spec = load(f);
  ASSERT_TRUE(spec.ok()) << spec.error_str();
  const WorkloadConfig& w = spec->points[0].workload;
  EXPECT_EQ(w.min_length, 1);  // not the dataset's 8192: a scaled length may fall below it
  const auto batches = w.all_batches();
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].lengths, w.batch().lengths);
}

TEST_F(SpecTest, InvalidJsonNamesLineAndColumn) {
  fs::path f = dir_ / "broken.json";
  std::ofstream(f) << "{\n  \"description\": \"x\",\n  \"model\": ,\n}";
  auto e = error_of(load(f));
  EXPECT_NE(e.find(f.string() + ": invalid JSON at line 3"), std::string::npos) << e;
}

TEST_F(SpecTest, EveryRegisteredExperimentLoads) {
  auto names = list_experiments(default_experiments_dir());
  ASSERT_FALSE(names.empty());
  for (const auto& n : names) {
    auto ref = resolve_experiment(n, default_experiments_dir());
    ASSERT_TRUE(ref.ok()) << ref.error_str();
    auto spec = load_spec(ref->file, ref->name, SpecOptions{default_experiments_dir(), {}, {}});
    EXPECT_TRUE(spec.ok()) << n << ": " << spec.error_str();
  }
}

}  // namespace
}  // namespace cpbench
