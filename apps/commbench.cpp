// commbench.cpp — `cpbench commbench`: arguments checked, the job's ranks and hosts found, the
// communicator and buffer memory of the backend made, the measurement (core/runtime/commbench.h)
// run, its table printed on rank 0 and its CSV written there.
#include "apps/commbench.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>

#include <mpi.h>

#include "apps/exec.h"
#include "core/common/json_reader.h"
#include "core/runtime/device_runtime.h"
#include "core/runtime/mpi_communicator.h"
#include "core/runtime/mpi_session.h"
#ifdef CPBENCH_HAVE_NCCL
#include <cuda_runtime_api.h>

#include "core/runtime/cuda/nccl_communicator.h"
#endif

namespace cpbench {

namespace {

// MPI counts are 32-bit (core/runtime/mpi_communicator.cpp): 2^30 float32 elements per buffer.
constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 32;

// Bad arguments, the same verdict on every rank: "" when fine.
std::string argument_problem(const CommbenchArgs& a, int ranks) {
  const CommbenchOptions& o = a.options;
  if (o.min_bytes < 4) return "--min-bytes: at least 4 (one float32 element), got " + std::to_string(o.min_bytes);
  if (o.max_bytes < o.min_bytes)
    return "--max-bytes " + std::to_string(o.max_bytes) + " is below --min-bytes " + std::to_string(o.min_bytes);
  if (o.max_bytes > kMaxBytes) return "--max-bytes: at most 4G (MPI's 32-bit counts), got " + std::to_string(o.max_bytes);
  std::set<std::string> seen;
  for (const std::string& op : o.ops)
    if (!seen.insert(op).second) return "--ops: " + op + " is named twice";
  if (!a.csv.empty()) {
    if (ranks < 2)
      return "--csv needs 2 ranks or more (mpirun -np N): a collective of one rank moves nothing the cost model prices";
    if (std::error_code ec; std::filesystem::is_directory(a.csv, ec))
      return "--csv: " + a.csv + " is a folder: give the path of the file to write";
  }
  return "";
}

std::string host_name() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) return "?";
  return host;
}

