// mpi_session.cpp — MPI initialisation and finalisation, owned by scope.
#include "core/runtime/mpi_session.h"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include <unistd.h>

namespace cpbench {
namespace {

// "cpbench: world rank 3: ended by SIGTERM\n", formatted once MPI knows the rank, written by the
// handler with write(2) (async-signal-safe) before the signal's default action runs.
char g_ended_by[4][64];
const int kNamedSignals[4] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
const char* const kSignalNames[4] = {"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"};

void say_rank_and_end(int sig) {
  for (int i = 0; i < 4; ++i)
    if (kNamedSignals[i] == sig) {
      [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, g_ended_by[i], std::strlen(g_ended_by[i]));
    }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

void name_rank_on_termination() {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (int i = 0; i < 4; ++i) {
    std::snprintf(g_ended_by[i], sizeof g_ended_by[i], "cpbench: world rank %d: ended by %s\n", rank, kSignalNames[i]);
    struct sigaction sa {};
    sa.sa_handler = say_rank_and_end;
    sigemptyset(&sa.sa_mask);
    sigaction(kNamedSignals[i], &sa, nullptr);
  }
}

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
  name_rank_on_termination();
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
