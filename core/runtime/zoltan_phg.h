// zoltan_phg.h — Zoltan's parallel hypergraph partitioner (PHG, connectivity objective = km1) on
// one process: the binding DCP's placement (core/strategies/hypergraph.h) partitions through.
// Requires: Zoltan (Trilinos; Debian libtrilinos-zoltan-dev), which runs on an MPI communicator
// (MPI_COMM_SELF here), so an MPI session: the job's (apps' main under a launcher) or, for a plain
// `cpbench run`, a singleton one this file opens on first use and closes at exit. It lives in
// core/runtime with the rest of what touches MPI.
// Note: calls are serialised by a mutex (Zoltan keeps global state); Zoltan's random state is reset
// from `seed` before each call, so a partition is a function of its arguments.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/common/expected.h"

namespace cpbench {

// A hypergraph as compressed nets: net e's pins are pins[net_begin[e], net_begin[e + 1]).
struct PhgProblem {
  std::span<const float> vertex_weight;  // one weight per vertex
  std::span<const int64_t> net_begin;    // nets + 1 offsets (empty when there are no nets)
  std::span<const int32_t> pins;         // vertex indices
  std::span<const double> net_weight;    // one per net
  int32_t parts = 1;
  double imbalance_tol = 1.1;  // Zoltan's IMBALANCE_TOL: each part within this factor of the mean weight
  unsigned seed = 1;
};

// The part of each vertex, or Zoltan's failure.
Expected<std::vector<int32_t>> zoltan_phg(const PhgProblem& problem);

// Opens the MPI session Zoltan needs when none is open (a singleton, closed at exit), and checks
// that this thread may call it (a thread other than MPI's main one needs MPI_THREAD_MULTIPLE).
// Call it from the main thread before partitioning from worker threads; zoltan_phg's callers do.
Status init_zoltan();

}  // namespace cpbench
