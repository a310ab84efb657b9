// trace_test.cpp — the Chrome trace as a contract: the JSON parses, carries one "X" event per
// task with ts/dur in µs, pid = device, tid = stream, and names every process and used thread.
#include "core/sim/trace.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "core/common/json_reader.h"

namespace cpbench {
namespace {

TaskGraph small_graph() {
  TaskGraph g;
  TaskSpec f;
  f.device = 0;
  f.duration_s = 1.5e-3;
  f.name = "F0.0";
  g.add(f);
  TaskSpec s;
  s.device = 0;
  s.stream = 1;
  s.duration_s = 2.5e-4;
  s.deps = {0};
  s.kind = 'm';
  s.name = "send \"F0.0\"";  // a quote: names are escaped
  g.add(s);
  TaskSpec o;
  o.device = 1;
  o.duration_s = 1e-3;
  o.deps = {1};
  o.kind = 'o';
  o.name = "optimizer";
  g.add(o);
  return g;
}

TEST(Trace, EventsCarryMicrosecondsDeviceAndStream) {
  const TaskGraph g = small_graph();
  const SimResult r = simulate(g);
  const json t = json::parse(chrome_trace_json(g, r, {"stage 0 (rank 0)"}));
  ASSERT_TRUE(t["traceEvents"].is_array());
  std::map<std::string, json> x;
  std::map<std::pair<int, int>, std::string> threads;
  std::map<int, std::string> processes;
  for (const json& e : t["traceEvents"]) {
    if (e["ph"] == "X") x[e["name"]] = e;
    if (e["ph"] == "M" && e["name"] == "thread_name") threads[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "process_name") processes[e["pid"]] = e["args"]["name"];
  }
  ASSERT_EQ(x.size(), 3u);
  const json& send = x.at("send \"F0.0\"");
  EXPECT_DOUBLE_EQ(send["ts"].get<double>(), 1500.0);  // starts when F0.0 ends, 1.5 ms
  EXPECT_DOUBLE_EQ(send["dur"].get<double>(), 250.0);
  EXPECT_EQ(send["pid"], 0);
  EXPECT_EQ(send["tid"], 1);
  EXPECT_EQ(send["cat"], "comm");
  EXPECT_EQ(send["args"]["task"], 1);
  EXPECT_EQ(x.at("optimizer")["cat"], "other");
  EXPECT_DOUBLE_EQ(x.at("optimizer")["ts"].get<double>(), 1750.0);
  EXPECT_EQ(x.at("F0.0")["cat"], "compute");
  EXPECT_EQ(processes, (std::map<int, std::string>{{0, "stage 0 (rank 0)"}, {1, "device 1"}}));
  // Device 1 uses only its compute stream: no thread is named for a stream it does not use.
  EXPECT_EQ(threads, (std::map<std::pair<int, int>, std::string>{{{0, 0}, "compute"}, {{0, 1}, "comm"}, {{1, 0}, "compute"}}));
}

TEST(Trace, WritesAtomicallyAndRejectsAForeignResult) {
  const TaskGraph g = small_graph();
  const SimResult r = simulate(g);
  const auto dir = std::filesystem::temp_directory_path() / ("cpbench_trace_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  const auto path = dir / "sub" / "trace.json";
  ASSERT_TRUE(write_chrome_trace(g, r, {"a", "b"}, path).ok());
  const auto back = load_json_file(path);
  ASSERT_TRUE(back.ok()) << back.error_str();
  EXPECT_EQ((*back)["traceEvents"].size(), 2u * 2 + 3 + 3);  // 2 process events/device, 3 threads, 3 tasks
  SimResult wrong = r;
  wrong.start_s.pop_back();
  const Status s = write_chrome_trace(g, wrong, {}, dir / "other.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error_str().find("2 timings for 3 tasks"), std::string::npos) << s.error_str();
  EXPECT_FALSE(std::filesystem::exists(dir / "other.json"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cpbench
