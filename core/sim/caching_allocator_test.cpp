// caching_allocator_test.cpp — the allocator's rules one by one (rounding, pools, segment sizes,
// best fit, split thresholds, merging, the flush-and-retry on a failed cudaMalloc, expandable
// segments' pages), then random traces against its invariants.
#include "core/sim/caching_allocator.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace cpbench {
namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;

using Allocation = CachingAllocator::Allocation;

Allocation must(std::optional<Allocation> allocation) {
  EXPECT_TRUE(allocation.has_value());
  return allocation.value_or(Allocation{});
}

TEST(CachingAllocator, RoundsAndSizesSegmentsAsTorch) {
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::segment_size(1 * MiB), 2 * MiB);         // small pool
  EXPECT_EQ(CachingAllocator::segment_size(1 * MiB + 512), 20 * MiB);  // large, under 10 MiB
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB), 10 * MiB);       // the request, to 2 MiB
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB + 512), 12 * MiB);
}

TEST(CachingAllocator, SmallRequestsShareATwoMiBSegment) {
  CachingAllocator a;
  for (int i = 0; i < 4; ++i) must(a.allocate(512 * KiB - 100));
  EXPECT_EQ(a.stats().reserved, 2 * MiB);
  EXPECT_EQ(a.stats().cuda_mallocs, 1);
  EXPECT_EQ(a.stats().allocated, 2 * MiB);  // rounded to 512 B each
  EXPECT_EQ(a.stats().requested, 4 * (512 * KiB - 100));
  must(a.allocate(1));
  EXPECT_EQ(a.stats().reserved, 4 * MiB);
}

TEST(CachingAllocator, LargeBlocksSplitOnlyWhenMoreThanOneMiBRemains) {
  CachingAllocator a;
  must(a.allocate(3 * MiB));  // a 20 MiB segment, 17 MiB left free
  EXPECT_EQ(a.stats().reserved, 20 * MiB);
  must(a.allocate(16 * MiB + 512 * KiB));  // best fit: the 17 MiB block, 0.5 MiB is not split off
  EXPECT_EQ(a.stats().reserved, 20 * MiB);
  EXPECT_EQ(a.stats().allocated, 20 * MiB);
  EXPECT_EQ(a.stats().requested, 19 * MiB + 512 * KiB);
}

TEST(CachingAllocator, FreedBlocksMergeAndServeTheSmallestFit) {
  CachingAllocator a;
  const Allocation x = must(a.allocate(12 * MiB)), y = must(a.allocate(14 * MiB));
  a.free(x);
  a.free(y);
  EXPECT_EQ(a.stats().reserved, 26 * MiB);  // cached, not returned
  EXPECT_EQ(must(a.allocate(11 * MiB)).address, x.address);  // best fit is the 12 MiB block, not the 14
  // Four 4 MiB blocks in one 20 MiB segment; freeing two neighbours merges them into 8 MiB.
  CachingAllocator b;
  std::vector<Allocation> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(must(b.allocate(4 * MiB)));
  EXPECT_EQ(b.stats().reserved, 20 * MiB);
  b.free(blocks[1]);
  b.free(blocks[2]);
  EXPECT_EQ(must(b.allocate(8 * MiB)).address, blocks[1].address);
  EXPECT_EQ(b.stats().reserved, 20 * MiB);
}

// Long-lived blocks between short-lived ones leave holes no later request fits: ZeRO §3.2's case.
TEST(CachingAllocator, InterleavedLifetimesFragmentTheCache) {
  CachingAllocator a;
  std::vector<Allocation> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(must(a.allocate(4 * MiB)));
  for (int i : {0, 2, 4}) a.free(blocks[i]);  // 12 MiB free in three 4 MiB holes
  must(a.allocate(8 * MiB));
  EXPECT_EQ(a.stats().requested, 16 * MiB);
  EXPECT_EQ(a.stats().reserved, 40 * MiB);
}

TEST(CachingAllocator, AFailedCudaMallocFreesTheCacheAndRetriesOnce) {
  CachingAllocator a(false, 30 * MiB);
  a.free(must(a.allocate(12 * MiB)));
  a.free(must(a.allocate(14 * MiB)));  // 26 MiB reserved, all of it cached
  EXPECT_EQ(a.stats().cache_flushes, 0);
  const Allocation big = must(a.allocate(16 * MiB));  // 42 > 30: flush both, then fits
  EXPECT_EQ(a.stats().cache_flushes, 1);
  EXPECT_EQ(a.stats().reserved, 16 * MiB);
  EXPECT_EQ(a.stats().peak_reserved, 26 * MiB);
  EXPECT_FALSE(a.allocate(20 * MiB).has_value());  // nothing cached to free: out of memory
  a.free(big);
  EXPECT_TRUE(a.allocate(20 * MiB).has_value());
}

