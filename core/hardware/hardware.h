// hardware.h — a GPU and the cluster it sits in (node size, NVLink, PCIe, network), loaded from
// experiments/hardware/*.json where every numeric constant carries its source.
// Requires: core/common/json_reader.h. One preset is one calibrated description shared by every
// experiment (DESIGN.md contract 1); an unsourced constant is a parse error.
// Note: bandwidths are ONE direction. Link rates in the JSON are in the unit their datasheet uses
// (GB/s for NVLink/PCIe/HBM, Gb/s for NICs); accessors convert to bytes per second.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/common/expected.h"
#include "core/common/json_reader.h"

namespace cpbench {

struct GpuSpec {
  std::string name;               // "A100-SXM4-80GB"
  double peak_dense_tflops = 0;   // dense BF16/FP16 tensor-core peak (no sparsity)
  double hbm_gib = 0;             // device memory in GiB
  double hbm_bandwidth_GBps = 0;  // HBM bandwidth, GB/s (10⁹ bytes/s)
  int sm_count = 0;
  double nvlink_bandwidth_GBps = 0;  // NVLink per GPU, ONE direction (datasheets quote both)
  double pcie_bandwidth_GBps = 0;    // host link per GPU, one direction

  double peak_flops() const { return peak_dense_tflops * 1e12; }
  double hbm_bytes() const { return hbm_gib * 1024.0 * 1024.0 * 1024.0; }
};

// Device memory the framework cannot give to tensors (core/sim/memory.h charges both).
struct MemoryOverheads {
  double reserved_gib = 0;  // CUDA context, NCCL buffers, cuBLAS workspaces: held from start-up
  // Share of the caching allocator's reserved activation pool that fragmentation leaves unusable:
  // activations (and the working set of the layer being computed) need activations / (1 − f).
  double allocator_fragmentation = 0;
};

struct ClusterSpec {
  std::string name;  // the preset's name, e.g. "a100_80gb_dgx"
  std::string description;
  GpuSpec gpu;
  int gpus_per_node = 0;
  int nics_per_node = 0;
  double nic_bandwidth_Gbps = 0;  // one NIC, one direction, Gb/s (10⁹ bits/s)
  // Network bandwidth available to one GPU, one direction: nics_per_node × nic_bandwidth_Gbps /
  // gpus_per_node (DGX A100: 8×200/8 = 200; AWS p4d: 4×100/8 = 50). Derived, never written.
  double nic_bandwidth_Gbps_per_gpu = 0;
  MemoryOverheads memory;
  // Efficiency-curve parameters of the cost model (core/cost reads them); an object, may be empty.
  nlohmann::json efficiency = nlohmann::json::object();
  // Field path ("gpu/peak_dense_tflops", "nic_bandwidth_Gbps", ...) -> its citation.
  std::map<std::string, std::string> sources;

  double network_bandwidth_GBps_per_gpu() const { return nic_bandwidth_Gbps_per_gpu / 8; }
  double network_bandwidth_GBps_per_node() const { return nics_per_node * nic_bandwidth_Gbps / 8; }
  double nvlink_bandwidth_GBps() const { return gpu.nvlink_bandwidth_GBps; }
  double pcie_bandwidth_GBps() const { return gpu.pcie_bandwidth_GBps; }
  int nodes_for(int gpus) const { return (gpus + gpus_per_node - 1) / gpus_per_node; }
};

// Reads a cluster object and calls o.finish(). Keys: "name", "description" (optional), "gpu"
// {"name", "peak_dense_tflops", "hbm_gib", "hbm_bandwidth_GBps", "sm_count",
// "nvlink_bandwidth_GBps", "pcie_bandwidth_GBps"}, "gpus_per_node", "nics_per_node",
// "nic_bandwidth_Gbps", "memory" {"reserved_gib", "allocator_fragmentation"}, "efficiency"
// (optional object). Every number is written
// {"value": x, "source": "non-empty citation"}.
ClusterSpec parse_hardware(JsonObject& o);

// Reads {"value": x, "source": "..."} at parent/key, bounds inclusive, and records the source
// under `field`. Every sourced constant of a preset (the GPU's, the network's, the cost model's
// efficiency constants) is read by this one function, so a missing citation reads the same.
double sourced_number(JsonObject& parent, const std::string& key, const std::string& field, double lo,
                      double hi, std::map<std::string, std::string>& sources);

// Loads experiments/hardware/NAME.json (or any file of that form).
Expected<ClusterSpec> load_hardware(const std::filesystem::path& file);

}  // namespace cpbench
