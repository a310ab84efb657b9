// hardware.h — a GPU and the cluster it sits in (node size, NVLink, PCIe, network), loaded from
// experiments/hardware/*.json, merged with the software stack it runs (experiments/stacks/*.json:
// memory overheads, the cost model's efficiency constants, and which published values fitted them).
// Requires: core/common/json_reader.h. A hardware preset holds machine facts only, a stack preset
// the efficiencies of one software era on it; every numeric constant carries its source and one
// calibrated pair is shared by every experiment (DESIGN.md contract 1).
// Note: bandwidths are ONE direction. Link rates in the JSON are in the unit their datasheet uses
// (GB/s for NVLink/PCIe/HBM, Gb/s for NICs); accessors convert to bytes per second.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/common/citation.h"
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
  bool operator==(const GpuSpec&) const = default;
};

// How the activation pool's fragmentation is found: a flat share of the pool, or PyTorch's
// caching allocator replayed on the stage's allocations (core/sim/allocator_replay.h), with its
// default segments or expandable_segments:True.
enum class AllocatorModel { flat_share, pytorch_caching, pytorch_expandable_segments };
// The names a stack's "memory/allocator" takes, in the enum's order (flat_share is a stack
// without it, with "allocator_fragmentation" instead).
const std::vector<std::string>& allocator_model_names();

// Device memory the framework cannot give to tensors (core/sim/memory.h charges both).
struct MemoryOverheads {
  double reserved_gib = 0;  // CUDA context, NCCL buffers, cuBLAS workspaces: held from start-up
  AllocatorModel allocator = AllocatorModel::flat_share;
  // flat_share: the share of the reserved activation pool that fragmentation leaves unusable:
  // activations (and the working set of the layer being computed) need activations / (1 − f).
  double allocator_fragmentation = 0;
  bool operator==(const MemoryOverheads&) const = default;
};

// What changing a running job's parallelism costs on a software stack (Tenplex's state store,
// core/reshard/reconfigure.h): the stack's optional "reconfiguration" object. Absent (present =
// false) on stacks that never reconfigure; a reconfiguration point on such a stack is an error.
struct ReconfigurationCosts {
  bool present = false;
  double state_store_GBps = 0;  // state bytes one node's store moves per second, each direction
  double restart_s = 0;         // stopping the job's workers and starting them under the new layout
  bool operator==(const ReconfigurationCosts&) const = default;
};

// Which published values a stack's constants were fitted on (`cpbench calibrate --experiment`
// writes one): a comparison of that experiment and metric is in-sample, not a prediction.
struct FitRecord {
  std::string experiment;              // registry name, "megatron_ptdp/table1"
  std::string metric;                  // "tflops_per_gpu"
  // Constants fitted: efficiency keys (["hbm_efficiency"]) or the stack's memory overheads
  // ("memory/allocator_fragmentation", "memory/reserved_gib").
  std::vector<std::string> constants;
  std::vector<std::string> train;      // labels fitted on; empty = every published value of metric
  // Whether a published value of `experiment_name` was used by this fit: its metric is the fit's
  // or another unit of the same measurement (step time, TFLOP/s, aggregate PFLOP/s, MFU, tokens/s),
  // and, with a train list, its label (or its case's label for the fit's metric) is listed.
  bool covers(const std::string& experiment_name, const std::string& metric_name,
              const std::string& label) const;
  bool operator==(const FitRecord&) const = default;
};

// A software stack: what one software era (kernels, NCCL, framework) reaches on a machine.
// An immutable JSON value several owners share.
using SharedJson = std::shared_ptr<const nlohmann::json>;
inline SharedJson shared_json(nlohmann::json j) { return std::make_shared<const nlohmann::json>(std::move(j)); }

struct StackSpec {
  std::string name;  // the stack preset's name, e.g. "megatron_sc21_a100"; "inline" in a spec
  std::string description;
  std::string file;  // where it was read from; "" when written inline
  MemoryOverheads memory;
  ReconfigurationCosts reconfiguration;
  // Parsed by core/cost/efficiency.h. Shared and immutable, as in ClusterSpec.
  SharedJson efficiency = shared_json(nlohmann::json::object());
  std::vector<FitRecord> fits;
  Sources sources;  // "memory/reserved_gib" -> its citation
};

// The one combined object the cost model reads: a hardware preset with a stack merged in.
struct ClusterSpec {
  std::string name;  // the hardware preset's name, e.g. "a100_80gb_dgx"
  std::string description;
  std::string default_stack;  // the stack the hardware preset names ("" when written inline)
  std::string stack;          // the stack merged in (apply_stack); "" = none yet
  std::string stack_file;     // its file; "" when inline or none
  std::vector<FitRecord> fits;  // the stack's fit records
  GpuSpec gpu;
  int gpus_per_node = 0;
  int nics_per_node = 0;
  double nic_bandwidth_Gbps = 0;  // one NIC, one direction, Gb/s (10⁹ bits/s)
  // Network bandwidth available to one GPU, one direction: nics_per_node × nic_bandwidth_Gbps /
  // gpus_per_node (DGX A100: 8×200/8 = 200; AWS p4d: 4×100/8 = 50). Derived, never written.
  double nic_bandwidth_Gbps_per_gpu = 0;
  MemoryOverheads memory;  // from the stack
  ReconfigurationCosts reconfiguration;  // from the stack
  // Efficiency-curve parameters of the cost model (core/cost reads them), from the stack; an
  // object, empty until a stack is merged.
  // Shared and immutable: every point of a sweep on one stack holds the same object (~15 KB as
  // nlohmann::json; copied per point, a 40,000-point dry run held 850 MB). Replace, never edit.
  SharedJson efficiency = shared_json(nlohmann::json::object());
  // Field path ("gpu/peak_dense_tflops", "nic_bandwidth_Gbps", "memory/reserved_gib", ...) -> its
  // citation (the stack's memory sources included once merged).
  Sources sources;

