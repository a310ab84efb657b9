// copy_receive.h — the buffer of a posted receive that a communicator fills by copying the
// sender's bytes (one rank: SelfCommunicator; thread ranks: ThreadCommunicator), and how its
// completion reads: the bytes that arrived, or an error when the message was longer than the buffer.
// Requires: the caller serialises deliver() and result() on one receive.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "core/runtime/communicator.h"

namespace cpbench {

struct CopyReceive {
  std::byte* data = nullptr;
  std::size_t capacity_bytes = 0;
  bool done = false, truncated = false;
  std::size_t received_bytes = 0;

  void deliver(const std::byte* payload, std::size_t bytes) {
    truncated = bytes > capacity_bytes;
    received_bytes = std::min(bytes, capacity_bytes);
    if (received_bytes) std::memcpy(data, payload, received_bytes);
    done = true;
  }
  // Not done yet: false. Done: true with `received` set, or the truncation error.
  Expected<bool> result(std::size_t& received) const {
    if (!done) return false;
    if (truncated)
      return runtime_error("message longer than the " + std::to_string(capacity_bytes) + "-byte receive buffer");
    received = received_bytes;
    return true;
  }
};

}  // namespace cpbench
