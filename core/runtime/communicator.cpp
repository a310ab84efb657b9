// communicator.cpp — validation, byte counting and error wording shared by every Communicator.
#include "core/runtime/communicator.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/runtime/collective_args.h"

namespace cpbench {

std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  const auto now = std::chrono::steady_clock::now();
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::time_point::max() - now);
  return timeout >= room ? std::chrono::steady_clock::time_point::max() : now + std::max(timeout, std::chrono::milliseconds(0));
}

std::size_t element_size_bytes(DataType type) {
  switch (type) {
    case DataType::kByte: return 1;
    case DataType::kFloat32: return sizeof(float);
    case DataType::kFloat64: return sizeof(double);
  }
  return 1;
}

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "max"; }

Error runtime_error(const std::string& message) { return Error{"", "", message}; }

std::string Communicator::describe_peer(int rank) const {
  return "rank " + std::to_string(rank) + " (world rank " + std::to_string(world_rank_of(rank)) +
         ")";
}

std::string Communicator::describe_group() const {
  std::string ranks;
  for (int r = 0; r < size(); ++r) {
    if (r) ranks += ',';
    ranks += std::to_string(world_rank_of(r));
  }
  return std::to_string(size()) + (size() == 1 ? " rank" : " ranks") + " (world ranks " + ranks +
         ")";
}

Status Communicator::check_usable(const std::string& op) const {
  if (healthy()) return ok_status();
  return runtime_error(op + ": communicator unusable after an earlier failure (" + broken_by_ +
                       "); abort the job");
}

Status Communicator::check_outside_group(const std::string& op) const {
  if (group_depth_ == 0) return check_usable(op);
  return runtime_error(op + " inside a group_start/group_end batch: its operations are not issued until "
                            "group_end");
}

Status Communicator::group_start() {
  if (Status s = check_usable("group_start"); !s) return s;
  if (group_depth_++ == 0) return do_group_start();
  return ok_status();
}

Status Communicator::group_end() {
  if (group_depth_ == 0) return runtime_error("group_end without a group_start");
  if (--group_depth_ == 0) return do_group_end();
  return ok_status();
}

Status Communicator::check_peer(const std::string& op, int peer) const {
  if (peer >= 0 && peer < size()) return ok_status();
  return runtime_error(op + ": peer rank " + std::to_string(peer) + " is outside 0.." +
                       std::to_string(size() - 1));
}

namespace {

std::string p2p_label(bool is_send, std::uint64_t bytes, const std::string& peer, int tag) {
  return std::string(is_send ? "send of " : "recv of ") + std::to_string(bytes) + " bytes " +
         (is_send ? "to " : "from ") + peer + ", tag " + std::to_string(tag);
}

}  // namespace

// ---- point to point -----------------------------------------------------------------------------

Expected<Request> Communicator::post(bool is_send, void* data, std::size_t count, DataType type,
                                     int peer, int tag) {
  const std::uint64_t bytes = count * element_size_bytes(type);
  const std::string op = is_send ? "send" : "recv";
  if (Status s = check_usable(op); !s) return s.errors();
  if (Status s = check_peer(op, peer); !s) return s.errors();
  if (tag < 0) return runtime_error(op + ": tag " + std::to_string(tag) + " is negative");
  auto state = is_send ? do_isend(data, count, type, peer, tag)
                       : do_irecv(data, count, type, peer, tag);
  if (!state) {
    return runtime_error(p2p_label(is_send, bytes, describe_peer(peer), tag) + ": " +
                         state.error_str());
  }
  Request request;
  request.state_ = std::move(*state);
  request.peer_ = peer;
  request.tag_ = tag;
  request.is_send_ = is_send;
  request.bytes_ = bytes;
  return request;
}

Status Communicator::finish(Request& request, std::size_t received_bytes) {
  request.state_.reset();
  const bool remote = request.peer_ != rank();
  if (request.is_send_) {
    if (remote) bytes_sent_ += request.bytes_;
    return ok_status();
  }
  if (received_bytes != request.bytes_) {
    return runtime_error(p2p_label(false, request.bytes_, describe_peer(request.peer_),
                                   request.tag_) +
                         ": got a message of " + std::to_string(received_bytes) + " bytes");
  }
  if (remote) bytes_received_ += request.bytes_;
  return ok_status();
}

