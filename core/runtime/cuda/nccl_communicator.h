// nccl_communicator.h — NcclCommunicator: the Communicator over NCCL, one GPU per rank, for the
// executor's device buffers (CudaTensorOps memory). Every operation is issued on one CUDA stream —
// the stream of the rank's TensorOps — so it runs after the tensor work issued before it and the
// work issued after it waits for it; the host waits only in wait/test and in collectives.
// Requires: CUDA and NCCL (library cpbench_core_cuda); one device per rank, current when the
// communicator is made; every rank of the group creating it together. Messages and collectives on
// host memory are staged through device memory (the verdicts evaluate exchanges are host values).
// Note: NCCL has no tags: sends and receives between two ranks match in the order they are posted,
// which is the order the executor posts them (tags are checked for range only). A send and its
// receive must be in one group_start/group_end batch when they are between the same pair in both
// directions, or on one rank (a send to self) — the executor brackets every phase so. Deadlines:
// the communicator is non-blocking (ncclConfig_t::blocking = 0); a wait polls the stream's event and
// ncclCommGetAsyncError and, past the timeout, aborts the communicator (ncclCommAbort) and names
// the peer it waited for; the communicator is then unusable, as the base class says.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "core/runtime/communicator.h"

namespace cpbench {

class NcclCommunicator final : public Communicator {
 public:
  // NCCL's unique id of a new communicator (ncclGetUniqueId), as bytes: rank 0 makes it and the
  // ranks share it (NcclCommunicator::create over a bootstrap communicator does both).
  using UniqueId = std::array<char, 128>;
  static Expected<UniqueId> new_unique_id();

  // Rank `rank` of `size` ranks (world ranks `world_ranks`, for messages) of the communicator `id`,
  // on the current device, issuing on `stream` (a cudaStream_t; null: the legacy default stream).
  // Waits for NCCL's non-blocking initialisation up to `timeout`, then aborts and says so.
  static Expected<std::unique_ptr<NcclCommunicator>> create(const UniqueId& id, int rank, int size,
                                                            std::vector<int> world_ranks, void* stream,
                                                            std::chrono::milliseconds timeout = kDefaultTimeout);
  // The same over `bootstrap` (an MPI world, thread ranks, ...): its rank 0 makes the id and every
  // rank receives it there; this rank is bootstrap's rank, the group bootstrap's ranks.
  static Expected<std::unique_ptr<NcclCommunicator>> create(Communicator& bootstrap, void* stream);

  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank_of(int rank) const override;

  struct Batch;  // the operations of one group_start/group_end, completed by one event

 protected:
  Expected<std::unique_ptr<RequestState>> do_isend(const void* data, std::size_t count, DataType type, int dest,
                                                   int tag) override;
  Expected<std::unique_ptr<RequestState>> do_irecv(void* data, std::size_t count, DataType type, int source,
                                                   int tag) override;
  Status do_wait(RequestState& state, std::chrono::milliseconds timeout, bool& withdrawn,
                 std::size_t& received_bytes) override;
  Expected<bool> do_test(RequestState& state, std::size_t& received_bytes) override;
  Status do_all_to_allv(const void* send, const std::size_t* send_counts, const std::size_t* send_displs, void* recv,
                        const std::size_t* recv_counts, const std::size_t* recv_displs, DataType type) override;
  Status do_all_gatherv(const void* send, std::size_t send_count, void* recv, const std::size_t* recv_counts,
                        const std::size_t* recv_displs, DataType type) override;
  Status do_reduce_scatter(const void* send, void* recv, std::size_t block_count, DataType type,
                           ReduceOp op) override;
  Status do_all_reduce(void* data, std::size_t count, DataType type, ReduceOp op) override;
  Status do_barrier() override;
  Expected<std::unique_ptr<Communicator>> do_split(int color, int key) override;
  Status do_group_start() override;
  Status do_group_end() override;

 private:
  NcclCommunicator(void* comm, int rank, int size, std::vector<int> world_ranks, void* stream)
      : comm_(comm), rank_(rank), size_(size), world_ranks_(std::move(world_ranks)), stream_(stream) {}

  // One NCCL call (or a group of them) issued: ncclInProgress polled until NCCL has issued it,
  // within the deadline; an error (or the deadline) aborts the communicator.
  Status settle(int result, const char* what);
  // Waits until the stream has run everything issued so far, watching NCCL's asynchronous errors.
  Status synchronize(const char* what);
  // One send or receive of `bytes` with `peer`, in the open batch or as a batch of its own.
  Expected<std::unique_ptr<RequestState>> post(bool receive, void* data, std::size_t bytes, int peer);
  // A batch of point-to-point operations issued as one group (the open one, or a new one).
  std::shared_ptr<Batch> batch();
  Status close_batch(const std::shared_ptr<Batch>& b);
  Status abort(const std::string& why);

  void* comm_;  // ncclComm_t
  int rank_, size_;
  std::vector<int> world_ranks_;
  void* stream_;                  // cudaStream_t
  std::shared_ptr<Batch> open_;   // the batch of the current group_start/group_end, if any
};

}  // namespace cpbench
