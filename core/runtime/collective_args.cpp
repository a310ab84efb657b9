// collective_args.cpp — checks of collective arguments against buffer sizes, in elements.
#include "core/runtime/collective_args.h"

#include <algorithm>

#include "core/runtime/communicator.h"  // runtime_error

namespace cpbench {

// Checks that every block [displs[r], displs[r] + counts[r]) lies inside a buffer of `size`
// elements and, for a receive buffer, that no two blocks overlap (MPI forbids it).
Status check_blocks(const std::string& op, const char* what, std::size_t size,
                    std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                    std::size_t n_ranks, bool disjoint) {
  if (counts.size() != n_ranks || displs.size() != n_ranks) {
    return runtime_error(op + ": " + what + " counts and displacements need " +
                         std::to_string(n_ranks) + " entries each, got " +
                         std::to_string(counts.size()) + " and " + std::to_string(displs.size()));
  }
  std::vector<std::pair<std::size_t, std::size_t>> used;
  for (std::size_t r = 0; r < n_ranks; ++r) {
    if (displs[r] > size || counts[r] > size - displs[r]) {
      return runtime_error(op + ": " + what + " block of rank " + std::to_string(r) +
                           " (displacement " + std::to_string(displs[r]) + " + count " +
                           std::to_string(counts[r]) + ") exceeds the buffer of " +
                           std::to_string(size) + " elements");
    }
    if (counts[r] > 0) used.push_back({displs[r], r});
  }
  if (!disjoint) return ok_status();
  std::sort(used.begin(), used.end());
  for (std::size_t i = 1; i < used.size(); ++i) {
    std::size_t prev = used[i - 1].second;
    if (displs[prev] + counts[prev] > used[i].first) {
      return runtime_error(op + ": " + what + " blocks of ranks " + std::to_string(prev) +
                           " and " + std::to_string(used[i].second) + " overlap");
    }
  }
  return ok_status();
}

// Equal blocks in rank order: the counts and displacements of all_to_all and all_gather.
std::pair<std::vector<std::size_t>, std::vector<std::size_t>> equal_blocks(std::size_t n,
                                                                           std::size_t block) {
  std::vector<std::size_t> counts(n, block), displs(n);
  for (std::size_t r = 0; r < n; ++r) displs[r] = r * block;
  return {counts, displs};
}

// Sizes in elements of the caller's type, so a message names what the caller passed.
Status check_all_to_all_sizes(std::size_t n, std::size_t send_size, std::size_t recv_size) {
  if (send_size == recv_size && send_size % n == 0) return ok_status();
  return runtime_error("all_to_all: send (" + std::to_string(send_size) + ") and recv (" +
                       std::to_string(recv_size) + ") need the same size, a multiple of " +
                       std::to_string(n) + " ranks");
}

Status check_all_gather_sizes(std::size_t n, std::size_t send_size, std::size_t recv_size) {
  if (recv_size == n * send_size) return ok_status();
  return runtime_error("all_gather: recv holds " + std::to_string(recv_size) +
                       " elements, needs " + std::to_string(n) + " ranks x " +
                       std::to_string(send_size));
}

}  // namespace cpbench
