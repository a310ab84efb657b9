#include "core/hardware/hardware.h"

#include <cmath>

namespace cpbench {

// Reads {"value": x, "source": "..."} at parent/key, records the source under `field`.
// A bare number gets its own message: the file is not wrong by a typo but by a missing citation.
double sourced_number(JsonObject& parent, const std::string& key, const std::string& field,
                      double lo, double hi, std::map<std::string, std::string>& sources) {
  const json* v = parent.raw(key);
  if (!v) {
    parent.error(key, "missing required key \"" + key + "\"");
    return lo;
  }
  if (!v->is_object()) {
    parent.error(key, "expected {\"value\": <number>, \"source\": \"<citation>\"}, got " +
                          json_type_name(*v) + ": every hardware constant cites its source");
    return lo;
  }
  JsonObject c(*v, parent.pointer_of(key), parent.diag());
  const double value = c.number("value", lo, hi);
  const json* source = c.raw("source");
  if (!source || !source->is_string() || source->get<std::string>().empty()) {
    c.error("source", std::string(source ? "expected a non-empty string for" : "missing") +
                          " \"source\": every hardware constant cites a datasheet, a published "
                          "measurement or a calibration file");
  } else {
    sources[field] = source->get<std::string>();
  }
  c.finish();
  return value;
}

namespace {

int sourced_integer(JsonObject& parent, const std::string& key, const std::string& field, int lo,
                    int hi, std::map<std::string, std::string>& sources) {
  const double x = sourced_number(parent, key, field, lo, hi, sources);
  if (x != std::floor(x)) {
    parent.diag().error(json_pointer_append(parent.pointer_of(key), "value"),
                        "expected an integer, got " + std::to_string(x));
    return lo;
  }
  return static_cast<int>(x);
}

GpuSpec parse_gpu(JsonObject& o, std::map<std::string, std::string>& sources) {
  GpuSpec g;
  g.name = o.string("name");
  // Bounds are sanity limits, orders of magnitude beyond any current GPU.
  g.peak_dense_tflops =
      sourced_number(o, "peak_dense_tflops", "gpu/peak_dense_tflops", 1e-3, 1e5, sources);
  g.hbm_gib = sourced_number(o, "hbm_gib", "gpu/hbm_gib", 1e-3, 1e5, sources);
  g.hbm_bandwidth_GBps =
      sourced_number(o, "hbm_bandwidth_GBps", "gpu/hbm_bandwidth_GBps", 1e-3, 1e6, sources);
  g.sm_count = sourced_integer(o, "sm_count", "gpu/sm_count", 1, 100000, sources);
  g.nvlink_bandwidth_GBps =
      sourced_number(o, "nvlink_bandwidth_GBps", "gpu/nvlink_bandwidth_GBps", 1e-3, 1e6, sources);
  g.pcie_bandwidth_GBps =
      sourced_number(o, "pcie_bandwidth_GBps", "gpu/pcie_bandwidth_GBps", 1e-3, 1e6, sources);
  o.finish();
  return g;
}

}  // namespace

ClusterSpec parse_hardware(JsonObject& o) {
  ClusterSpec c;
  c.name = o.string("name");
  c.description = o.string_or("description", "");
  JsonObject gpu = o.object("gpu");
  c.gpu = parse_gpu(gpu, c.sources);
  c.gpus_per_node = sourced_integer(o, "gpus_per_node", "gpus_per_node", 1, 1024, c.sources);
  c.nics_per_node = sourced_integer(o, "nics_per_node", "nics_per_node", 1, 1024, c.sources);
  c.nic_bandwidth_Gbps =
      sourced_number(o, "nic_bandwidth_Gbps", "nic_bandwidth_Gbps", 1e-3, 1e6, c.sources);
  if (auto memory = o.object_opt("memory")) {
    c.memory.reserved_gib = sourced_number(*memory, "reserved_gib", "memory/reserved_gib", 0, 1e5, c.sources);
    c.memory.allocator_fragmentation =
        sourced_number(*memory, "allocator_fragmentation", "memory/allocator_fragmentation", 0, 0.9, c.sources);
    memory->finish();
  } else if (!o.has("memory")) {
    o.error("memory", "missing required key \"memory\" ({\"reserved_gib\", \"allocator_fragmentation\"}, each "
                      "{\"value\", \"source\"}): the device memory training cannot give to tensors");
  }
  if (const json* e = o.raw("efficiency")) {
    if (e->is_object())
      c.efficiency = *e;
    else
      o.error("efficiency", "expected an object, got " + json_type_name(*e));
  }
  o.finish();

  c.nic_bandwidth_Gbps_per_gpu = c.nics_per_node * c.nic_bandwidth_Gbps / c.gpus_per_node;
  c.sources["nic_bandwidth_Gbps_per_gpu"] =
      "derived: nics_per_node × nic_bandwidth_Gbps / gpus_per_node";
  return c;
}

Expected<ClusterSpec> load_hardware(const std::filesystem::path& file) {
  auto j = load_json_file(file);
  if (!j) return j.errors();
  Diagnostics diag(file.string());
  JsonObject o(*j, "", diag);
  ClusterSpec c = parse_hardware(o);
  if (!diag.ok()) return diag.errors();
  return c;
}

}  // namespace cpbench
