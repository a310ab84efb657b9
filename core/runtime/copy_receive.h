// copy_receive.h — the buffer of a posted receive that a communicator fills by copying the
// sender's bytes (one rank: SelfCommunicator; thread ranks: ThreadCommunicator), and how its
// completion reads: the bytes that arrived, or an error when the message was longer than the buffer
// or the copy failed. MemoryCopy: how such a communicator reads and writes its callers' buffers.
// Requires: the caller serialises deliver() and result() on one receive.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <string>

#include "core/runtime/communicator.h"

namespace cpbench {

// Copies `bytes` from `src` to `dst`, either of them a caller's buffer: the memory a backend's
// TensorOps made, which the host may not touch directly (a GPU's: the CUDA backend's copy waits
// for the device's queued work, then cudaMemcpy). Empty: the buffers are host memory (memcpy).
using MemoryCopy = std::function<Status(void* dst, const void* src, std::size_t bytes)>;

// dst ← src through `copy`, or memcpy when it is empty.
inline Status copy_memory(const MemoryCopy& copy, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return ok_status();
  if (copy) return copy(dst, src, bytes);
  std::memcpy(dst, src, bytes);
  return ok_status();
}

struct CopyReceive {
  std::byte* data = nullptr;
  std::size_t capacity_bytes = 0;
  bool done = false, truncated = false;
  std::size_t received_bytes = 0;
  std::string copy_error;  // the MemoryCopy's error, when it failed

  void deliver(const std::byte* payload, std::size_t bytes, const MemoryCopy& copy = {}) {
    truncated = bytes > capacity_bytes;
    received_bytes = std::min(bytes, capacity_bytes);
    if (Status s = copy_memory(copy, data, payload, received_bytes); !s) copy_error = s.error_str();
    done = true;
  }
  // Not done yet: false. Done: true with `received` set, or the truncation or copy error.
  Expected<bool> result(std::size_t& received) const {
    if (!done) return false;
    if (truncated)
      return runtime_error("message longer than the " + std::to_string(capacity_bytes) + "-byte receive buffer");
    if (!copy_error.empty()) return runtime_error("copying the message into the receive buffer: " + copy_error);
    received = received_bytes;
    return true;
  }
};

}  // namespace cpbench
