#include "core/runtime/host_memory.h"

#include <cstdlib>  // a libc header first: it defines __GLIBC__

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace cpbench {

void keep_freed_host_memory() {
#if defined(__GLIBC__)
  constexpr int kOneGiB = 1 << 30;  // larger than any single buffer of a step on this machine
  mallopt(M_MMAP_THRESHOLD, kOneGiB);
  mallopt(M_TRIM_THRESHOLD, kOneGiB);
#endif
}

}  // namespace cpbench
