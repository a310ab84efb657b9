// mpi_communicator.h — the Communicator over MPI (CPU ranks), and MpiSession, the RAII owner of
// MPI_Init/MPI_Finalize.
// Requires: an MPI-3 library (non-blocking collectives; OpenMPI 4.1 is what setup.sh installs);
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

namespace cpbench {

// Initialises MPI with MPI_THREAD_FUNNELED (only the main thread calls MPI: kernels use OpenMP
// inside a rank) unless it is already initialised, and finalises it only if it initialised it.
class MpiSession {
 public:
  MpiSession() : MpiSession(nullptr, nullptr) {}
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // Error when MPI_Init_thread failed or granted less than MPI_THREAD_FUNNELED.
  const Status& status() const { return status_; }
  bool initialized_here() const { return initialized_here_; }

 private:
  bool initialized_here_ = false;
  Status status_ = ok_status();
};

class MpiCommunicator final : public Communicator {
 public:
  // A duplicate of MPI_COMM_WORLD: its own tag space, MPI_ERRORS_RETURN set on it. Collective
  // over the world; the duplication itself is polled against `timeout`.
  static Expected<std::unique_ptr<MpiCommunicator>> world(
      std::chrono::milliseconds timeout = kDefaultTimeout);
  ~MpiCommunicator() override;  // MPI_Comm_free, unless MPI is already finalised

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank_of(int rank) const override;
  MPI_Comm comm() const { return comm_; }

  // Prints "cpbench: world rank R: <message>" on stderr and MPI_Abort()s every rank with
  // `exit_code` (2: the CLI's code for errors). The one way out after a timed-out collective.
  [[noreturn]] static void abort_job(const std::string& message, int exit_code = 2);

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
  // Polls a posted collective to completion against timeout().
  Status complete(MPI_Request& request);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> world_ranks_;  // world rank of each rank of comm_
};

}  // namespace cpbench
