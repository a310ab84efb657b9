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
struct NamedSignal {
  int number;
  const char* name;
  char message[64];
};
NamedSignal g_named[] = {{SIGTERM, "SIGTERM", {}}, {SIGINT, "SIGINT", {}}, {SIGHUP, "SIGHUP", {}}, {SIGQUIT, "SIGQUIT", {}}};

void say_rank_and_end(int sig) {
  for (const NamedSignal& s : g_named)
    if (s.number == sig) {
      [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, s.message, std::strlen(s.message));
    }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

void name_rank_on_termination() {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (NamedSignal& s : g_named) {
    std::snprintf(s.message, sizeof s.message, "cpbench: world rank %d: ended by %s\n", rank, s.name);
    struct sigaction sa {};
    sa.sa_handler = say_rank_and_end;
    sigemptyset(&sa.sa_mask);
    sigaction(s.number, &sa, nullptr);
  }
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  // MULTIPLE when the library has it (DCP's partitioner calls Zoltan from the runner's worker
  // threads); FUNNELED is the least cpbench needs.
  int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
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
