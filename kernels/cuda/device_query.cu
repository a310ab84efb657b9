// device_query.cu — what the CUDA runtime sees: device count and names, for `cpbench --version`
// and the CUDA backend's start-up check. The attention kernels arrive with the CUDA issue.
// Requires: the CUDA runtime. Note: returns 0 devices (not an error) on a machine without a GPU.
#include <cuda_runtime.h>

#include <string>

namespace cpbench::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return {};
  return prop.name;
}

}  // namespace cpbench::cuda
