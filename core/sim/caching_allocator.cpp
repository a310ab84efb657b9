// caching_allocator.cpp — the allocator's pools, segments and blocks (see the header for the rules
// and their source). A segment is tiled by its blocks (allocated, free, or in an expandable
// segment unmapped), ordered by address; free blocks are also indexed by (size, address) per pool,
// so best fit is one lower_bound, as torch's BlockPool set is.
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

void CachingAllocator::index(Blocks::iterator block, bool insert) {
  if (block->second.state != State::free) return;
  const auto key = std::make_pair(block->second.size, block->first);
  auto& pool = free_[block->second.small ? 1 : 0];
  if (insert) {
    pool.insert(key);
  } else {
    pool.erase(key);
  }
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

// Merges `block` with its neighbours in the same segment and state (free with free, unmapped
// with unmapped). REQUIRES: the block and its free neighbours are out of the free index.
CachingAllocator::Blocks::iterator CachingAllocator::merge_free(Blocks::iterator block) {
  auto joins = [&](Blocks::iterator other) {
    return other->second.segment == block->second.segment && other->second.state == block->second.state;
  };
  if (block != blocks_.begin()) {
    if (auto prev = std::prev(block); joins(prev)) {
      prev->second.size += block->second.size;
      blocks_.erase(block);
      block = prev;
    }
  }
  if (auto next = std::next(block); next != blocks_.end() && joins(next)) {
    block->second.size += next->second.size;
    blocks_.erase(next);
  }
  return block;
}

// A block that just became free (not indexed): merged with its free neighbours, then indexed.
CachingAllocator::Blocks::iterator CachingAllocator::settle_free(Blocks::iterator block) {
  for (auto neighbour : {block == blocks_.begin() ? blocks_.end() : std::prev(block), std::next(block)})
    if (neighbour != blocks_.end() && neighbour->second.segment == block->second.segment) index(neighbour, false);
  block = merge_free(block);
  index(block, true);
  return block;
}

std::optional<CachingAllocator::Blocks::iterator> CachingAllocator::best_fit(bool small, uint64_t size) {
  auto& pool = free_[small ? 1 : 0];
  auto it = pool.lower_bound({size, 0});
  if (it == pool.end()) return std::nullopt;
  if (expandable_) {
    // Prefer a block that is not the segment's growable tail (its next block unmapped): the tail
    // is kept for requests nothing else fits (torch's get_free_block, expandable branch).
    for (auto candidate = it; candidate != pool.end(); ++candidate) {
      auto block = blocks_.find(candidate->second);
      auto next = std::next(block);
      if (next == blocks_.end() || next->second.segment != block->second.segment || next->second.state != State::unmapped)
        return block;
    }
  }
  return blocks_.find(it->second);
}

std::optional<CachingAllocator::Blocks::iterator> CachingAllocator::new_segment(bool small, uint64_t size) {
  const uint64_t bytes = segment_size(size);
  if (!reserve(bytes)) return std::nullopt;
  const int id = static_cast<int>(segments_.size());
  segments_.push_back({next_base_, bytes, small, true});
  auto block = blocks_.emplace(next_base_, Block{bytes, id, small, State::free, 0}).first;
  next_base_ += bytes + kLargeBuffer;  // a gap: segments are never neighbours
  index(block, true);
  return block;
}

// Expandable segments: map pages at the lowest unmapped address whose run of free and unmapped
// blocks (from the free block before it, if any) holds `size`, then merge the run into one free
// block (torch's find_expandable_block and try_allocate_expandable_block).
std::optional<CachingAllocator::Blocks::iterator> CachingAllocator::map_pages(bool small, uint64_t size) {
  int& id = expandable_segment_[small ? 1 : 0];
  if (id < 0) {
    id = static_cast<int>(segments_.size());
    const uint64_t base = round_up(next_base_, kLargeBuffer);
    segments_.push_back({base, kExpandableRange, small, true});
    blocks_.emplace(base, Block{kExpandableRange, id, small, State::unmapped, 0});
    next_base_ = base + kExpandableRange + kLargeBuffer;
  }
  const uint64_t page = small ? kSmallBuffer : kLargeBuffer;
  const Segment& segment = segments_[id];
  auto in_segment = [&](Blocks::iterator b) { return b != blocks_.end() && b->second.segment == id; };
  // The run's first block: the lowest unmapped block with room, or the free block just before it.
  auto start = blocks_.end();
  for (auto b = blocks_.lower_bound(segment.base); in_segment(b) && start == blocks_.end(); ++b) {
    if (b->second.state != State::unmapped) continue;
    auto first = b;
    if (b != blocks_.begin() && in_segment(std::prev(b)) && std::prev(b)->second.state == State::free) first = std::prev(b);
    uint64_t room = 0;
    for (auto r = first; in_segment(r) && r->second.state != State::allocated && room < size; ++r) room += r->second.size;
    if (room >= size) start = first;
  }
  assert(start != blocks_.end());  // the last unmapped block spans the rest of the range
  // Map, block by block, the pages that cover [start, start + size); the run becomes one free block.
  const uint64_t first = start->first, end = first + size;
  for (uint64_t cursor = first; cursor < end;) {
    auto b = std::prev(blocks_.upper_bound(cursor));  // the block holding cursor; the run's start at cursor
    if (b->second.state != State::unmapped) {
      cursor = b->first + b->second.size;
      continue;
    }
    const uint64_t bytes = std::min(b->second.size, round_up(end - b->first, page));
    if (!reserve(bytes)) return std::nullopt;  // pages mapped so far stay mapped, as torch's do
    if (bytes < b->second.size) blocks_.emplace(b->first + bytes, Block{b->second.size - bytes, id, small, State::unmapped, 0});
    b->second = Block{bytes, id, small, State::free, 0};
    cursor = b->first + bytes;
    settle_free(b);
  }
  return std::prev(blocks_.upper_bound(first));
}

std::optional<uint64_t> CachingAllocator::take(Blocks::iterator block, uint64_t size, uint64_t requested) {
  index(block, false);
  Block& b = block->second;
  assert(b.state == State::free && b.size >= size);
  const uint64_t remaining = b.size - size;
  const bool split = b.small || expandable_ ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (split) {
    auto rest = blocks_.emplace(block->first + size, Block{remaining, b.segment, b.small, State::free, 0}).first;
    index(rest, true);
    b.size = size;
  }
  b.state = State::allocated;
  b.requested = requested;
  stats_.requested += requested;
  stats_.allocated += b.size;
  note_peaks();
  return block->first;
}

std::optional<uint64_t> CachingAllocator::allocate(uint64_t bytes) {
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

void CachingAllocator::free(uint64_t address) {
  auto block = blocks_.find(address);
  assert(block != blocks_.end() && block->second.state == State::allocated);
  stats_.requested -= block->second.requested;
  stats_.allocated -= block->second.size;
  block->second.state = State::free;
  block->second.requested = 0;
  settle_free(block);
}

void CachingAllocator::release_cached() {
  std::vector<uint64_t> free_blocks;
  for (const auto& pool : free_)
    for (const auto& [size, address] : pool) free_blocks.push_back(address);
  for (uint64_t address : free_blocks) {
    auto block = blocks_.find(address);
    Segment& segment = segments_[block->second.segment];
    if (!expandable_) {
      if (block->second.size != segment.size) continue;  // part of a segment still in use
      index(block, false);
      blocks_.erase(block);
      segment.live = false;
      stats_.reserved -= segment.size;
      continue;
    }
    // Unmap the pages wholly inside the free block.
    const uint64_t page = block->second.small ? kSmallBuffer : kLargeBuffer;
    const uint64_t lo = segment.base + round_up(address - segment.base, page);
    const uint64_t hi = segment.base + (address + block->second.size - segment.base) / page * page;
    if (hi <= lo) continue;
    index(block, false);
    const Block whole = block->second;
    blocks_.erase(block);
    if (lo > address) index(blocks_.emplace(address, Block{lo - address, whole.segment, whole.small, State::free, 0}).first, true);
    if (address + whole.size > hi)
      index(blocks_.emplace(hi, Block{address + whole.size - hi, whole.segment, whole.small, State::free, 0}).first, true);
    merge_free(blocks_.emplace(lo, Block{hi - lo, whole.segment, whole.small, State::unmapped, 0}).first);
    stats_.reserved -= hi - lo;
  }
}

}  // namespace cpbench
