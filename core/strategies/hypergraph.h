// hypergraph.h — k-way hypergraph partitioning for DCP's placement (SOSP'25; references/dcp.md):
// minimise km1 = Σ over nets of weight × (parts the net spans − 1) under two balance constraints,
// memory and compute, each part within (1 + ε) of the mean.
// Requires: Zoltan's parallel hypergraph partitioner PHG (through core/runtime/zoltan_phg.h, which
// owns its MPI needs) does the partitioning.
// Note: Zoltan takes one weight per vertex. The partition is computed on the sum of the two
// normalised weights (memory / total memory + compute / total compute), then refine_balance moves
// vertices, cheapest km1 increase first, until both constraints hold (or no move helps): the
// second balance is enforced here, not by the library (tested; Zoltan's own output seldom meets
// both). Calls are serialised by a mutex. Deterministic for a given hypergraph.
#pragma once

#include <cstdint>
#include <vector>

#include "core/common/expected.h"

namespace cpbench {

struct Hypergraph {
  std::vector<double> memory, compute;  // per vertex (both ≥ 0)
  std::vector<int64_t> net_begin;       // nets: pins [net_begin[e], net_begin[e + 1])
  std::vector<int32_t> pins;            // vertex indices
  std::vector<double> net_weight;       // per net (bytes)

  int32_t vertices() const { return static_cast<int32_t>(memory.size()); }
  int32_t nets() const { return static_cast<int32_t>(net_weight.size()); }
  void add_net(const std::vector<int32_t>& net_pins, double weight);
};

// Σ over nets of weight × (distinct parts of its pins − 1).
double km1(const Hypergraph& h, const std::vector<int32_t>& part);

struct BalanceLimits {
  int32_t parts = 1;
  double eps_memory = 0.2, eps_compute = 0.1;
  // > 0: the memory cap itself, not derived from ε (a sub-partition held to its parent's cap).
  double memory_cap = 0;
};

// Each part's load ≤ (1 + ε) · total / parts in both weights, or, when a single vertex is heavier
// than that, no part above the heaviest vertex plus the mean (memory: limits.memory_cap if set).
bool balanced(const Hypergraph& h, const std::vector<int32_t>& part, const BalanceLimits& limits);

// Moves vertices out of overloaded parts, each time the move that raises km1 least and takes no
// part over a cap in a weight the vertex carries, until balanced(). Some part is always at or below
// the mean, with room for the heaviest vertex, so it ends balanced. Returns the number of moves.
int64_t refine_balance(const Hypergraph& h, std::vector<int32_t>& part, const BalanceLimits& limits);

// Each part's load over its cap, the larger of the two weights (≤ 1: balanced()).
double worst_load_over_cap(const Hypergraph& h, const std::vector<int32_t>& part, const BalanceLimits& limits);

// Zoltan PHG (connectivity objective = km1) on the combined weight from 2-8 seeds (as many as a
// budget of seeds × pins allows), each refined by
// refine_balance; the balanced partition with the least km1, or — when no seed could be balanced
// (a part never has room for the heaviest vertex under a given memory_cap) — the least
// over its caps (worst_load_over_cap says by how much).
Expected<std::vector<int32_t>> partition_hypergraph(const Hypergraph& h, const BalanceLimits& limits);

// Readies the partitioner (init_zoltan: the MPI session Zoltan needs). Call it from the main
// thread before partitioning from other threads (the runner does); partition_hypergraph's calls
// check it too.
Status init_partitioner();

}  // namespace cpbench
