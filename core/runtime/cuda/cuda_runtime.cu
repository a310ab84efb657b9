#include "core/runtime/cuda/cuda_runtime.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "core/runtime/cuda/cuda_attention_kernels.h"
#if defined(CPBENCH_HAVE_NCCL)
#include "core/runtime/cuda/nccl_communicator.h"
#endif
#include "kernels/cuda/device_query.h"

namespace cpbench {
namespace {

std::string unavailable() {
  int n = 0;
  if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess)
    return std::string("no usable CUDA device here (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
  return n == 0 ? "no CUDA device here" : "";
}

std::string describe() {
  const auto devs = cuda::devices();
  if (devs.empty()) return "no CUDA device";
  const cuda::DeviceInfo& d = devs.front();
  char line[256];
  std::snprintf(line, sizeof line, "%s (sm %d.%d, %d SMs, %.0f GiB), CUDA runtime %s", d.name.c_str(), d.sm_major,
                d.sm_minor, d.sm_count, d.memory_gib, cuda::runtime_version().c_str());
  return line;
}

std::unique_ptr<AttentionKernels> make_kernels() { return std::make_unique<CudaAttentionKernels>(); }
#if defined(CPBENCH_HAVE_CUDNN)
std::unique_ptr<AttentionKernels> make_fast_kernels() {
  return std::make_unique<CudaAttentionKernels>(CudaAttentionKernels::Path::fast);
}
#else
constexpr auto make_fast_kernels = nullptr;  // no cuDNN in this build
#endif

Status fail(cudaError_t e, const char* what) {
  return runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}

// The ranks' streams run asynchronously: the source may still be being written on one of them and
// the destination read. The device's queued work done first, the bytes copied (cudaMemcpyDefault:
// any of host and device memory, unified addressing), and done before the copy returns, so a rank
// that learns of the delivery can use the bytes on its own stream at once. Correctness over speed:
// thread ranks on one GPU check a plan's data movement; NCCL is the fast path.
Status copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return ok_status();
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return fail(e, "cudaDeviceSynchronize before a copy");
  if (cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault); e != cudaSuccess) return fail(e, "cudaMemcpy");
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return fail(e, "cudaDeviceSynchronize after a copy");
  return ok_status();
}

Status use_device(int local_rank) {
  int n = 0;
  if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess) return fail(e, "cudaGetDeviceCount");
  if (n == 0) return runtime_error("no CUDA device here");
  if (cudaError_t e = cudaSetDevice(local_rank % n); e != cudaSuccess) return fail(e, "cudaSetDevice");
  return ok_status();
}

#if defined(CPBENCH_HAVE_NCCL)
Expected<std::unique_ptr<Communicator>> world_over(Communicator& bootstrap, AttentionKernels& kernels) {
  auto* memory = dynamic_cast<CudaTensorOps*>(&kernels.memory());
  if (!memory) return runtime_error("an NCCL communicator needs kernels on CUDA memory");
  auto nccl = NcclCommunicator::create(bootstrap, memory->stream());
  if (!nccl) return nccl.errors();
  return std::unique_ptr<Communicator>(std::move(*nccl));
}
#else
constexpr auto world_over = nullptr;  // no NCCL in this build: one process per GPU is refused
#endif

}  // namespace

const DeviceRuntime& cuda_runtime() {
  static const DeviceRuntime rt{"cuda",     unavailable, describe,  make_kernels, make_fast_kernels,
                                copy,       use_device,  world_over};
  return rt;
}

}  // namespace cpbench
