// mpi_session.cpp — MPI initialisation and finalisation, owned by scope.
#include "core/runtime/mpi_session.h"

#include <string>

namespace cpbench {

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) {
    status_ = Error{"", "", "MPI_Init_thread failed with MPI error " + std::to_string(rc)};
    return;
  }
  initialized_here_ = true;
  if (provided < MPI_THREAD_FUNNELED) {
    status_ = Error{"", "", "MPI_Init_thread granted thread level " + std::to_string(provided) +
                    ", below MPI_THREAD_FUNNELED"};
  }
}

MpiSession::~MpiSession() {
  if (!initialized_here_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace cpbench
