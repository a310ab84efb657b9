#include "core/sim/trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/common/json_reader.h"

namespace cpbench {

namespace {

std::string quoted(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Microseconds with nanosecond resolution: durations from the cost model are >= ~1 µs, and a
// fixed format keeps ts exact to the ns for runs up to hours. Start and end are rounded to the ns
// first and the duration is their difference, so a task that starts when the previous one on its
// stream ends never overlaps it by a rounding step (Perfetto rejects slices that partially
// overlap on one track).
int64_t to_ns(double seconds) { return static_cast<int64_t>(std::llround(seconds * 1e9)); }

void append_us(std::string& out, int64_t ns) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000), static_cast<long long>(ns % 1000));
  out += buf;
}

std::string stream_name(int stream) {
  if (stream == 0) return "compute";
  if (stream == 1) return "comm";
  return "comm " + std::to_string(stream);
}

const char* category(char kind) {
  switch (kind) {
    case 'c': return "compute";
    case 'm': return "comm";
    default: return "other";
  }
}

}  // namespace

std::string chrome_trace_json(const TaskGraph& g, const SimResult& r, const std::vector<std::string>& device_names,
                              const std::vector<std::string>& stream_names, const std::vector<CounterSample>& counters) {
  std::string out;
  out.reserve(256 + g.size() * 110);
  out += "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  auto begin_event = [&]() {
    if (!first) out += ",\n";
    first = false;
  };
  std::vector<std::vector<char>> used(g.device_count(), std::vector<char>(g.stream_count(), 0));
  for (const TaskSpec& t : g.tasks()) used[t.device][t.stream] = 1;
  for (int d = 0; d < g.device_count(); ++d) {
    const std::string name = d < static_cast<int>(device_names.size()) ? device_names[d] : "device " + std::to_string(d);
    const std::string pid = std::to_string(d);
    begin_event();
    out += "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + pid + ", \"tid\": 0, \"args\": {\"name\": " +
           quoted(name) + "}}";
    begin_event();
    out += "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": " + pid +
           ", \"tid\": 0, \"args\": {\"sort_index\": " + pid + "}}";
    for (int s = 0; s < g.stream_count(); ++s) {
      if (!used[d][s]) continue;
      begin_event();
      out += "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + pid + ", \"tid\": " + std::to_string(s) +
             ", \"args\": {\"name\": " +
             quoted(s < static_cast<int>(stream_names.size()) ? stream_names[s] : stream_name(s)) + "}}";
    }
  }
  for (size_t i = 0; i < g.size(); ++i) {
    const TaskSpec& t = g.task(static_cast<int>(i));
    begin_event();
    out += "{\"name\": ";
    out += quoted(t.name);
    out += ", \"cat\": \"";
    out += category(t.kind);
    out += "\", \"ph\": \"X\", \"ts\": ";
    const int64_t start_ns = to_ns(r.start_s[i]);
    append_us(out, start_ns);
    out += ", \"dur\": ";
    append_us(out, std::max<int64_t>(0, to_ns(r.end_s[i]) - start_ns));
    out += ", \"pid\": " + std::to_string(t.device) + ", \"tid\": " + std::to_string(t.stream) +
           ", \"args\": {\"task\": " + std::to_string(i) + "}}";
  }
  for (const CounterSample& c : counters) {
    begin_event();
    out += "{\"name\": " + quoted(c.series) + ", \"ph\": \"C\", \"ts\": ";
    append_us(out, to_ns(c.time_s));
    char value[40];
    std::snprintf(value, sizeof value, "%.6g", c.value);
    out += ", \"pid\": " + std::to_string(c.device) + ", \"args\": {\"value\": " + value + "}}";
  }
  out += "\n]}\n";
  return out;
}

Status write_chrome_trace(const TaskGraph& g, const SimResult& r, const std::vector<std::string>& device_names,
                          const std::filesystem::path& path, const std::vector<std::string>& stream_names,
                          const std::vector<CounterSample>& counters) {
  if (r.start_s.size() != g.size() || r.end_s.size() != g.size())
    return Error{path.string(), "", "trace: the simulation result does not belong to this task graph (" +
                                        std::to_string(r.start_s.size()) + " timings for " +
                                        std::to_string(g.size()) + " tasks)"};
  return write_file_atomic(path, chrome_trace_json(g, r, device_names, stream_names, counters));
}

}  // namespace cpbench