Expected<Request> Communicator::isend(std::span<const std::byte> data, int dest, int tag) {
  return post(true, const_cast<std::byte*>(data.data()), data.size(), DataType::kByte, dest, tag);
}
Expected<Request> Communicator::isend(std::span<const float> data, int dest, int tag) {
  return post(true, const_cast<float*>(data.data()), data.size(), DataType::kFloat32, dest, tag);
}
Expected<Request> Communicator::irecv(std::span<std::byte> data, int source, int tag) {
  return post(false, data.data(), data.size(), DataType::kByte, source, tag);
}
Expected<Request> Communicator::irecv(std::span<float> data, int source, int tag) {
  return post(false, data.data(), data.size(), DataType::kFloat32, source, tag);
}

Status Communicator::wait(Request& request) { return wait(request, timeout_); }

Status Communicator::wait(Request& request, std::chrono::milliseconds timeout) {
  if (!request.pending()) return ok_status();
  if (in_group()) return check_outside_group("wait");
  const std::string label =
      p2p_label(request.is_send_, request.bytes_, describe_peer(request.peer_), request.tag_);
  bool withdrawn = false;
  std::size_t received_bytes = 0;
  Status s = do_wait(*request.state_, timeout, withdrawn, received_bytes);
  if (!s) {
    request.state_.reset();
    Error e = runtime_error(label + ": " + s.error_str());
    if (!withdrawn) broken_by_ = e.message;
    return e;
  }
  return finish(request, received_bytes);
}

Status Communicator::wait_all(std::span<Request> requests) {
  // One deadline for the whole set: waiting for each request with the full timeout would let a
  // stopped peer hold this rank for (number of requests) x timeout before it reports. After the
  // first failure the rest are polled once (a receive withdrawn, a send abandoned), not waited for.
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Status first = ok_status();
  for (Request& r : requests) {
    std::chrono::milliseconds left{0};
    if (first) {
      const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
      left = timeout_ > spent ? timeout_ - spent : std::chrono::milliseconds(0);
    }
    Status s = wait(r, left);
    if (!s && first) first = s;
  }
  return first;
}

Expected<bool> Communicator::test(Request& request) {
  if (!request.pending()) return true;
  if (in_group()) return check_outside_group("test").errors();
  std::size_t received_bytes = 0;
  Expected<bool> done = do_test(*request.state_, received_bytes);
  if (!done) {
    Error e = runtime_error(p2p_label(request.is_send_, request.bytes_,
                                      describe_peer(request.peer_), request.tag_) +
                            ": " + done.error_str());
    request.state_.reset();
    broken_by_ = e.message;
    return e;
  }
  if (!*done) return false;
  if (Status s = finish(request, received_bytes); !s) return s.errors();
  return true;
}

Status Communicator::send(std::span<const std::byte> data, int dest, int tag) {
  auto r = isend(data, dest, tag);
  return r ? wait(*r) : Status(r.errors());
}
Status Communicator::send(std::span<const float> data, int dest, int tag) {
  auto r = isend(data, dest, tag);
  return r ? wait(*r) : Status(r.errors());
}
Status Communicator::recv(std::span<std::byte> data, int source, int tag) {
  auto r = irecv(data, source, tag);
  return r ? wait(*r) : Status(r.errors());
}
Status Communicator::recv(std::span<float> data, int source, int tag) {
  auto r = irecv(data, source, tag);
  return r ? wait(*r) : Status(r.errors());
}

// ---- collectives --------------------------------------------------------------------------------

Status Communicator::collective_result(Status status, const std::string& op, std::uint64_t sent,
                                       std::uint64_t received) {
  if (!status) {
    // A collective cannot be withdrawn: whatever the cause, the group is out of step.
    Error e = runtime_error(op + " over " + describe_group() + ": " + status.error_str());
    broken_by_ = e.message;
    return e;
  }
  bytes_sent_ += sent;
  bytes_received_ += received;
  return ok_status();
}

