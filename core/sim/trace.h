// trace.h — export of a simulated timeline in the Chrome trace event format.
// Requires: a graph and the SimResult of simulate() on it.
// Note: opens in ui.perfetto.dev and chrome://tracing: one process per device (pid = device),
// one thread per stream (tid = stream, named "compute", "comm", "comm 2", ...), ts/dur in µs.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/common/expected.h"
#include "core/sim/engine.h"

namespace cpbench {

// A counter sample: `series` of device `device` takes `value` at `time_s` (a "C" event).
struct CounterSample {
  int device = 0;
  double time_s = 0;
  std::string series;  // the counter track's name, e.g. "memory GiB"
  double value = 0;
};

// The trace as JSON text: {"displayTimeUnit": "ms", "traceEvents": [...]} with a "process_name"
// and "process_sort_index" metadata event per device ("M"), a "thread_name" per used stream, and
// one complete event ("X") per task: name, cat ("compute"/"comm"/"other" from the kind), ts and
// dur in µs, args {"task": id}. device_names[d] names process d ("stage 3 (rank 24)"); devices
// past its end are named "device d". Events are in task-id order. stream_names[s] names stream s
// (default "compute", "comm", "comm 2", ...); counters become counter tracks ("ph": "C") of their
// device, after the tasks.
std::string chrome_trace_json(const TaskGraph& g, const SimResult& r, const std::vector<std::string>& device_names,
                              const std::vector<std::string>& stream_names = {},
                              const std::vector<CounterSample>& counters = {});

// Writes chrome_trace_json() to `path` atomically (write_file_atomic).
Status write_chrome_trace(const TaskGraph& g, const SimResult& r, const std::vector<std::string>& device_names,
                          const std::filesystem::path& path, const std::vector<std::string>& stream_names = {},
                          const std::vector<CounterSample>& counters = {});

}  // namespace cpbench
