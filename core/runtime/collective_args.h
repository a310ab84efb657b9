// collective_args.h — checks of collective arguments: per-rank blocks inside their buffers, receive
// blocks disjoint, equal-block sizes; and the counts/displacements of equal blocks.
// Requires: nothing. Communicator runs these before any implementation sees the call, so MPI,
// the size-1 communicator and NCCL reject bad arguments with the same message.
// Note: sizes and counts are in elements of the caller's type; messages name the offending rank.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/common/expected.h"

namespace cpbench {

// Every block [displs[r], displs[r] + counts[r]) must lie in a buffer of `size` elements, counts
// and displs need n_ranks entries, and with `disjoint` no two non-empty blocks may overlap (MPI
// forbids overlapping receive blocks). `what` is "send" or "recv".
Status check_blocks(const std::string& op, const char* what, std::size_t size,
                    std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                    std::size_t n_ranks, bool disjoint);

// n equal blocks of `block` elements in rank order: {counts, displacements}.
std::pair<std::vector<std::size_t>, std::vector<std::size_t>> equal_blocks(std::size_t n,
                                                                           std::size_t block);

// all_to_all: send and recv of one size, a multiple of n.
Status check_all_to_all_sizes(std::size_t n, std::size_t send_size, std::size_t recv_size);
// all_gather: recv holds n blocks of send's size.
Status check_all_gather_sizes(std::size_t n, std::size_t send_size, std::size_t recv_size);

}  // namespace cpbench