Status Communicator::all_to_allv_typed(const void* send, std::size_t send_size,
                                       std::span<const std::size_t> send_counts,
                                       std::span<const std::size_t> send_displs, void* recv,
                                       std::size_t recv_size,
                                       std::span<const std::size_t> recv_counts,
                                       std::span<const std::size_t> recv_displs, DataType type) {
  const std::string op = "all_to_allv";
  const std::size_t n = static_cast<std::size_t>(size());
  if (Status s = check_outside_group(op); !s) return s;
  if (Status s = check_blocks(op, "send", send_size, send_counts, send_displs, n, false); !s) {
    return s;
  }
  if (Status s = check_blocks(op, "recv", recv_size, recv_counts, recv_displs, n, true); !s) {
    return s;
  }
  std::uint64_t sent = 0, received = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if (static_cast<int>(r) == rank()) continue;
    sent += send_counts[r];
    received += recv_counts[r];
  }
  const std::size_t es = element_size_bytes(type);
  return collective_result(do_all_to_allv(send, send_counts.data(), send_displs.data(), recv,
                                          recv_counts.data(), recv_displs.data(), type),
                           op, sent * es, received * es);
}

Status Communicator::all_to_allv(std::span<const std::byte> send,
                                 std::span<const std::size_t> send_counts,
                                 std::span<const std::size_t> send_displs,
                                 std::span<std::byte> recv,
                                 std::span<const std::size_t> recv_counts,
                                 std::span<const std::size_t> recv_displs) {
  return all_to_allv_typed(send.data(), send.size(), send_counts, send_displs, recv.data(),
                           recv.size(), recv_counts, recv_displs, DataType::kByte);
}

Status Communicator::all_to_allv(std::span<const float> send,
                                 std::span<const std::size_t> send_counts,
                                 std::span<const std::size_t> send_displs, std::span<float> recv,
                                 std::span<const std::size_t> recv_counts,
                                 std::span<const std::size_t> recv_displs) {
  return all_to_allv_typed(send.data(), send.size(), send_counts, send_displs, recv.data(),
                           recv.size(), recv_counts, recv_displs, DataType::kFloat32);
}


Status Communicator::all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) {
  const std::size_t n = static_cast<std::size_t>(size());
  if (Status s = check_all_to_all_sizes(n, send.size(), recv.size()); !s) return s;
  auto [counts, displs] = equal_blocks(n, send.size() / n);
  return all_to_allv(send, counts, displs, recv, counts, displs);
}

Status Communicator::all_to_all(std::span<const float> send, std::span<float> recv) {
  const std::size_t n = static_cast<std::size_t>(size());
  if (Status s = check_all_to_all_sizes(n, send.size(), recv.size()); !s) return s;
  auto [counts, displs] = equal_blocks(n, send.size() / n);
  return all_to_allv(send, counts, displs, recv, counts, displs);
}

Status Communicator::all_gatherv_typed(const void* send, std::size_t send_count, void* recv,
                                       std::size_t recv_size,
                                       std::span<const std::size_t> recv_counts,
                                       std::span<const std::size_t> recv_displs, DataType type) {
  const std::string op = "all_gatherv";
  const std::size_t n = static_cast<std::size_t>(size());
  if (Status s = check_outside_group(op); !s) return s;
  if (Status s = check_blocks(op, "recv", recv_size, recv_counts, recv_displs, n, true); !s) {
    return s;
  }
  if (recv_counts[rank()] != send_count) {
    return runtime_error(op + ": this rank sends " + std::to_string(send_count) +
                         " elements but recv_counts[" + std::to_string(rank()) + "] is " +
                         std::to_string(recv_counts[rank()]));
  }
  std::uint64_t received = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if (static_cast<int>(r) != rank()) received += recv_counts[r];
  }
  const std::size_t es = element_size_bytes(type);
  return collective_result(
      do_all_gatherv(send, send_count, recv, recv_counts.data(), recv_displs.data(), type), op,
      send_count * (n - 1) * es, received * es);
}

