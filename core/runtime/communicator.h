// communicator.h — the abstract Communicator: point-to-point (blocking and non-blocking),
// all_to_all(v), all_gather(v), reduce_scatter, all_reduce, barrier and split.
// Requires: an implementation (MpiCommunicator, SelfCommunicator, later NCCL) that moves bytes;
// this base validates every call, counts payload bytes and turns waits into deadline polls.
// Note: every method returns Status; an error names the operation and the peer rank. Counts and
// displacements are in elements of the span's type, as in MPI.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/common/expected.h"

namespace cpbench {

enum class DataType { kByte, kFloat32, kFloat64 };
enum class ReduceOp { kSum, kMax };

std::size_t element_size_bytes(DataType type);
// now + timeout on the steady clock, saturated (a timeout of milliseconds::max() means no
// deadline; a negative one, now): the deadline of a wait every implementation polls against.
std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout);
const char* reduce_op_name(ReduceOp op);

// What an implementation keeps for one pending non-blocking operation (an MPI_Request, say).
class RequestState {
 public:
  virtual ~RequestState() = default;
};

// Handle of a non-blocking send or receive. Move-only; it must be completed with wait() (or a
// test() that returns true) before its buffer goes away, as with MPI_Request.
class Request {
 public:
  Request() = default;
  Request(Request&&) noexcept = default;
  Request& operator=(Request&&) noexcept = default;

  bool pending() const { return state_ != nullptr; }
  int peer() const { return peer_; }          // rank in the issuing communicator
  int tag() const { return tag_; }
  bool is_send() const { return is_send_; }
  std::uint64_t bytes() const { return bytes_; }  // payload posted (a receive: its capacity)

 private:
  friend class Communicator;
  std::unique_ptr<RequestState> state_;
  int peer_ = -1;
  int tag_ = 0;
  bool is_send_ = false;
  std::uint64_t bytes_ = 0;
};

