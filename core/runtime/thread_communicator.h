// thread_communicator.h — a Communicator whose ranks are threads of one process: a plan of n ranks
// runs in one process with no launcher (ctest without mpirun, one GPU driving every rank of a plan).
// Requires: one thread per rank; ThreadCommunicator::group(n) makes the n communicators, each used
// by one thread only. run_thread_ranks() does both.
// Note: MPI's semantics where the executor relies on them: messages match per (source, destination,
// tag) in posting order (MPI 4.1, sec. 3.5, non-overtaking); a send is buffered, so it completes at
// once (MPI allows it: a standard send may buffer); a receive waits with the deadline and is
// withdrawn when it passes. Collectives run over the same queues in a context user tags cannot
// reach, reductions in rank order, so every rank gets the same bits. Byte counters are the base
// class's, so a plan moves exactly the bytes it does on MPI. The callers' buffers are read and
// written only through the group's MemoryCopy (copy_receive.h): host memory by default, one GPU's
// memory shared by every rank with the CUDA backend's copy (reductions run on host copies).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "core/runtime/communicator.h"
#include "core/runtime/copy_receive.h"

namespace cpbench {

class ThreadFabric;  // the queues the ranks of one group share

class ThreadCommunicator final : public Communicator {
 public:
  // The n ranks of a new group; communicator r is rank r (world rank r). `copy` reads and writes
  // the buffers the ranks pass (empty: host memory); groups split from it use it too.
  static std::vector<std::unique_ptr<ThreadCommunicator>> group(int n, MemoryCopy copy = {});
  ~ThreadCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(world_ranks_.size()); }
  int world_rank_of(int rank) const override;

  struct PendingRecv;  // a posted receive no send has matched yet

 protected:
  Expected<std::unique_ptr<RequestState>> do_isend(const void* data, std::size_t count,
                                                   DataType type, int dest, int tag) override;
  Expected<std::unique_ptr<RequestState>> do_irecv(void* data, std::size_t count, DataType type,
                                                   int source, int tag) override;
  Status do_wait(RequestState& state, std::chrono::milliseconds timeout, bool& withdrawn,
                 std::size_t& received_bytes) override;
  Expected<bool> do_test(RequestState& state, std::size_t& received_bytes) override;
  Status do_all_to_allv(const void* send, const std::size_t* send_counts,
                        const std::size_t* send_displs, void* recv, const std::size_t* recv_counts,
                        const std::size_t* recv_displs, DataType type) override;
  Status do_all_gatherv(const void* send, std::size_t send_count, void* recv,
                        const std::size_t* recv_counts, const std::size_t* recv_displs,
                        DataType type) override;
  Status do_reduce_scatter(const void* send, void* recv, std::size_t block_count, DataType type,
                           ReduceOp op) override;
  Status do_all_reduce(void* data, std::size_t count, DataType type, ReduceOp op) override;
  Status do_barrier() override;
  Expected<std::unique_ptr<Communicator>> do_split(int color, int key) override;

 private:
  ThreadCommunicator(std::shared_ptr<ThreadFabric> fabric, int rank, std::vector<int> world_ranks)
      : fabric_(std::move(fabric)), rank_(rank), world_ranks_(std::move(world_ranks)) {}
  // A collective's exchange: `out[r]` (bytes) goes to rank r, `in[r]` is filled from rank r, in
  // the collective context; waits for every peer against timeout() and names those that did not
  // send.
  Status exchange(const std::vector<std::vector<std::byte>>& out, std::vector<std::vector<std::byte>>& in);
  // A caller's buffer into host bytes, and host bytes into a caller's buffer (the group's copy).
  Status read_user(std::vector<std::byte>& into, const void* user, std::size_t bytes) const;
  Status write_user(void* user, const std::byte* host, std::size_t bytes) const;

  std::shared_ptr<ThreadFabric> fabric_;
  int rank_;
  std::vector<int> world_ranks_;  // world rank of each rank of this group
  int splits_ = 0;                // split() calls so far: the same sequence on every rank
};

// Runs fn(communicator of rank r) on n threads at once, each communicator's deadline `timeout`,
// and returns each rank's Status (rank order). A rank that throws reports the exception as its
// error; the others then fail their waits on it at the deadline. `copy`: as group()'s.
std::vector<Status> run_thread_ranks(int n, const std::function<Status(Communicator&)>& fn,
                                     std::chrono::milliseconds timeout = Communicator::kDefaultTimeout,
                                     MemoryCopy copy = {});

}  // namespace cpbench
