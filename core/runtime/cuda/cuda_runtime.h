// cuda_runtime.h — the CUDA DeviceRuntime (core/runtime/device_runtime.h): CudaAttentionKernels per
// rank on device 0, each on its own stream, and the copy thread ranks sharing the GPU move bytes
// with (cudaMemcpy after the device's queued work). A binary built with CUDA passes it to the
// backends that need devices (`cpbench run --backend cuda`, exec and validate).
// Requires: CUDA (library cpbench_core_cuda); a device only when its functions other than
// unavailable() and describe() are called.
#pragma once

#include "core/runtime/device_runtime.h"

namespace cpbench {

const DeviceRuntime& cuda_runtime();

}  // namespace cpbench