class Communicator {
 public:
  // Generous by default: a wait must outlast the slowest kernel a peer runs before it posts the
  // matching call; tests and the executor shorten it with set_timeout().
  static constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::minutes(5)};

  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The rank of `rank` in the world (MPI_COMM_WORLD): error messages name both.
  virtual int world_rank_of(int rank) const = 0;
  // True when posted messages move only while this rank is inside the library (MPI's rendezvous
  // protocol): a caller that computes while transfers are pending must test them now and then.
  // Thread ranks deliver at the send, NCCL on its own stream: they need no host progress.
  virtual bool needs_host_progress() const { return false; }

  // Deadline of every blocking call (waits, collectives). A wait that passes it returns an error
  // naming the peer it waited for; see healthy() for what is left usable afterwards.
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // False after a send or collective timed out: that operation cannot be withdrawn, so every later
  // call returns an error and the caller should abort the job (MpiCommunicator::abort_job).
  // Until then the abandoned operation may still read or write its buffers: keep them alive.
  bool healthy() const { return broken_by_.empty(); }

  // ---- point to point -------------------------------------------------------------------------
  Status send(std::span<const std::byte> data, int dest, int tag);
  Status send(std::span<const float> data, int dest, int tag);
  // A receive must get exactly data.size() elements: a shorter or longer message is an error.
  Status recv(std::span<std::byte> data, int source, int tag);
  Status recv(std::span<float> data, int source, int tag);
  Expected<Request> isend(std::span<const std::byte> data, int dest, int tag);
  Expected<Request> isend(std::span<const float> data, int dest, int tag);
  Expected<Request> irecv(std::span<std::byte> data, int source, int tag);
  Expected<Request> irecv(std::span<float> data, int source, int tag);
  Status wait(Request& request);
  Status wait(Request& request, std::chrono::milliseconds timeout);
  // Waits for all; returns the first error (the other requests are still completed or cancelled).
  Status wait_all(std::span<Request> requests);
  // True when the operation finished (the request is then no longer pending).
  Expected<bool> test(Request& request);

  // ---- collectives ----------------------------------------------------------------------------
  // all_to_all: send and recv hold size() equal blocks; block r of send goes to rank r.
  Status all_to_all(std::span<const std::byte> send, std::span<std::byte> recv);
  Status all_to_all(std::span<const float> send, std::span<float> recv);
  // all_to_allv: counts and displacements per rank (size() entries each); zeros are allowed.
  Status all_to_allv(std::span<const std::byte> send, std::span<const std::size_t> send_counts,
                     std::span<const std::size_t> send_displs, std::span<std::byte> recv,
                     std::span<const std::size_t> recv_counts,
                     std::span<const std::size_t> recv_displs);
  Status all_to_allv(std::span<const float> send, std::span<const std::size_t> send_counts,
                     std::span<const std::size_t> send_displs, std::span<float> recv,
                     std::span<const std::size_t> recv_counts,
                     std::span<const std::size_t> recv_displs);
  // all_gather: recv = the size() ranks' send blocks in rank order.
  Status all_gather(std::span<const std::byte> send, std::span<std::byte> recv);
  Status all_gather(std::span<const float> send, std::span<float> recv);
  // all_gatherv: rank r's block (recv_counts[r] elements) lands at recv_displs[r].
  Status all_gatherv(std::span<const std::byte> send, std::span<std::byte> recv,
                     std::span<const std::size_t> recv_counts,
                     std::span<const std::size_t> recv_displs);
  Status all_gatherv(std::span<const float> send, std::span<float> recv,
                     std::span<const std::size_t> recv_counts,
                     std::span<const std::size_t> recv_displs);
  // reduce_scatter: send holds size() blocks of recv.size(); rank r gets the reduction of block r.
  Status reduce_scatter(std::span<const float> send, std::span<float> recv,
                        ReduceOp op = ReduceOp::kSum);
  // all_reduce in place.
  Status all_reduce(std::span<float> data, ReduceOp op = ReduceOp::kSum);
  Status all_reduce(std::span<double> data, ReduceOp op = ReduceOp::kSum);
  Status barrier();

  // ---- batches --------------------------------------------------------------------------------
  // Brackets a batch of non-blocking sends and receives that the implementation may issue as one
  // (NCCL: ncclGroupStart/End, without which one rank's sends and receives to several peers can
  // deadlock); MPI and thread ranks issue each at once, so theirs are no-ops. Brackets nest; a wait,
  // a test or a collective inside one is an error (its operations have not been issued yet), as
  // is a group_end without its group_start.
  Status group_start();
  Status group_end();
  bool in_group() const { return group_depth_ > 0; }

  // Ranks with the same color form one sub-communicator, ordered by (key, rank). A negative color
  // joins none and gets a null pointer. Collective over this communicator.
  Expected<std::unique_ptr<Communicator>> split(int color, int key);

  // ---- payload byte counters ------------------------------------------------------------------
  // Bytes of payload that left this rank for another rank, and that arrived from another rank:
  // what a Plan predicts, not what the library's algorithm moves. Self-blocks are not counted.
  // all_reduce counts the bandwidth-optimal ring (reduce_scatter + all_gather of count/size()
  // blocks), i.e. 2(n-1)/n of the buffer, the volume core/cost/comm.cpp prices. barrier and split
  // count nothing. Completed operations only.
  std::uint64_t bytes_sent() const { return bytes_sent_; }
  std::uint64_t bytes_received() const { return bytes_received_; }
  void reset_counters() { bytes_sent_ = bytes_received_ = 0; }

 protected:
  Communicator() = default;

  // What an implementation provides. Arguments are already validated (peers in range, counts
  // within buffers); counts are in elements of `type`.
  virtual Expected<std::unique_ptr<RequestState>> do_isend(const void* data, std::size_t count,
                                                           DataType type, int dest, int tag) = 0;
  virtual Expected<std::unique_ptr<RequestState>> do_irecv(void* data, std::size_t count,
                                                           DataType type, int source, int tag) = 0;
  // Polls until done or `timeout`. On timeout a receive is withdrawn (cancelled) when possible and
  // the call reports `withdrawn`; otherwise the base marks the communicator broken. A completed
  // receive reports the bytes that arrived in `received_bytes`.
  virtual Status do_wait(RequestState& state, std::chrono::milliseconds timeout, bool& withdrawn,
                         std::size_t& received_bytes) = 0;
  virtual Expected<bool> do_test(RequestState& state, std::size_t& received_bytes) = 0;
  virtual Status do_all_to_allv(const void* send, const std::size_t* send_counts,
                                const std::size_t* send_displs, void* recv,
                                const std::size_t* recv_counts, const std::size_t* recv_displs,
                                DataType type) = 0;
  virtual Status do_all_gatherv(const void* send, std::size_t send_count, void* recv,
                                const std::size_t* recv_counts, const std::size_t* recv_displs,
                                DataType type) = 0;
  virtual Status do_reduce_scatter(const void* send, void* recv, std::size_t block_count,
                                   DataType type, ReduceOp op) = 0;
  virtual Status do_all_reduce(void* data, std::size_t count, DataType type, ReduceOp op) = 0;
  virtual Status do_barrier() = 0;
  virtual Expected<std::unique_ptr<Communicator>> do_split(int color, int key) = 0;
  // Called at the outermost group_start and group_end only.
  virtual Status do_group_start() { return ok_status(); }
  virtual Status do_group_end() { return ok_status(); }

  // "rank 1 (world rank 5)": how every error names a peer.
  std::string describe_peer(int rank) const;
  // "4 ranks (world ranks 0,1,2,3)": how a collective's error names its group.
  std::string describe_group() const;

 private:
  Status check_usable(const std::string& op) const;
  // check_usable, and an error inside a group_start/group_end batch.
  Status check_outside_group(const std::string& op) const;
  Status check_peer(const std::string& op, int peer) const;
  Expected<Request> post(bool is_send, void* data, std::size_t count, DataType type, int peer,
                         int tag);
  Status finish(Request& request, std::size_t received_bytes);
  Status collective_result(Status status, const std::string& op, std::uint64_t sent,
                           std::uint64_t received);
  Status all_to_allv_typed(const void* send, std::size_t send_size,
                           std::span<const std::size_t> send_counts,
                           std::span<const std::size_t> send_displs, void* recv,
                           std::size_t recv_size, std::span<const std::size_t> recv_counts,
                           std::span<const std::size_t> recv_displs, DataType type);
  Status all_gatherv_typed(const void* send, std::size_t send_count, void* recv,
                           std::size_t recv_size, std::span<const std::size_t> recv_counts,
                           std::span<const std::size_t> recv_displs, DataType type);
  Status all_reduce_typed(void* data, std::size_t count, DataType type, ReduceOp op);

  std::chrono::milliseconds timeout_ = kDefaultTimeout;
  int group_depth_ = 0;
  std::string broken_by_;  // the error that left the communicator unusable; empty when healthy
  std::uint64_t bytes_sent_ = 0;
  std::uint64_t bytes_received_ = 0;
};

// An error from the runtime: no file or pointer, the message says operation and peer.
Error runtime_error(const std::string& message);

}  // namespace cpbench