Status Communicator::all_gatherv(std::span<const std::byte> send, std::span<std::byte> recv,
                                 std::span<const std::size_t> recv_counts,
                                 std::span<const std::size_t> recv_displs) {
  return all_gatherv_typed(send.data(), send.size(), recv.data(), recv.size(), recv_counts,
                           recv_displs, DataType::kByte);
}

Status Communicator::all_gatherv(std::span<const float> send, std::span<float> recv,
                                 std::span<const std::size_t> recv_counts,
                                 std::span<const std::size_t> recv_displs) {
  return all_gatherv_typed(send.data(), send.size(), recv.data(), recv.size(), recv_counts,
                           recv_displs, DataType::kFloat32);
}

Status Communicator::all_gather(std::span<const std::byte> send, std::span<std::byte> recv) {
  const std::size_t n = static_cast<std::size_t>(size());
  if (Status s = check_all_gather_sizes(n, send.size(), recv.size()); !s) return s;
  auto [counts, displs] = equal_blocks(n, send.size());
  return all_gatherv(send, recv, counts, displs);
}

Status Communicator::all_gather(std::span<const float> send, std::span<float> recv) {
  const std::size_t n = static_cast<std::size_t>(size());
  if (Status s = check_all_gather_sizes(n, send.size(), recv.size()); !s) return s;
  auto [counts, displs] = equal_blocks(n, send.size());
  return all_gatherv(send, recv, counts, displs);
}

Status Communicator::reduce_scatter(std::span<const float> send, std::span<float> recv,
                                    ReduceOp op) {
  const std::string name = std::string("reduce_scatter(") + reduce_op_name(op) + ")";
  const std::size_t n = static_cast<std::size_t>(size());
  if (Status s = check_outside_group(name); !s) return s;
  if (send.size() != n * recv.size()) {
    return runtime_error(name + ": send holds " + std::to_string(send.size()) +
                         " elements, needs " + std::to_string(n) + " ranks x " +
                         std::to_string(recv.size()));
  }
  const std::uint64_t moved = recv.size() * (n - 1) * sizeof(float);
  return collective_result(
      do_reduce_scatter(send.data(), recv.data(), recv.size(), DataType::kFloat32, op), name,
      moved, moved);
}

Status Communicator::all_reduce_typed(void* data, std::size_t count, DataType type, ReduceOp op) {
  const std::string name = std::string("all_reduce(") + reduce_op_name(op) + ")";
  if (Status s = check_outside_group(name); !s) return s;
  // Ring volume: reduce_scatter then all_gather over blocks of count/n (the first count % n
  // blocks one element longer). Both phases move (count - mine) + (n - 1) * mine elements.
  const std::size_t n = static_cast<std::size_t>(size());
  const std::size_t r = static_cast<std::size_t>(rank());
  const std::size_t mine = count / n + (r < count % n ? 1 : 0);
  const std::uint64_t moved = (count - mine + (n - 1) * mine) * element_size_bytes(type);
  return collective_result(do_all_reduce(data, count, type, op), name, moved, moved);
}

Status Communicator::all_reduce(std::span<float> data, ReduceOp op) {
  return all_reduce_typed(data.data(), data.size(), DataType::kFloat32, op);
}

Status Communicator::all_reduce(std::span<double> data, ReduceOp op) {
  return all_reduce_typed(data.data(), data.size(), DataType::kFloat64, op);
}

Status Communicator::barrier() {
  if (Status s = check_outside_group("barrier"); !s) return s;
  return collective_result(do_barrier(), "barrier", 0, 0);
}

Expected<std::unique_ptr<Communicator>> Communicator::split(int color, int key) {
  if (Status s = check_outside_group("split"); !s) return s.errors();
  auto sub = do_split(color, key);
  if (!sub) {
    return collective_result(Status(sub.errors()), "split(color " + std::to_string(color) + ")",
                             0, 0)
        .errors();
  }
  if (*sub) (*sub)->set_timeout(timeout_);
  return sub;
}

}  // namespace cpbench