TEST(CachingAllocator, ExpandableSegmentsGrowOnePoolInPages) {
  // Growing requests: each a new exact segment by default, one growing range when expandable.
  CachingAllocator fixed, expandable(true);
  for (uint64_t mib : {12, 14, 16}) {
    fixed.free(must(fixed.allocate(mib * MiB)));
    expandable.free(must(expandable.allocate(mib * MiB)));
  }
  EXPECT_EQ(fixed.stats().reserved, 42 * MiB);
  EXPECT_EQ(expandable.stats().reserved, 20 * MiB);  // one 20 MiB page serves all three
  // A request larger than the free tail maps only the pages it lacks, merged with that tail.
  const Allocation x = must(expandable.allocate(16 * MiB));
  must(expandable.allocate(30 * MiB));  // 4 MiB free after x + 26 MiB more: two more pages
  EXPECT_EQ(expandable.stats().reserved, 60 * MiB);
  EXPECT_EQ(expandable.stats().allocated, 46 * MiB);  // split at any 512 B remainder
  // The flush unmaps only the pages wholly inside free blocks.
  expandable.free(x);
  expandable.release_cached();
  EXPECT_EQ(expandable.stats().reserved, 60 * MiB);  // x's 16 MiB share its page with the next
  CachingAllocator c(true);
  const Allocation y = must(c.allocate(30 * MiB));  // pages [0, 40)
  must(c.allocate(10 * MiB));                     // [30, 40)
  c.free(y);
  c.release_cached();
  EXPECT_EQ(c.stats().reserved, 20 * MiB);  // page [0, 20) unmapped, [20, 40) holds the 10 MiB
  must(c.allocate(25 * MiB));               // remaps [0, 20) and reuses [20, 30): no new page
  EXPECT_EQ(c.stats().reserved, 40 * MiB);
}

// Random traces under a capacity: requested ≤ allocated ≤ reserved ≤ capacity, live blocks never
// overlap, a request fails only after a flush, and once everything is freed and the cache
// released nothing stays reserved.
TEST(CachingAllocator, RandomTracesKeepItsInvariants) {
  for (bool expandable : {false, true}) {
    std::mt19937_64 rng(7);
    CachingAllocator a(expandable, 512 * MiB);
    std::map<uint64_t, std::pair<uint64_t, Allocation>> live;  // address -> rounded size, allocation
    uint64_t live_bytes = 0;  // at most 464 MiB: under the capacity, not always under its fragmentation
    int failures = 0;
    for (int step = 0; step < 20000; ++step) {
      if (!live.empty() && (live_bytes > 400 * MiB || rng() % 2)) {
        auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
        a.free(it->second.second);
        live_bytes -= it->second.first;
        live.erase(it);
      } else {
        const uint64_t bytes = rng() % 4 == 0 ? 1 + rng() % MiB : 1 + rng() % (64 * MiB);
        const int64_t flushes = a.stats().cache_flushes;
        auto allocation = a.allocate(bytes);
        if (!allocation) {  // out of memory only after freeing the cache
          ASSERT_EQ(a.stats().cache_flushes, flushes + 1) << step;
          ++failures;
          continue;
        }
        const uint64_t address = allocation->address, size = CachingAllocator::round_size(bytes);
        auto next = live.lower_bound(address);
        ASSERT_TRUE(next == live.end() || next->first >= address + size) << step;
        ASSERT_TRUE(next == live.begin() || std::prev(next)->first + std::prev(next)->second.first <= address) << step;
        live[address] = {size, *allocation};
        live_bytes += size;
      }
      const AllocatorStats& s = a.stats();
      ASSERT_LE(s.requested, s.allocated);
      ASSERT_LE(s.allocated, s.reserved);
      ASSERT_LE(s.reserved, 512 * MiB);
    }
    EXPECT_GT(a.stats().cache_flushes, failures) << "the trace reaches the capacity, and flushing mostly helps";
    for (const auto& [address, held] : live) a.free(held.second);
    a.release_cached();
    EXPECT_EQ(a.stats().allocated, 0u);
    EXPECT_EQ(a.stats().reserved, 0u) << "expandable " << expandable;
  }
}

}  // namespace
}  // namespace cpbench
