// commbench_mpi_test.cpp — the commbench measurement on MPI ranks (ctest runs it under mpirun -np 4):
// every op exact at several sizes, nccl-tests' bus factors, a planted wrong element counted, and
// the CSV read back by the calibrator's reader as the same measurements.
#include "core/runtime/commbench.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <gtest/gtest.h>

#include "core/cost/calibrate.h"
#include "core/runtime/mpi_test_environment.h"

namespace cpbench {
namespace {

[[maybe_unused]] auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

CommbenchOptions small_options() {
  CommbenchOptions o;
  o.min_bytes = 8;
  o.max_bytes = 64 * 1024;
  o.step_factor = 8;
  o.iters = 3;
  o.warmup = 1;
  o.seed = 42;
  return o;
}

double expected_bus_factor(const std::string& op, int n) {
  if (op == "sendrecv") return 1;
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  return double(n - 1) / n;
}

TEST(Commbench, EveryOpIsExactAtEverySizeWithNcclTestsBusFactors) {
  Communicator& world = MpiEnvironment::world();
  const int n = world.size();
  const CommbenchOptions o = small_options();
  int streamed = 0;
  auto rows = run_commbench(world, host_buffer_memory(), o, [&](const CommbenchRow&) { ++streamed; });
  ASSERT_TRUE(rows) << rows.error_str();
  EXPECT_EQ(streamed, int(rows->size()));
  std::set<std::string> ops;
  for (const CommbenchRow& r : *rows) {
    ops.insert(r.op);
    EXPECT_EQ(r.wrong, 0u) << r.op << " at " << r.bytes;
    EXPECT_GT(r.time_s, 0) << r.op;
    EXPECT_EQ(r.bytes, r.count * 4);
    EXPECT_NEAR(r.algbw_GBps, double(r.bytes) / r.time_s / 1e9, 1e-9 * r.algbw_GBps);
    EXPECT_NEAR(r.busbw_GBps / r.algbw_GBps, expected_bus_factor(r.op, n), 1e-12) << r.op;
    if (r.op != "sendrecv" && r.op != "all_reduce") EXPECT_EQ(r.count % n, 0u) << r.op;
    // Every rank got the slowest rank's time: the same row everywhere.
    double t[2] = {r.time_s, -r.time_s};
    ASSERT_TRUE(world.all_reduce(std::span<double>(t, 2), ReduceOp::kMax));
    EXPECT_EQ(t[0], -t[1]);
  }
  EXPECT_EQ(ops.size(), commbench_ops().size());
}

TEST(Commbench, SizesFollowTheFactorRoundedToWholeBlocks) {
  CommbenchOptions o = small_options();
  o.min_bytes = 4;
  o.max_bytes = 100;
  o.step_factor = 2;
  EXPECT_EQ(commbench_counts(*find_commbench_op("all_reduce"), o, 4), (std::vector<std::uint64_t>{1, 2, 4, 8, 16}));
  // Blocked ops: counts rounded down to a multiple of the ranks, those that round to nothing (and
  // repeats) left out.
  EXPECT_EQ(commbench_counts(*find_commbench_op("all_gather"), o, 4), (std::vector<std::uint64_t>{4, 8, 16}));
  EXPECT_EQ(commbench_counts(*find_commbench_op("all_to_all"), o, 3), (std::vector<std::uint64_t>{3, 6, 15}));
  o.max_bytes = std::numeric_limits<std::uint64_t>::max();  // no overflow past the last size
  EXPECT_EQ(commbench_counts(*find_commbench_op("sendrecv"), o, 1).size(), 62u);  // 2^2 … 2^63 bytes
}

// One wrong element planted in one rank's receive buffer after the checked iteration: exactly that
// row counts 1, summed over the ranks; every other row 0.
TEST(Commbench, AWrongElementInAReceiveBufferIsCounted) {
  Communicator& world = MpiEnvironment::world();
  const int n = world.size();
  CommbenchOptions o = small_options();
  const std::uint64_t planted_count = 2 * std::uint64_t(n) * 8;  // a size every op runs
  o.min_bytes = 4 * planted_count;
  o.max_bytes = 4 * 4 * planted_count;
  o.step_factor = 4;
  o.after_checked_iteration = [&](const CommbenchOp& op, void* output, std::size_t count) {
    if (world.rank() == n - 1 && std::string(op.name) == "reduce_scatter" && count == planted_count / n)
      static_cast<float*>(output)[count - 1] += 1;
  };
  auto rows = run_commbench(world, host_buffer_memory(), o);
  ASSERT_TRUE(rows) << rows.error_str();
  int planted_rows = 0;
  for (const CommbenchRow& r : *rows) {
    const bool planted = r.op == "reduce_scatter" && r.count == planted_count;
    planted_rows += planted;
    EXPECT_EQ(r.wrong, planted ? 1u : 0u) << r.op << " at " << r.bytes;
  }
  EXPECT_EQ(planted_rows, 1);
  EXPECT_NE(format_commbench_table({"mpi", n, n, 1, ""}, o, *rows).find("# Wrong elements       : 1 FAILED"),
            std::string::npos);
}

// The check on its own: exact expected values give 0; one changed value, and a NaN (an element the
// operation never wrote), 1 each.
TEST(Commbench, TheCheckCountsEveryElementThatDiffers) {
  const int n = 3, rank = 1;
  const std::size_t count = 12;
  for (const CommbenchOp& op : commbench_ops()) {
    std::vector<float> out(op.output_count(count, n));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = op.expected(7, rank, n, count, i);
    auto none = count_wrong_elements(op, host_buffer_memory(), out.data(), count, 7, rank, n);
    ASSERT_TRUE(none);
    EXPECT_EQ(*none, 0u) << op.name;
    out.front() += 0.5f;
    out.back() = std::numeric_limits<float>::quiet_NaN();
    auto two = count_wrong_elements(op, host_buffer_memory(), out.data(), count, 7, rank, n);
    ASSERT_TRUE(two);
    EXPECT_EQ(*two, 2u) << op.name;
  }
  // Inputs are small integers, so sums over ranks are exact in float32.
  for (std::size_t i = 0; i < 1000; ++i) {
    const float v = commbench_input(3, 5, i);
    EXPECT_EQ(v, std::round(v));
    EXPECT_LE(std::fabs(v), 8.0f);
  }
}

// The CSV is what `cpbench calibrate` reads: each row comes back with its op, bytes in the
// calibrator's convention, the group and its time.
TEST(Commbench, TheCsvRoundTripsThroughTheCalibratorsReader) {
  Communicator& world = MpiEnvironment::world();
  const int n = world.size();
  if (n < 2) GTEST_SKIP() << "the CSV needs 2 ranks or more";
  const CommbenchOptions o = small_options();
  auto rows = run_commbench(world, host_buffer_memory(), o);
  ASSERT_TRUE(rows) << rows.error_str();
  for (int hosts : {1, 2}) {
    const CommbenchContext context{"mpi", n, hosts == 1 ? n : n / 2, hosts, ""};
    const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                       ("commbench_" + std::to_string(::getpid()) + "_" + std::to_string(hosts) + ".csv");
    std::ofstream(file) << format_commbench_csv(context, o, *rows);
    auto read = load_measurements(file);
    std::filesystem::remove(file);
    ASSERT_TRUE(read) << read.error_str();
    ASSERT_EQ(read->size(), rows->size());
    for (std::size_t i = 0; i < rows->size(); ++i) {
      const CommbenchRow& r = (*rows)[i];
      const OpMeasurement& m = (*read)[i];
      EXPECT_NEAR(m.time_s, r.time_s, 1e-8 * r.time_s);
      EXPECT_EQ(m.shape.at("bytes"), double(r.bytes));
      if (r.op == "sendrecv") {
        EXPECT_EQ(m.op, hosts == 1 ? "p2p_nvlink" : "p2p_network");
        EXPECT_EQ(m.shape.size(), 1u);
      } else {
        EXPECT_EQ(m.op, r.op);
        EXPECT_EQ(m.shape.at("size"), double(n));
        EXPECT_EQ(m.shape.at("ranks_per_node"), double(context.ranks_per_node));
      }
    }
  }
}

}  // namespace
}  // namespace cpbench