#ifdef CPBENCH_HAVE_NCCL
Status cuda_status(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return ok_status();
  return runtime_error("commbench: " + what + ": " + cudaGetErrorString(e));
}
Expected<void*> cuda_allocate(std::size_t bytes) {
  void* p = nullptr;
  if (Status s = cuda_status(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)), "cudaMalloc of " + std::to_string(bytes) + " bytes"); !s)
    return s.errors();
  return p;
}
void cuda_release(void* p) { cudaFree(p); }
// cudaMemcpy on the legacy default stream, NcclCommunicator's stream here: after the collectives
// issued before it, done when it returns.
Status cuda_upload(void* dst, const float* src, std::size_t count) {
  return cuda_status(cudaMemcpy(dst, src, count * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy to the device");
}
Status cuda_download(float* dst, const void* src, std::size_t count) {
  return cuda_status(cudaMemcpy(dst, src, count * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy from the device");
}
const BufferMemory& cuda_buffer_memory() {
  static const BufferMemory memory{"cuda", cuda_allocate, cuda_release, cuda_upload, cuda_download};
  return memory;
}
#endif

// "" when --backend nccl can run on this rank, else why not (one line).
std::string nccl_refusal() {
#ifdef CPBENCH_HAVE_NCCL
  const std::string why = built_in_device()->unavailable();
  return why.empty() ? "" : "--backend nccl: " + why;
#else
  return "--backend nccl: this cpbench was built without NCCL (CUDA's nvcc and libnccl were not both found when it "
         "was built)";
#endif
}

// The backend's communicator and memory, and this rank's line under "# Using devices". NCCL: the
// GPU local_rank % device_count, an NcclCommunicator made over the MPI world as its bootstrap.
struct Backend {
  std::unique_ptr<Communicator> owned;  // null: the MPI world itself
  const BufferMemory* memory = &host_buffer_memory();
  std::string device;  // " device 0 [NVIDIA H200]"
};
Expected<Backend> open_backend(const std::string& name, MpiCommunicator& world, int local_rank) {
  Backend b;
  if (name != "nccl") return b;
#ifdef CPBENCH_HAVE_NCCL
  int devices = 0;
  if (Status s = cuda_status(cudaGetDeviceCount(&devices), "cudaGetDeviceCount"); !s) return s.errors();
  if (devices < 1) return runtime_error("commbench: --backend nccl: no CUDA device here");
  const int device = local_rank % devices;
  if (Status s = cuda_status(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")"); !s) return s.errors();
  cudaDeviceProp prop{};
  if (Status s = cuda_status(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties"); !s) return s.errors();
  char text[400];
  std::snprintf(text, sizeof text, " device %d [%04x:%02x:%02x] %s", device, prop.pciDomainID, prop.pciBusID,
                prop.pciDeviceID, prop.name);
  b.device = text;
  auto nccl = NcclCommunicator::create(world, nullptr);
  if (!nccl) return nccl.errors();
  b.owned = std::move(*nccl);
  b.memory = &cuda_buffer_memory();
  return b;
#else
  return runtime_error(nccl_refusal());
#endif
}

// Rank 0's report of the wrong rows on stderr: one line per (op, size).
std::string wrong_rows(const std::vector<CommbenchRow>& rows) {
  std::string text;
  for (const CommbenchRow& r : rows)
    if (r.wrong > 0)
      text += "cpbench commbench: " + r.op + " at " + std::to_string(r.bytes) + " B: " + std::to_string(r.wrong) +
              " wrong element(s) over the ranks\n";
  return text;
}

}  // namespace

int cmd_commbench(const CommbenchArgs& a) {
  MpiSession session;  // a singleton job when not started by mpirun
  auto world = open_world("commbench", Communicator::kDefaultTimeout);
  if (!world) return 1;
  const int rank = world->rank();
  if (const std::string why = argument_problem(a, world->size()); !why.empty())
    return refuse_input(rank, "commbench", why);
  if (a.backend == "nccl") {
    // Every rank's verdict, so that all return 1 together; rank 0 says why (its own, else a peer's count).
    const std::string why = nccl_refusal();
    double refused = why.empty() ? 0 : 1;
    if (Status s = world->all_reduce(std::span<double>(&refused, 1), ReduceOp::kSum); !s) fail(s.error_str());
    if (refused > 0) {
      if (rank == 0)
        std::cerr << "cpbench commbench: "
                  << (why.empty() ? "--backend nccl: " + std::to_string(int(refused)) + " rank(s) have no usable CUDA device" : why)
                  << "\n";
      return 1;
    }
  }
  auto placement = node_placement(*world);
  if (!placement) fail(placement.error_str());
  // The MPI backend's buffers are host memory: refused before allocating when a host cannot hold them.
  if (a.backend == "mpi")
    if (const std::string why = host_memory_verdict(*world, double(commbench_buffer_bytes(a.options, world->size())),
                                                    "commbench's buffers at --max-bytes");
        !why.empty())
      return refuse_input(rank, "commbench", why);
  auto backend = open_backend(a.backend, *world, placement->local_rank);
  if (!backend) fail("rank " + std::to_string(rank) + ": " + backend.error_str());
  Communicator& comm = backend->owned ? *backend->owned : *world;

  CommbenchContext context{a.backend, world->size(), placement->ranks_per_node, placement->hosts, ""};
  char line[512];
  std::snprintf(line, sizeof line, "#  Rank %3d Pid %7d on %12s%s\n", rank, int(::getpid()), host_name().c_str(),
                backend->device.c_str());
  if (rank == 0) std::fputs(format_commbench_header(context, a.options).c_str(), stdout);
  print_in_rank_order(*world, (rank == 0 ? std::string("#\n# Using devices\n") : std::string()) + line);
  const CommbenchRow* previous = nullptr;
  CommbenchRow last;
  auto print_row = [&](const CommbenchRow& row) {
    if (rank == 0) {
      std::fputs(format_commbench_row(row, previous).c_str(), stdout);
      std::fflush(stdout);
    }
    last = row;
    previous = &last;
  };
  auto rows = run_commbench(comm, *backend->memory, a.options, print_row);
  if (!rows) fail("rank " + std::to_string(rank) + ": " + rows.error_str());
  if (rank != 0) return 0;
  std::fputs(format_commbench_footer(*rows).c_str(), stdout);
  std::fflush(stdout);
  if (const std::string wrong = wrong_rows(*rows); !wrong.empty()) {
    std::cerr << wrong;
    return 1;
  }
  if (!a.csv.empty()) {
    if (Status s = write_file_atomic(a.csv, format_commbench_csv(context, a.options, *rows)); !s) {
      std::cerr << "cpbench commbench: --csv: " << s.error_str() << "\n";
      return 1;
    }
    std::printf("# wrote %s (cpbench calibrate %s --preset HARDWARE)\n", a.csv.c_str(), a.csv.c_str());
  }
  return 0;
}

}  // namespace cpbench
