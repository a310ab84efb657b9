// device_query.h — what the CUDA runtime sees: the devices of this machine, for `cpbench --version`
// and the CUDA backend's start-up check.
// Requires: the CUDA runtime (libcudart); built into cpbench_cuda only when nvcc is found.
// Note: a machine without a GPU (or without a driver) has no devices: that is an answer, not an error.
#pragma once

#include <string>
#include <vector>

namespace cpbench::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;  // compute capability (9.0: H100, H200)
  int sm_count = 0;
  double memory_gib = 0;
};

std::vector<DeviceInfo> devices();
// Why there are none ("no CUDA driver", "no device"), or "" when there are.
std::string no_devices_reason();
// The CUDA runtime version cpbench was built against, "13.0".
std::string runtime_version();

}  // namespace cpbench::cuda
