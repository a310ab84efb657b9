// self_communicator.h — a size-1 Communicator without MPI: every collective is the identity and
// a message to oneself is matched by tag, as MPI_COMM_SELF would do it.
// Requires: nothing. It runs a plan's single-rank case in one process (tests, the reference run
// the parity tests compare against) with no launcher.
// Note: single-threaded, so a receive that no earlier send matches can never complete: wait()
// reports it at once instead of sleeping until the deadline.
#pragma once

#include <cstddef>
#include <deque>
#include <list>
#include <memory>
#include <vector>

#include "core/runtime/communicator.h"

namespace cpbench {

class SelfCommunicator final : public Communicator {
 public:
  // `world_rank`: the rank error messages name as the world rank (0 in a single process).
  explicit SelfCommunicator(int world_rank = 0) : world_rank_(world_rank) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  int world_rank_of(int rank) const override { return rank == 0 ? world_rank_ : -1; }

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
  struct Message {
    int tag;
    std::vector<std::byte> payload;
  };
  int world_rank_;
  std::deque<Message> unexpected_;     // sends no receive was posted for, oldest first
  std::list<PendingRecv*> posted_;     // receives not yet matched, oldest first
};

}  // namespace cpbench
