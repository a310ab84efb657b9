// device_query.cu — the CUDA runtime's view of this machine's devices.
#include "kernels/cuda/device_query.h"

#include <cuda_runtime.h>

#include <span>

namespace cpbench::cuda {
namespace {

// The properties cpbench reads of each device (a span: this file is compiled as C++20, as core is).
DeviceInfo info_of(int index, std::span<const cudaDeviceProp, 1> prop) {
  return DeviceInfo{.index = index,
                    .name = prop[0].name,
                    .sm_major = prop[0].major,
                    .sm_minor = prop[0].minor,
                    .sm_count = prop[0].multiProcessorCount,
                    .memory_gib = static_cast<double>(prop[0].totalGlobalMem) / (1024.0 * 1024.0 * 1024.0)};
}

}  // namespace

std::vector<DeviceInfo> devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return {};
  std::vector<DeviceInfo> out;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) out.push_back(info_of(i, std::span<const cudaDeviceProp, 1>(&prop, 1)));
  }
  return out;
}

std::string no_devices_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no device (") + cudaGetErrorString(e) + ")";
  return n == 0 ? "no device" : "";
}

std::string runtime_version() {
  const int v = CUDART_VERSION;  // e.g. 13000
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

}  // namespace cpbench::cuda
