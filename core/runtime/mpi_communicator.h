// mpi_communicator.h — the Communicator over MPI (CPU ranks).
// Requires: an MPI-3 library (non-blocking collectives; tested with OpenMPI 4.1.4);
// an MpiSession (or the application's own MPI_Init) alive while any MpiCommunicator is used.
// Note: every operation is posted non-blocking and completed by an MPI_Test polling loop with a
// deadline, and the communicators use MPI_ERRORS_RETURN, so a dead or hung peer becomes a Status
// naming it; abort_job() then ends every rank with that message.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "core/runtime/communicator.h"
#include "core/runtime/mpi_session.h"

namespace cpbench {

class MpiCommunicator final : public Communicator {
 public:
  // A duplicate of MPI_COMM_WORLD: its own tag space, MPI_ERRORS_RETURN set on it. Collective
  // over the world; the duplication itself is polled against `timeout`.
  static Expected<std::unique_ptr<MpiCommunicator>> world(
      std::chrono::milliseconds timeout = kDefaultTimeout);
  // MPI_Comm_free, unless MPI is finalised or an abandoned operation is still running on it.
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank_of(int rank) const override;
  bool needs_host_progress() const override { return true; }
  MPI_Comm comm() const { return comm_; }

  // Prints "cpbench: world rank R: <message>" on stderr and MPI_Abort()s every rank with
  // `exit_code` (1: a failed run; 2 is the CLI's code for bad input only). The one way out after a
  // timed-out collective.
  [[noreturn]] static void abort_job(const std::string& message, int exit_code = 1);

  // Reserved for the timeout diagnosis; user tags must be below it. MPI guarantees MPI_TAG_UB is
  // at least 32767 (MPI 4.1, sec. 9.1.2).
  static constexpr int kProbeTag = 32767;

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
  // Takes ownership of `comm` (sets MPI_ERRORS_RETURN on it).
  static Expected<std::unique_ptr<MpiCommunicator>> adopt(MPI_Comm comm);
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {}
  // Polls a posted collective to completion against timeout(); on timeout the error names the
  // ranks that answer no probe (find_absent_ranks).
  Status complete(MPI_Request& request);
  // Receives pending probe messages: answers "who is here?" and marks answers in `heard`.
  void answer_probes(std::vector<char>* heard);
  // After a collective timed out: asks every peer, waits a short grace, names who did not answer.
  // A rank answers while it waits in any operation on this group, so the ones named are those
  // busy elsewhere (a hung kernel) or dead.
  std::string find_absent_ranks();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> world_ranks_;  // world rank of each rank of comm_
  // Operations given up after a timeout: MPI keeps progressing them, so comm_ must outlive them.
  std::vector<MPI_Request> abandoned_;
};

// Where the job's ranks sit: this rank's index among the ranks of its host (which picks its GPU),
// the most ranks on one host, and the hosts, from MPI's shared-memory split. Collective over world.
struct NodePlacement {
  int local_rank = 0, ranks_per_node = 1, hosts = 1;
};
Expected<NodePlacement> node_placement(MpiCommunicator& world);

}  // namespace cpbench
