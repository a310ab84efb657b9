// commbench.cpp — the operations' table, the measurement loop and its two reporters.
#include "core/runtime/commbench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace cpbench {

namespace {

// Host memory: malloc'd, copies are memcpy.
Expected<void*> host_allocate(std::size_t bytes) {
  void* p = std::malloc(std::max<std::size_t>(bytes, 1));
  if (!p) return runtime_error("commbench: cannot allocate " + std::to_string(bytes) + " bytes of host memory");
  return p;
}
void host_release(void* p) { std::free(p); }
Status host_upload(void* dst, const float* src, std::size_t count) {
  std::memcpy(dst, src, count * sizeof(float));
  return ok_status();
}
Status host_download(float* dst, const void* src, std::size_t count) {
  std::memcpy(dst, src, count * sizeof(float));
  return ok_status();
}

// splitmix64's finaliser: a well-mixed 64-bit hash of one word.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Every op's tag for its point-to-point messages (below MpiCommunicator::kProbeTag).
constexpr int kTag = 7;

double factor_one(int) { return 1; }
double factor_ring(int n) { return double(n - 1) / n; }
double factor_all_reduce(int n) { return 2.0 * (n - 1) / n; }

std::size_t same_count(std::size_t count, int) { return count; }
std::size_t block_count(std::size_t count, int n) { return count / std::size_t(n); }

// The sum over every rank's input element `i`: what a sum-reduction gives, exactly.
float rank_sum(std::uint64_t seed, int ranks, std::size_t i) {
  float sum = 0;
  for (int r = 0; r < ranks; ++r) sum += commbench_input(seed, r, i);
  return sum;
}

// sendrecv: rank r sends its buffer to r+1 and receives r−1's, both in one group (NCCL needs the
// pair in one group; on one rank the message goes to itself).
Status run_sendrecv(Communicator& c, const float* in, float* out, std::size_t count) {
  const int n = c.size(), r = c.rank();
  if (Status s = c.group_start(); !s) return s;
  auto recv = c.irecv(std::span<float>(out, count), (r - 1 + n) % n, kTag);
  auto send = c.isend(std::span<const float>(in, count), (r + 1) % n, kTag);
  if (Status s = c.group_end(); !s) return s;
  if (!recv) return recv.errors();
  if (!send) return send.errors();
  Request requests[2] = {std::move(*recv), std::move(*send)};
  return c.wait_all(requests);
}
float expect_sendrecv(std::uint64_t seed, int rank, int n, std::size_t, std::size_t i) {
  return commbench_input(seed, (rank - 1 + n) % n, i);
}

Status run_all_to_all(Communicator& c, const float* in, float* out, std::size_t count) {
  return c.all_to_all(std::span<const float>(in, count), std::span<float>(out, count));
}
// Block j of the output is block `rank` of rank j's input.
float expect_all_to_all(std::uint64_t seed, int rank, int n, std::size_t count, std::size_t i) {
  const std::size_t b = count / std::size_t(n);
  return commbench_input(seed, int(i / b), std::size_t(rank) * b + i % b);
}

Status run_all_gather(Communicator& c, const float* in, float* out, std::size_t count) {
  return c.all_gather(std::span<const float>(in, count / std::size_t(c.size())), std::span<float>(out, count));
}
float expect_all_gather(std::uint64_t seed, int, int n, std::size_t count, std::size_t i) {
  const std::size_t b = count / std::size_t(n);
  return commbench_input(seed, int(i / b), i % b);
}

Status run_reduce_scatter(Communicator& c, const float* in, float* out, std::size_t count) {
  return c.reduce_scatter(std::span<const float>(in, count), std::span<float>(out, count / std::size_t(c.size())));
}
float expect_reduce_scatter(std::uint64_t seed, int rank, int n, std::size_t count, std::size_t i) {
  return rank_sum(seed, n, std::size_t(rank) * (count / std::size_t(n)) + i);
}

Status run_all_reduce(Communicator& c, const float*, float* out, std::size_t count) {
  return c.all_reduce(std::span<float>(out, count));
}
float expect_all_reduce(std::uint64_t seed, int, int n, std::size_t, std::size_t i) { return rank_sum(seed, n, i); }

// Host-side pieces of at most this many elements carry values to and from the buffers, so the
// host holds little beyond the buffers themselves (1 GiB buffers on the device need no 1 GiB copy).
constexpr std::size_t kPieceElements = std::size_t{1} << 20;

template <class Value>
Status fill(const BufferMemory& memory, void* buffer, std::size_t count, Value value) {
  std::vector<float> piece(std::min(count, kPieceElements));
  for (std::size_t start = 0; start < count; start += piece.size()) {
    const std::size_t n = std::min(piece.size(), count - start);
    for (std::size_t k = 0; k < n; ++k) piece[k] = value(start + k);
    if (Status s = memory.upload(static_cast<float*>(buffer) + start, piece.data(), n); !s) return s;
  }
  return ok_status();
}

// A buffer of `memory`, released when it goes.
class Buffer {
 public:
  Buffer(const BufferMemory& memory, void* data) : memory_(memory), data_(data) {}
  ~Buffer() { memory_.release(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* data() const { return static_cast<float*>(data_); }

 private:
  const BufferMemory& memory_;
  void* data_;
};

Expected<std::vector<const CommbenchOp*>> selected_ops(const CommbenchOptions& options) {
  std::vector<const CommbenchOp*> out;
  if (options.ops.empty())
    for (const CommbenchOp& op : commbench_ops()) out.push_back(&op);
  for (const std::string& name : options.ops) {
    const CommbenchOp* op = find_commbench_op(name);
    if (!op) return Error{"", "", "commbench: unknown operation \"" + name + "\""};
    out.push_back(op);
  }
  return out;
}

// Elements of the input and the output buffer that hold every size of every op (at least one).
struct BufferCounts {
  std::size_t in = 1, out = 1;
};
BufferCounts buffer_counts(const std::vector<const CommbenchOp*>& ops, const CommbenchOptions& options, int ranks) {
  BufferCounts b;
  for (const CommbenchOp* op : ops)
    for (std::uint64_t count : commbench_counts(*op, options, ranks)) {
      if (!op->in_place) b.in = std::max(b.in, op->input_count(count, ranks));  // in place: `out` alone
      b.out = std::max(b.out, op->output_count(count, ranks));
    }
  return b;
}

// One op at one size on buffers `in` and `out` (in place: `out` alone): warm-up, timed iterations,
// one checked iteration; this rank's mean time and wrong count, before the reductions over ranks.
Status measure(Communicator& comm, const BufferMemory& memory, const CommbenchOp& op, std::size_t count,
               const CommbenchOptions& o, float* in, float* out, double& mean_s, std::uint64_t& wrong) {
  const int n = comm.size(), rank = comm.rank();
  if (op.in_place) in = out;
  const std::size_t in_count = op.input_count(count, n), out_count = op.output_count(count, n);
  auto input = [&](std::size_t i) { return commbench_input(o.seed, rank, i); };
  // An in-place sum iterated on the pattern grows n-fold each time (to inf at scale); zeros are
  // its fixed point. The checked iteration gets the pattern.
  Status filled = op.in_place ? fill(memory, in, in_count, [](std::size_t) { return 0.0f; })
                              : fill(memory, in, in_count, input);
  if (!filled) return filled;
  for (int i = 0; i < o.warmup; ++i)
    if (Status s = op.run(comm, in, out, count); !s) return s;
  if (Status s = comm.barrier(); !s) return s;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iters; ++i)
    if (Status s = op.run(comm, in, out, count); !s) return s;
  mean_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / o.iters;

  if (Status s = fill(memory, in, in_count, input); !s) return s;
  if (!op.in_place)
    if (Status s = fill(memory, out, out_count, [](std::size_t) { return std::numeric_limits<float>::quiet_NaN(); }); !s)
      return s;
  if (Status s = op.run(comm, in, out, count); !s) return s;
  if (o.after_checked_iteration) o.after_checked_iteration(op, out, out_count);
  auto w = count_wrong_elements(op, memory, out, count, o.seed, rank, n);
  if (!w) return w.errors();
  wrong = *w;
  return ok_status();
}

// nccl-tests' time column: two decimals below 100 µs, one below 10 ms, none above.
std::string format_us(double us) {
  char s[32];
  std::snprintf(s, sizeof s, us < 100 ? "%9.2f" : us < 10000 ? "%9.1f" : "%9.0f", us);
  return s;
}

}  // namespace

const BufferMemory& host_buffer_memory() {
  static const BufferMemory memory{"host", host_allocate, host_release, host_upload, host_download};
  return memory;
}

const std::vector<CommbenchOp>& commbench_ops() {
  static const std::vector<CommbenchOp> ops = {
      {"sendrecv", "none", false, false, factor_one, same_count, same_count, run_sendrecv, expect_sendrecv},
      {"all_to_all", "none", false, true, factor_ring, same_count, same_count, run_all_to_all, expect_all_to_all},
      {"all_gather", "none", false, true, factor_ring, block_count, same_count, run_all_gather, expect_all_gather},
      {"reduce_scatter", "sum", false, true, factor_ring, same_count, block_count, run_reduce_scatter,
       expect_reduce_scatter},
      {"all_reduce", "sum", true, false, factor_all_reduce, same_count, same_count, run_all_reduce, expect_all_reduce},
  };
  return ops;
}

const CommbenchOp* find_commbench_op(const std::string& name) {
  for (const CommbenchOp& op : commbench_ops())
    if (name == op.name) return &op;
  return nullptr;
}

float commbench_input(std::uint64_t seed, int rank, std::size_t i) {
  const std::uint64_t key = mix(seed ^ mix(std::uint64_t(rank) + 1));
  return float(int(mix(key ^ i) % 17) - 8);
}

std::vector<std::uint64_t> commbench_counts(const CommbenchOp& op, const CommbenchOptions& o, int ranks) {
  std::vector<std::uint64_t> counts;
  for (std::uint64_t bytes = o.min_bytes; bytes <= o.max_bytes;) {
    std::uint64_t count = bytes / sizeof(float);
    if (op.blocks) count -= count % std::uint64_t(ranks);
    if (count > 0 && (counts.empty() || counts.back() != count)) counts.push_back(count);
    if (o.step_factor < 2 || bytes > o.max_bytes / o.step_factor) break;
    bytes *= o.step_factor;
  }
  return counts;
}

Expected<std::uint64_t> count_wrong_elements(const CommbenchOp& op, const BufferMemory& memory, const void* output,
                                             std::size_t size_count, std::uint64_t seed, int rank, int ranks) {
  const std::size_t count = op.output_count(size_count, ranks);
  std::vector<float> piece(std::min(count, kPieceElements));
  std::uint64_t wrong = 0;
  for (std::size_t start = 0; start < count; start += piece.size()) {
    const std::size_t n = std::min(piece.size(), count - start);
    if (Status s = memory.download(piece.data(), static_cast<const float*>(output) + start, n); !s) return s.errors();
    for (std::size_t k = 0; k < n; ++k)
      if (!(piece[k] == op.expected(seed, rank, ranks, size_count, start + k))) ++wrong;  // NaN counts
  }
  return wrong;
}

std::uint64_t commbench_buffer_bytes(const CommbenchOptions& options, int ranks) {
  auto ops = selected_ops(options);
  if (!ops) return 0;
  const BufferCounts b = buffer_counts(*ops, options, ranks);
  return (b.in + b.out) * sizeof(float);
}

Expected<std::vector<CommbenchRow>> run_commbench(Communicator& comm, const BufferMemory& memory,
                                                  const CommbenchOptions& options, const CommbenchRowSink& on_row) {
  auto ops = selected_ops(options);
  if (!ops) return ops.errors();
  if (options.iters < 1 || options.warmup < 0) return Error{"", "", "commbench: iters must be at least 1, warmup at least 0"};
  const int n = comm.size();
  // Both buffers allocated once, for the largest size of every op, as nccl-tests does.
  const BufferCounts counts = buffer_counts(*ops, options, n);
  auto in_data = memory.allocate(counts.in * sizeof(float));
  if (!in_data) return in_data.errors();
  const Buffer in(memory, *in_data);
  auto out_data = memory.allocate(counts.out * sizeof(float));
  if (!out_data) return out_data.errors();
  const Buffer out(memory, *out_data);

  std::vector<CommbenchRow> rows;
  for (const CommbenchOp* op : *ops)
    for (std::uint64_t count : commbench_counts(*op, options, n)) {
      double time_s = 0, wrong = 0;
      std::uint64_t my_wrong = 0;
      if (Status s = measure(comm, memory, *op, count, options, in.data(), out.data(), time_s, my_wrong); !s)
        return s.errors();
      wrong = double(my_wrong);
      if (Status s = comm.all_reduce(std::span<double>(&time_s, 1), ReduceOp::kMax); !s) return s.errors();
      if (Status s = comm.all_reduce(std::span<double>(&wrong, 1), ReduceOp::kSum); !s) return s.errors();
      CommbenchRow row;
      row.op = op->name;
      row.count = count;
      row.bytes = count * sizeof(float);
      row.redop = op->redop;
      row.time_s = time_s;
      row.algbw_GBps = time_s > 0 ? double(row.bytes) / time_s / 1e9 : 0;
      row.busbw_GBps = row.algbw_GBps * op->bus_factor(n);
      row.wrong = std::uint64_t(wrong);
      rows.push_back(row);
      if (on_row) on_row(row);
    }
  return rows;
}

std::string format_commbench_header(const CommbenchContext& c, const CommbenchOptions& o) {
  char line[512];
  std::snprintf(line, sizeof line, "# cpbench commbench: backend %s, %d rank(s), %d rank(s) per node, %d host(s)\n",
                c.backend.c_str(), c.ranks, c.ranks_per_node, c.hosts);
  std::string t = line;
  std::snprintf(line, sizeof line,
                "# minBytes %llu maxBytes %llu step: %llu(factor) warmup iters: %d iters: %d seed: %llu validation: 1\n",
                (unsigned long long)o.min_bytes, (unsigned long long)o.max_bytes, (unsigned long long)o.step_factor,
                o.warmup, o.iters, (unsigned long long)o.seed);
  t += line;
  t += "# time: each rank's mean per timed iteration, the slowest rank's; algbw = size / time; busbw = algbw x\n"
       "# 2(n-1)/n (all_reduce), (n-1)/n (all_to_all, all_gather, reduce_scatter), 1 (sendrecv: r to r+1)\n";
  if (!c.devices.empty()) t += "#\n# Using devices\n" + c.devices;
  return t;
}

std::string format_commbench_row(const CommbenchRow& r, const CommbenchRow* previous) {
  std::string t;
  if (!previous || previous->op != r.op) {
    t += "#\n# " + r.op + (r.op == "all_reduce" ? " (in place)\n" : "\n");
    t += "#       size         count      type   redop      time   algbw   busbw  #wrong\n"
         "#        (B)    (elements)                        (us)  (GB/s)  (GB/s)\n";
  }
  char line[256];
  std::snprintf(line, sizeof line, "%12llu  %12llu  %8s  %6s %s %7.2f %7.2f %7llu\n", (unsigned long long)r.bytes,
                (unsigned long long)r.count, "float", r.redop.c_str(), format_us(r.time_s * 1e6).c_str(), r.algbw_GBps,
                r.busbw_GBps, (unsigned long long)r.wrong);
  return t + line;
}

std::string format_commbench_footer(const std::vector<CommbenchRow>& rows) {
  double busbw_sum = 0;
  std::uint64_t wrong = 0;
  for (const CommbenchRow& r : rows) {
    busbw_sum += r.busbw_GBps;
    wrong += r.wrong;
  }
  char text[256];
  std::snprintf(text, sizeof text, "#\n# Wrong elements       : %llu %s\n# Avg bus bandwidth    : %g\n#\n",
                (unsigned long long)wrong, wrong == 0 ? "OK" : "FAILED",
                rows.empty() ? 0.0 : busbw_sum / double(rows.size()));
  return text;
}

std::string format_commbench_table(const CommbenchContext& c, const CommbenchOptions& o,
                                   const std::vector<CommbenchRow>& rows) {
  std::string t = format_commbench_header(c, o);
  for (std::size_t i = 0; i < rows.size(); ++i) t += format_commbench_row(rows[i], i ? &rows[i - 1] : nullptr);
  return t + format_commbench_footer(rows);
}

std::string format_commbench_csv(const CommbenchContext& c, const CommbenchOptions& o,
                                 const std::vector<CommbenchRow>& rows) {
  const char* p2p = c.hosts > 1 ? "p2p_network" : "p2p_nvlink";
  char line[640];
  std::snprintf(line, sizeof line,
                "# cpbench commbench --backend %s: %d ranks, %d per node, %d host(s); float32; time_s: the slowest "
                "rank's mean over %d timed iterations after %d warm-up; bytes: each rank's whole buffer (nccl-tests' "
                "size, the bytes of the cost model's collective_s); sendrecv (r to r+1) as %s\n",
                c.backend.c_str(), c.ranks, c.ranks_per_node, c.hosts, o.iters, o.warmup, p2p);
  std::string t = line;
  if (c.backend == "mpi")
    t += "# MPI between processes on host memory: these rows time MPI, not a GPU's collectives, and calibrate nothing "
         "GPU-related\n";
  t += "op,shape,time_s\n";
  for (const CommbenchRow& r : rows) {
    if (r.op == "sendrecv")
      std::snprintf(line, sizeof line, "%s,bytes=%llu,%.9g\n", p2p, (unsigned long long)r.bytes, r.time_s);
    else
      std::snprintf(line, sizeof line, "%s,bytes=%llu;size=%d;ranks_per_node=%d,%.9g\n", r.op.c_str(),
                    (unsigned long long)r.bytes, c.ranks, c.ranks_per_node, r.time_s);
    t += line;
  }
  return t;
}

}  // namespace cpbench