  double network_bandwidth_GBps_per_gpu() const { return nic_bandwidth_Gbps_per_gpu / 8; }
  double network_bandwidth_GBps_per_node() const { return nics_per_node * nic_bandwidth_Gbps / 8; }
  double nvlink_bandwidth_GBps() const { return gpu.nvlink_bandwidth_GBps; }
  double pcie_bandwidth_GBps() const { return gpu.pcie_bandwidth_GBps; }
  int nodes_for(int gpus) const { return (gpus + gpus_per_node - 1) / gpus_per_node; }
  // Sets gpus_per_node and the NIC share it derives (nic_bandwidth_Gbps_per_gpu).
  void set_gpus_per_node(int gpus) {
    gpus_per_node = gpus;
    nic_bandwidth_Gbps_per_gpu = nics_per_node * nic_bandwidth_Gbps / gpus_per_node;
  }
  bool operator==(const ClusterSpec&) const = default;
};

// Reads a hardware object and calls o.finish(). Keys: "name", "description" (optional), "gpu"
// {"name", "peak_dense_tflops", "hbm_gib", "hbm_bandwidth_GBps", "sm_count",
// "nvlink_bandwidth_GBps", "pcie_bandwidth_GBps"}, "gpus_per_node", "nics_per_node",
// "nic_bandwidth_Gbps", and "default_stack": a stack preset's name (or a .json path relative to
// the hardware file), or a stack object written inline, which is merged at once. Every number is
// written {"value": x, "source": "non-empty citation"}.
ClusterSpec parse_hardware(JsonObject& o);

// Reads a stack object and calls o.finish(). Keys: "name" (optional inline, then "inline"),
// "description" (optional), "memory" {"reserved_gib", "allocator_fragmentation"}, "efficiency"
// (an object of sourced constants; core/cost/efficiency.h checks its keys), "fits" (optional:
// [{"experiment", "metric", "constants": [efficiency keys], "train": [labels], "values",
// "rms_log_error"}]), "reconfiguration" (optional: {"state_store_GBps", "restart_s"}, each
// sourced; constants a fit may name as "reconfiguration/KEY").
StackSpec parse_stack(JsonObject& o);

// A stack file's JSON with its shared constants filled in. Stacks that run the same library or
// the same machine share a constant rather than copy it: an entry of "memory", "efficiency" or
// "reconfiguration" written {"from": "NAME"}, with an optional "note" (why the constant carries
// over), is replaced by NAME's entry of the same key (value, source, kind), NAME.json being the
// stack preset in the same folder; the note is appended to the source as "(carried from stack
// NAME: note)". Chains are followed, key by key (two stacks may share different keys with each
// other); a cycle, an unknown or unreadable stack, a key the other stack lacks or a shared entry
// that is no {"value", "source"} is an error naming the file and entry where it is, each once.
// Every reader of a stack file reads it through here, so a resolved spec, a calibration's
// starting point and the audit see the same constants.
Expected<nlohmann::json> load_stack_json(const std::filesystem::path& file);

// Loads experiments/stacks/NAME.json (or any file of that form), through load_stack_json.
Expected<StackSpec> load_stack(const std::filesystem::path& file);

// The cluster with `stack`'s memory overheads, efficiency constants and fit records.
void apply_stack(ClusterSpec& cluster, const StackSpec& stack);

// Where a stack named by a hardware preset lives: a name is <hardware folder>/../stacks/NAME.json
// (experiments/hardware/ beside experiments/stacks/); a "….json" path is relative to the
// hardware file's folder.
std::filesystem::path stack_preset_path(const std::string& name_or_file, const std::filesystem::path& hardware_file);

// The stack as a hardware preset names it: its default stack's name, or the relative path from
// the hardware file's folder when the stack does not sit in the stacks/ folder beside it.
std::string stack_reference(const std::filesystem::path& stack_file, const std::filesystem::path& hardware_file);

// Reads {"value": x, "source": "...", "kind": "..."} at parent/key ("kind" optional, one of
// source_kinds()), bounds inclusive, and records the citation under `field`. Every sourced constant of a preset (the GPU's, the network's, the cost model's
// efficiency constants) is read by this one function, so a missing citation reads the same.
double sourced_number(JsonObject& parent, const std::string& key, const std::string& field, double lo,
                      double hi, Sources& sources);

// Loads experiments/hardware/NAME.json (or any file of that form) and merges a stack: `stack` (a
// name or file, as stack_preset_path reads it), else the preset's default stack. A stack that
// cannot be found is an error at the hardware file's /default_stack; one that does not parse names
// its own file and pointer.
Expected<ClusterSpec> load_hardware(const std::filesystem::path& file, const std::string& stack = "");

}  // namespace cpbench
