// cost_test_util.h — fixtures shared by the cost-model tests: a round-number cluster and the
// shipped presets.
// Requires: CPBENCH_SOURCE_DIR (set for every test binary by CMake). Test code only.
// Note: header-only so that no test helper ends up in cpbench_core.
#pragma once

#include <gtest/gtest.h>

#include "core/cost/cost_model.h"

namespace cpbench {

// 100 TFLOP/s, 100 SMs, 1000 GB/s HBM, NVLink 100 GB/s, 8 GPUs and 8 × 200 Gb/s NICs per node
// (25 GB/s per GPU), PCIe 32 GB/s: round numbers so expected times are exact.
inline ClusterSpec test_cluster() {
  ClusterSpec c;
  c.name = "test_cluster";
  c.gpu.name = "test_gpu";
  c.gpu.peak_dense_tflops = 100;
  c.gpu.hbm_gib = 80;
  c.gpu.hbm_bandwidth_GBps = 1000;
  c.gpu.sm_count = 100;
  c.gpu.nvlink_bandwidth_GBps = 100;
  c.gpu.pcie_bandwidth_GBps = 32;
  c.gpus_per_node = 8;
  c.nics_per_node = 8;
  c.nic_bandwidth_Gbps = 200;
  c.nic_bandwidth_Gbps_per_gpu = 200;
  return c;
}

inline CostModel preset_model(const std::string& name) {
  auto model = load_cost_model(std::filesystem::path(CPBENCH_SOURCE_DIR) / "experiments/hardware" /
                               (name + ".json"));
  EXPECT_TRUE(model.ok()) << model.error_str();
  return model.ok() ? *model : CostModel(test_cluster(), EfficiencyParams::ideal());
}

}  // namespace cpbench
