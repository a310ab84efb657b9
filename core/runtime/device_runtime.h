// device_runtime.h — what core needs of a GPU runtime to execute plans on a device, without linking
// one: one rank's kernels and memory on the device, the copy that moves bytes between the buffers
// of thread ranks sharing it, and whether a device is there at all. A binary built with CUDA hands
// cuda_runtime() (core/runtime/cuda/cuda_runtime.h) to the backends that need devices (the cuda
// row of core/evaluate/evaluate.h's table); core itself never links CUDA, so a CPU-only build
// has no runtime (null) and says so.
// Requires: the functions are called from the threads that run the ranks; each rank makes its own
// kernels (a GPU's: its own stream on the current device). Two ways to run a plan's ranks: thread
// ranks of one process sharing its GPU (make_kernels per rank, copy between them), or one process
// per GPU under mpirun (use_device, make_kernels, world_over).
#pragma once

#include <memory>
#include <string>

#include "core/common/expected.h"
#include "core/runtime/attention_kernels.h"
#include "core/runtime/communicator.h"
#include "core/runtime/copy_receive.h"

namespace cpbench {

struct DeviceRuntime {
  const char* name;  // "cuda"
  // "" when a device can run plans; else one line saying why not ("no CUDA device: …").
  std::string (*unavailable)();
  // The device the ranks run on, one line (name, compute capability, memory, runtime version).
  std::string (*describe)();
  // One rank's kernels, and the memory they address, on the current device.
  std::unique_ptr<AttentionKernels> (*make_kernels)();
  // The same with bf16 arithmetic on the device's fast kernels (cuDNN's fused attention, our
  // tensor-core forward); null where the build has none.
  std::unique_ptr<AttentionKernels> (*make_fast_kernels)();
  // Any of the ranks' buffers (or host memory) to any, once the device's queued work is done:
  // the MemoryCopy of the thread ranks that share the device (ThreadCommunicator::group).
  Status (*copy)(void* dst, const void* src, std::size_t bytes);
  // One GPU per process (mpirun/srun): makes device local_rank % (devices on the host) current, so
  // that the kernels made after it live there.
  Status (*use_device)(int local_rank);
  // The job's communicator over devices (NCCL), made by every rank together over `bootstrap` (the
  // MPI world), issuing on the stream of `kernels`' memory; null where the build has no NCCL.
  Expected<std::unique_ptr<Communicator>> (*world_over)(Communicator& bootstrap, AttentionKernels& kernels);
};

}  // namespace cpbench
