// host_memory.h — the executor's host allocation policy: keep freed memory in the process.
// Requires: glibc (mallopt); elsewhere a no-op.
// Note: glibc serves blocks above 128 KiB with a fresh mmap and unmaps them on free, so every
// slice, message and partial output the executor allocates per step pays page faults and page
// zeroing again — measured on the development machine as 5–10% of a 2-rank step, outside the
// kernels the simulator prices. Training frameworks avoid the same cost on the device with a
// caching allocator; this is the host equivalent, set once per process before the first step.
#pragma once

namespace cpbench {

// Raises glibc's mmap and trim thresholds so freed blocks are reused, not returned to the OS.
void keep_freed_host_memory();

}  // namespace cpbench
