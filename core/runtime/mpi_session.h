// mpi_session.h — MpiSession, the RAII owner of MPI_Init_thread / MPI_Finalize.
// Requires: MPI. Create one in main() (or a test environment) before any MpiCommunicator.
// Note: it initialises only if nobody did yet, and finalises only what it initialised, so an
// application that calls MPI_Init itself can still use it.
#pragma once

#include <mpi.h>

#include "core/common/expected.h"

namespace cpbench {

// Initialises MPI asking for MPI_THREAD_MULTIPLE (DCP's partitioner calls Zoltan, under a mutex,
// from worker threads; everything else calls MPI from the main thread) and requiring at least
// MPI_THREAD_FUNNELED, unless it is already initialised, and finalises it only if it initialised it.
// After MPI_Init: a rank ended by SIGTERM, SIGINT, SIGHUP or SIGQUIT first writes "cpbench: world
// rank N: ended by SIGTERM" to stderr (mpirun's own message names only the job's rank; a SIGKILL
// leaves only that). Handlers installed later (cpbench run's graceful stop) replace these.
void name_rank_on_termination();

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

}  // namespace cpbench
