// caching_allocator.h — PyTorch's CUDA caching allocator replayed on a sequence of allocations and
// frees: how much device memory it reserves (cudaMalloc'ed or mapped) to serve what is allocated.
// Requires: byte sizes in the order one stream asks for them. Note: the rules follow
// c10/cuda/CUDACachingAllocator.cpp of PyTorch 2.3–2.5 (the NGC 24.x containers' allocator), read
// for this model, not copied:
//   - sizes round up to 512 B; requests ≤ 1 MiB come from the small pool, the rest from the large;
//   - a miss cudaMallocs a segment: 2 MiB (small), 20 MiB (large, under 10 MiB), else the request
//     rounded up to 2 MiB; a hit is the smallest free block of the pool that fits (best fit);
//   - a block is split when what remains is ≥ 512 B (small) or > 1 MiB (large); a freed block
//     merges with free neighbours in its segment and stays cached (reserved) for reuse;
//   - when cudaMalloc fails the allocator frees every cached segment that is wholly free and tries
//     once more; then it is out of memory;
//   - with expandable_segments:True each pool is one virtual range mapped in pages (2 MiB small,
//     20 MiB large) as it grows; a hit prefers a block other than the growing tail; blocks split
//     at any 512 B remainder; on a failed map the pages wholly inside free blocks are unmapped and
//     the map tried once more.
// One stream: torch keeps every stream's blocks apart; the activations of a stage's schedule are
// allocated on its compute stream. Left out: record_stream's deferred frees, max_split_size and
// garbage_collection_threshold (off by default), CUDA graph pools.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <vector>

namespace cpbench {

struct AllocatorStats {
  uint64_t requested = 0;  // bytes asked for by live allocations
  uint64_t allocated = 0;  // their blocks (rounded, and unsplit remainders): torch's allocated_bytes
  uint64_t reserved = 0;   // segments cudaMalloc'ed or pages mapped: torch's reserved_bytes
  uint64_t peak_requested = 0, peak_allocated = 0, peak_reserved = 0;
  int64_t cuda_mallocs = 0;   // segments or page runs obtained from the driver
  int64_t cache_flushes = 0;  // times a failed cudaMalloc made it free its cached segments
};

class CachingAllocator {
 public:
  static constexpr uint64_t kMinBlockSize = 512;            // every size is a multiple of it
  static constexpr uint64_t kSmallSize = 1ull << 20;        // largest request of the small pool
  static constexpr uint64_t kSmallBuffer = 2ull << 20;      // a small pool segment (and page)
  static constexpr uint64_t kLargeBuffer = 20ull << 20;     // a segment for 1–10 MiB (and page)
  static constexpr uint64_t kMinLargeAlloc = 10ull << 20;   // from here a segment is the request
  static constexpr uint64_t kRoundLarge = 2ull << 20;       // ... rounded up to 2 MiB

  // A live allocation: its device address, and the allocator's handle to its block (what free
  // takes, as torch's free takes its Block).
  struct Allocation {
    uint64_t address = 0;
    int block = -1;
  };

  // capacity_bytes: what the driver can give this process's tensors; beyond it cudaMalloc fails.
  explicit CachingAllocator(bool expandable_segments = false,
                            uint64_t capacity_bytes = std::numeric_limits<uint64_t>::max());
  // Blocks hold their places in the pools: a copy would point into the original's.
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  CachingAllocator(CachingAllocator&&) = default;
  CachingAllocator& operator=(CachingAllocator&&) = default;

  // The allocation, or nullopt when out of memory (after freeing the cache and retrying).
  std::optional<Allocation> allocate(uint64_t bytes);
  // REQUIRES: `allocation` came from allocate and was not freed since.
  void free(Allocation allocation);
  // torch.cuda.empty_cache(): what the OOM path does, on demand.
  void release_cached();
  // torch.cuda.reset_peak_memory_stats(): every peak becomes its current value.
  void reset_peaks();

  const AllocatorStats& stats() const { return stats_; }
  // Rounding and segment sizing, as the allocator applies them.
  static uint64_t round_size(uint64_t bytes);
  static uint64_t segment_size(uint64_t rounded);

 private:
  enum class State : uint8_t { free, allocated, unmapped };
  // A free mapped block in its pool's best-fit order (size, then address), as torch's BlockPool.
  struct FreeEntry {
    uint64_t size = 0, address = 0;
    int block = -1;
    bool operator<(const FreeEntry& o) const { return size != o.size ? size < o.size : address < o.address; }
  };
  using Pool = std::set<FreeEntry>;
  // A segment is tiled by its blocks, linked in address order (torch's Block prev/next), so
  // neighbours are found without a search; blocks live in one table whose slots are reused.
  struct Block {
    uint64_t address = 0, size = 0;
    uint64_t requested = 0;
    int segment = 0;
    int prev = -1, next = -1;  // the neighbours in the segment, −1 at its ends
    bool small = false;
    State state = State::free;
    Pool::iterator entry;  // a free block's place in its pool
  };
  struct Segment {
    uint64_t base = 0, size = 0;  // size: what the driver gave (for an expandable one, its virtual range)
    int head = -1;                // its lowest block
    bool small = false, live = true;
  };
  // An unlinked block (no neighbours, not indexed).
  static Block fresh(uint64_t address, uint64_t size, int segment, bool small, State state);
  int new_block(const Block& block);
  void drop_block(int id);
  void link_after(int id, int rest);
  std::optional<Allocation> take(int block, uint64_t size, uint64_t requested);
  std::optional<int> best_fit(bool small, uint64_t size);
  std::optional<int> new_segment(bool small, uint64_t size);
  std::optional<int> map_pages(bool small, uint64_t size);
  bool reserve(uint64_t bytes);
  int merge_free(int block);
  int settle_free(int block);
  void index(int block, bool insert);
  void note_peaks();

  bool expandable_;
  uint64_t capacity_;
  AllocatorStats stats_;
  std::vector<Block> blocks_;
  std::vector<int> spare_;  // slots of blocks merged away
  std::vector<Segment> segments_;
  Pool free_[2];                       // [small] free mapped blocks
  std::vector<Pool::node_type> nodes_;  // the pools' nodes, kept for reuse: no heap call per index
  uint64_t next_base_ = 0;
  int expandable_segment_[2] = {-1, -1};  // [small] the pool's one segment, expandable mode
};

}  // namespace cpbench
