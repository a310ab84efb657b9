// caching_allocator.cpp — the allocator's pools, segments and blocks (see the header for the rules
// and their source). A segment is tiled by its blocks (allocated, free, or in an expandable
// segment unmapped), linked in address order; free blocks are also kept sorted by (size, address)
// per pool, so best fit is one lower_bound, as torch's BlockPool set is.
#include "core/sim/caching_allocator.h"

#include <algorithm>
#include <cassert>

namespace cpbench {
namespace {

uint64_t round_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

// An expandable segment's virtual range: torch reserves 1⅛ of the GPU's memory; any range larger
// than what can be mapped behaves the same.
constexpr uint64_t kExpandableRange = CachingAllocator::kLargeBuffer << 22;  // 80 TiB, whole pages

}  // namespace

CachingAllocator::CachingAllocator(bool expandable_segments, uint64_t capacity_bytes)
    : expandable_(expandable_segments), capacity_(capacity_bytes) {}

uint64_t CachingAllocator::round_size(uint64_t bytes) {
  return bytes < kMinBlockSize ? kMinBlockSize : round_up(bytes, kMinBlockSize);
}

uint64_t CachingAllocator::segment_size(uint64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return round_up(rounded, kRoundLarge);
}

CachingAllocator::Block CachingAllocator::fresh(uint64_t address, uint64_t size, int segment, bool small, State state) {
  Block b;
  b.address = address;
  b.size = size;
  b.segment = segment;
  b.small = small;
  b.state = state;
  return b;
}

int CachingAllocator::new_block(const Block& block) {
  if (spare_.empty()) {
    blocks_.push_back(block);
    return static_cast<int>(blocks_.size()) - 1;
  }
  const int id = spare_.back();
  spare_.pop_back();
  blocks_[id] = block;
  return id;
}

// Unlinks a block from its segment and frees its slot. REQUIRES: it is out of the free index.
void CachingAllocator::drop_block(int id) {
  Block& b = blocks_[id];
  if (b.prev >= 0) blocks_[b.prev].next = b.next;
  else segments_[b.segment].head = b.next;
  if (b.next >= 0) blocks_[b.next].prev = b.prev;
  spare_.push_back(id);
}

// Links `rest` (its address just past `id`'s end) after `id` in their segment.
void CachingAllocator::link_after(int id, int rest) {
  Block& r = blocks_[rest];
  r.prev = id;
  r.next = blocks_[id].next;
  if (r.next >= 0) blocks_[r.next].prev = rest;
  blocks_[id].next = rest;
}

void CachingAllocator::index(int id, bool insert) {
  const Block& b = blocks_[id];
  if (b.state != State::free) return;
  Pool& pool = free_[b.small ? 1 : 0];
  if (!insert) {
    nodes_.push_back(pool.extract(b.entry));
    return;
  }
  const FreeEntry key{b.size, b.address, id};
  if (nodes_.empty()) {
    blocks_[id].entry = pool.insert(key).first;
    return;
  }
  Pool::node_type node = std::move(nodes_.back());
  nodes_.pop_back();
  node.value() = key;
  blocks_[id].entry = pool.insert(std::move(node)).position;
}

void CachingAllocator::reset_peaks() {
  stats_.peak_requested = stats_.requested;
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

void CachingAllocator::note_peaks() {
  stats_.peak_requested = std::max(stats_.peak_requested, stats_.requested);
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
}

bool CachingAllocator::reserve(uint64_t bytes) {
  if (bytes > capacity_ || stats_.reserved > capacity_ - bytes) return false;
  stats_.reserved += bytes;
  ++stats_.cuda_mallocs;
  note_peaks();
  return true;
}

// Merges `id` with its neighbours of the same state (free with free, unmapped with unmapped);
// returns the merged block. REQUIRES: the block and its free neighbours are out of the free index.
int CachingAllocator::merge_free(int id) {
  const State state = blocks_[id].state;
  if (const int prev = blocks_[id].prev; prev >= 0 && blocks_[prev].state == state) {
    blocks_[prev].size += blocks_[id].size;
    drop_block(id);
    id = prev;
  }
  if (const int next = blocks_[id].next; next >= 0 && blocks_[next].state == state) {
    blocks_[id].size += blocks_[next].size;
    drop_block(next);
  }
  return id;
}

// A block that just became free (not indexed): merged with its free neighbours, then indexed.
int CachingAllocator::settle_free(int id) {
  for (int neighbour : {blocks_[id].prev, blocks_[id].next})
    if (neighbour >= 0) index(neighbour, false);
  id = merge_free(id);
  index(id, true);
  return id;
}

std::optional<int> CachingAllocator::best_fit(bool small, uint64_t size) {
  const auto& pool = free_[small ? 1 : 0];
  auto it = pool.lower_bound(FreeEntry{size, 0, -1});
  if (it == pool.end()) return std::nullopt;
  if (expandable_) {
    // Prefer a block that is not the segment's growable tail (its next block unmapped): the tail
    // is kept for requests nothing else fits (torch's get_free_block, expandable branch).
    for (auto candidate = it; candidate != pool.end(); ++candidate) {
      const int next = blocks_[candidate->block].next;
      if (next < 0 || blocks_[next].state != State::unmapped) return candidate->block;
    }
  }
  return it->block;
}

std::optional<int> CachingAllocator::new_segment(bool small, uint64_t size) {
  const uint64_t bytes = segment_size(size);
  if (!reserve(bytes)) return std::nullopt;
  const int segment = static_cast<int>(segments_.size());
  const int id = new_block(fresh(next_base_, bytes, segment, small, State::free));
  segments_.push_back({next_base_, bytes, id, small, true});
  next_base_ += bytes + kLargeBuffer;  // a gap: segments are never neighbours
  index(id, true);
  return id;
}

// Expandable segments: map pages at the lowest unmapped address whose run of free and unmapped
// blocks (from the free block before it, if any) holds `size`, then merge the run into one free
// block (torch's find_expandable_block and try_allocate_expandable_block).
std::optional<int> CachingAllocator::map_pages(bool small, uint64_t size) {
  int& segment = expandable_segment_[small ? 1 : 0];
  if (segment < 0) {
    segment = static_cast<int>(segments_.size());
    const uint64_t base = round_up(next_base_, kLargeBuffer);
    const int id = new_block(fresh(base, kExpandableRange, segment, small, State::unmapped));
    segments_.push_back({base, kExpandableRange, id, small, true});
    next_base_ = base + kExpandableRange + kLargeBuffer;
  }
  const uint64_t page = small ? kSmallBuffer : kLargeBuffer;
  // The run's first block: the lowest unmapped block with room, or the free block just before it.
  int start = -1;
  for (int b = segments_[segment].head; b >= 0 && start < 0; b = blocks_[b].next) {
    if (blocks_[b].state != State::unmapped) continue;
    int first = b;
    if (const int prev = blocks_[b].prev; prev >= 0 && blocks_[prev].state == State::free) first = prev;
    uint64_t room = 0;
    for (int r = first; r >= 0 && blocks_[r].state != State::allocated && room < size; r = blocks_[r].next)
      room += blocks_[r].size;
    if (room >= size) start = first;
  }
  assert(start >= 0);  // the last unmapped block spans the rest of the range
  // Map, block by block, the pages that cover [first, first + size); the run becomes one free block.
  const uint64_t first = blocks_[start].address, end = first + size;
  int b = start;  // the block holding cursor
  for (uint64_t cursor = first; cursor < end;) {
    while (blocks_[b].address + blocks_[b].size <= cursor) b = blocks_[b].next;
    if (blocks_[b].state != State::unmapped) {
      cursor = blocks_[b].address + blocks_[b].size;
      continue;
    }
    const uint64_t bytes = std::min(blocks_[b].size, round_up(end - blocks_[b].address, page));
    if (!reserve(bytes)) return std::nullopt;  // pages mapped so far stay mapped, as torch's do
    if (bytes < blocks_[b].size) {
      const Block& u = blocks_[b];
      const int rest = new_block(fresh(u.address + bytes, u.size - bytes, segment, small, State::unmapped));
      link_after(b, rest);
    }
    blocks_[b].size = bytes;
    blocks_[b].state = State::free;
    cursor = blocks_[b].address + bytes;
    b = settle_free(b);
  }
  while (blocks_[b].address > first) b = blocks_[b].prev;  // the run, merged: the block holding first
  return b;
}

std::optional<CachingAllocator::Allocation> CachingAllocator::take(int id, uint64_t size, uint64_t requested) {
  index(id, false);
  assert(blocks_[id].state == State::free && blocks_[id].size >= size);
  const uint64_t remaining = blocks_[id].size - size;
  const bool split = blocks_[id].small || expandable_ ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (split) {
    const Block& b = blocks_[id];
    const int rest = new_block(fresh(b.address + size, remaining, b.segment, b.small, State::free));
    link_after(id, rest);
    index(rest, true);
    blocks_[id].size = size;
  }
  Block& b = blocks_[id];
  b.state = State::allocated;
  b.requested = requested;
  stats_.requested += requested;
  stats_.allocated += b.size;
  note_peaks();
  return Allocation{b.address, id};
}

std::optional<CachingAllocator::Allocation> CachingAllocator::allocate(uint64_t bytes) {
  assert(bytes > 0);
  const uint64_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  if (auto hit = best_fit(small, size)) return take(*hit, size, bytes);
  auto grow = [&] { return expandable_ ? map_pages(small, size) : new_segment(small, size); };
  auto got = grow();
  if (!got) {
    ++stats_.cache_flushes;
    release_cached();
    if (auto hit = best_fit(small, size)) return take(*hit, size, bytes);  // pages mapped before the failure
    got = grow();
  }
  if (!got) return std::nullopt;
  return take(*got, size, bytes);
}

void CachingAllocator::free(Allocation allocation) {
  Block& b = blocks_[allocation.block];
  assert(b.address == allocation.address && b.state == State::allocated);
  stats_.requested -= b.requested;
  stats_.allocated -= b.size;
  b.state = State::free;
  b.requested = 0;
  settle_free(allocation.block);
}

void CachingAllocator::release_cached() {
  std::vector<int> free_blocks;
  for (const auto& pool : free_)
    for (const FreeEntry& e : pool) free_blocks.push_back(e.block);
  for (int id : free_blocks) {
    Segment& segment = segments_[blocks_[id].segment];
    if (!expandable_) {
      if (blocks_[id].size != segment.size) continue;  // part of a segment still in use
      index(id, false);
      drop_block(id);
      segment.live = false;
      stats_.reserved -= segment.size;
      continue;
    }
    // Unmap the pages wholly inside the free block.
    const Block whole = blocks_[id];
    const uint64_t page = whole.small ? kSmallBuffer : kLargeBuffer;
    const uint64_t lo = segment.base + round_up(whole.address - segment.base, page);
    const uint64_t hi = segment.base + (whole.address + whole.size - segment.base) / page * page;
    if (hi <= lo) continue;
    index(id, false);
    // The block becomes [lo, hi) unmapped, between what is left free of it below and above.
    Block& middle = blocks_[id];
    middle.address = lo;
    middle.size = hi - lo;
    middle.state = State::unmapped;
    if (lo > whole.address) {
      const int below = new_block(fresh(whole.address, lo - whole.address, whole.segment, whole.small, State::free));
      if (whole.prev >= 0) link_after(whole.prev, below);
      else {
        blocks_[below].next = id;
        segments_[whole.segment].head = below;
      }
      blocks_[id].prev = below;
      index(below, true);
    }
    if (whole.address + whole.size > hi) {
      const int above = new_block(fresh(hi, whole.address + whole.size - hi, whole.segment, whole.small, State::free));
      link_after(id, above);
      index(above, true);
    }
    merge_free(id);
    stats_.reserved -= hi - lo;
  }
}

}  // namespace cpbench
