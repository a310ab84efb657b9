#include "core/runtime/local_measure.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <sstream>
#include <thread>

#include <cblas.h>
#include <unistd.h>

#include "kernels/cpu/flash_attention.h"

namespace cpbench {
namespace {

using Clock = std::chrono::steady_clock;

// Best of `reps` runs: the machine's capability, not its noise.
template <class F>
double best_time_s(int reps, F f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

std::string host_and_date() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::time_t now = std::time(nullptr);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%d", std::gmtime(&now));
  return std::string(host) + " on " + ts;
}

// A constant of the measured preset with its citation and its kind (core/common/citation.h).
json sourced(double value, const std::string& source, const std::string& kind = "device_measurement") {
  return {{"value", value}, {"source", source}, {"kind", kind}};
}

}  // namespace

Expected<LocalMeasurements> measure_local(Communicator& comm) {
  LocalMeasurements m;
  m.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  m.memory_gib = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / (1024.0 * 1024 * 1024);
  if (comm.rank() == 0) {
    for (int n : {256, 512, 1024, 2048}) {
      std::vector<float> a(static_cast<size_t>(n) * n, 1.f), b(a), c(a);
      double t = best_time_s(3, [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
      });
      m.ops.push_back({"gemm", {{"m", n}, {"n", n}, {"k", n}}, t});
      m.sgemm_gflops = std::max(m.sgemm_gflops, 2.0 * n * n * n / t / 1e9);
    }
    for (size_t mb : {16, 64, 256}) {
      size_t n = mb * 1024 * 1024 / sizeof(float);
      std::vector<float> x(n, 1.f), y(n, 2.f), z(n, 0.f);
      double t = best_time_s(3, [&] {
        for (size_t i = 0; i < n; ++i) z[i] = x[i] + 0.5f * y[i];
      });
      m.ops.push_back({"memory_bound", {{"bytes", 3.0 * n * sizeof(float)}}, t});
      m.memory_GBps = std::max(m.memory_GBps, 3.0 * n * sizeof(float) / t / 1e9);
    }
    // The kernel the executor runs: one full tile of L queries × L keys.
    const int64_t heads = 4, d = 64;
    for (int64_t L : {256, 512, 1024, 2048}) {
      std::vector<float> q(static_cast<size_t>(L * heads * d), 0.5f), k(q), v(q), o(q), dq(q), dk(q), dv(q), lse(L * heads);
      std::vector<kernels::KeyRanges> ranges(static_cast<size_t>(L), kernels::KeyRanges{0, L, L, L});
      kernels::TileInput in{{heads, heads, d, 0.0}, q.data(), L, ranges.data(), k.data(), v.data(), L, 0};
      double pairs = static_cast<double>(L) * L;
      // mean_len: the cost model spreads a row's overhead over mean_len/2 keys; a full row sees L.
      std::map<std::string, double> shape{{"pairs", pairs}, {"heads", heads}, {"head_dim", d}, {"mean_len", 2.0 * L}};
      double tf = best_time_s(3, [&] { kernels::flash_tile_forward(in, o.data(), lse.data(), L); });
      double tb = best_time_s(2, [&] {
        kernels::flash_tile_backward(in, o.data(), lse.data(), L, q.data(), dq.data(), dk.data(), dv.data());
      });
      m.ops.push_back({"flash_attention_fwd", shape, tf});
      m.ops.push_back({"flash_attention_bwd", shape, tb});
    }
  }
  // Transfers: ping-pong between ranks 0 and 1; one way = half the round trip.
  if (comm.size() >= 2 && comm.rank() < 2) {
    const int peer = 1 - comm.rank();
    for (size_t bytes : {size_t(4) << 10, size_t(64) << 10, size_t(1) << 20, size_t(16) << 20, size_t(64) << 20}) {
      std::vector<std::byte> buf(bytes);
      Status st = ok_status();
      double t = best_time_s(5, [&] {
        if (comm.rank() == 0) {
          if (st) st = comm.send(std::span<const std::byte>(buf), peer, 77);
          if (st) st = comm.recv(std::span<std::byte>(buf), peer, 77);
        } else {
          if (st) st = comm.recv(std::span<std::byte>(buf), peer, 77);
          if (st) st = comm.send(std::span<const std::byte>(buf), peer, 77);
        }
      });
      if (!st) return st.errors();
      if (comm.rank() == 0) {
        m.ops.push_back({"p2p_nvlink", {{"bytes", static_cast<double>(bytes)}}, t / 2});
        m.link_GBps = std::max(m.link_GBps, bytes / (t / 2) / 1e9);
      }
    }
  }
  if (auto s = comm.barrier(); !s) return s.errors();
  return m;
}

std::string measurements_csv(const LocalMeasurements& m) {
  std::ostringstream out;
  out << "op,shape,time_s\n";
  out.precision(9);
  for (const auto& op : m.ops) {
    out << op.op << ',';
    bool first = true;
    for (const auto& [k, v] : op.shape) {
      out << (first ? "" : ";") << k << '=' << v;
      first = false;
    }
    out << ',' << op.time_s << '\n';
  }
  return out.str();
}

Expected<json> local_preset(const LocalMeasurements& m, const json& efficiency_start, const std::string& csv_file) {
  const std::string where = "measured by cpbench calibrate --local on " + host_and_date();
  const double link = m.link_GBps > 0 ? m.link_GBps : m.memory_GBps / 4;
  const std::string link_src = m.link_GBps > 0 ? where + ": MPI ping-pong, 64 MiB messages, between two ranks"
                                               : "assumed: a quarter of the memory bandwidth (run under mpirun -np 2 to measure)";
  const std::string link_kind = m.link_GBps > 0 ? "device_measurement" : "assumption";
  json p = {
      {"name", "cpu_local"},
      {"description", "This machine as cpbench measured it: MPI ranks on one host running the CPU attention kernels"},
      {"gpu",
       {{"name", "CPU (" + std::to_string(m.cores) + " cores)"},
        {"peak_dense_tflops", sourced(m.sgemm_gflops / 1e3, where + ": best OpenBLAS SGEMM (fp32) rate")},
        {"hbm_gib", sourced(std::floor(m.memory_gib), where + ": physical memory")},
        {"hbm_bandwidth_GBps", sourced(m.memory_GBps, where + ": triad over 256 MiB arrays")},
        {"sm_count", sourced(m.cores, where + ": hardware threads")},
        {"nvlink_bandwidth_GBps", sourced(link, link_src, link_kind)},
        {"pcie_bandwidth_GBps", sourced(m.memory_GBps, where + ": host memory is the device memory here")}}},
      {"gpus_per_node", sourced(m.cores, "one rank per core on one host", "estimate")},
      {"nics_per_node", sourced(1, "one host: no network; the value only keeps the preset complete", "assumption")},
      {"nic_bandwidth_Gbps", sourced(link * 8, link_src, link_kind)},
      {"memory",
       {{"reserved_gib", sourced(0, "host memory: no device context or communicator buffers are modelled", "assumption")},
        {"allocator_fragmentation", sourced(0, "host malloc: fragmentation not modelled", "assumption")}}},
      {"efficiency", efficiency_start},
  };
  for (auto& [k, v] : p["efficiency"].items()) {
    v["source"] = "starting value before the fit (the A100 preset's); kept where no measurement constrains it";
    v["kind"] = "assumption";  // calibrate_preset marks what it fits as device_measurement
  }
  return calibrate_preset(p, m.ops, csv_file);
}

}  // namespace cpbench
