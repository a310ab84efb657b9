#include "core/reshard/reconfigure.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <set>
#include <tuple>

namespace cpbench {

const std::vector<ReconfigurationStrategyInfo>& reconfiguration_strategies() {
  static const std::vector<ReconfigurationStrategyInfo> table = {
      {"tenplex",
       "Tenplex (SOSP'24): every target rank fetches the sub-slices it needs from the cheapest holder (its GPU, its "
       "node, then another node), all nodes at once",
       StateStore::parallel},
      {"central_store",
       "Tenplex-Central: the state goes through one node's store (the job's first node): uploaded once, then sent "
       "whole to every target rank",
       StateStore::central},
  };
  return table;
}

const ReconfigurationStrategyInfo* find_reconfiguration_strategy(const std::string& name) {
  for (const auto& s : reconfiguration_strategies())
    if (s.name == name) return &s;
  return nullptr;
}

Expected<ReconfigurationPlan> plan_reconfiguration(const ModelShape& model, const ReshardRequest& request,
                                                   StateStore store) {
  auto transfers = plan_reshard(model, request);
  if (!transfers) return transfers.errors();
  return ReconfigurationPlan{request, std::move(*transfers), store};
}

namespace {

double state_bytes(const std::vector<Piece>& pieces) {
  double b = 0;
  for (const Piece& p : pieces) b += static_cast<double>(p.rect.area()) * bytes_per_element(p.kind);
  return b;
}

// The central store's traffic: one copy of every element of the source state that no surviving
// rank of the store node holds, uploaded from a surviving holder elsewhere, and every target rank
// off the store node's whole state sent back. Megatron's layouts give replicas of a piece the
// same index ranges (DP replicas of weights and optimizer state) and different pieces disjoint
// ones, so a piece is one (tensor, kind, range) whoever holds it.
struct CentralBytes {
  double upload = 0, download = 0, stays = 0;  // stays: target state already on the store node
};
CentralBytes central_store_bytes(const ModelShape& model, const ReconfigurationPlan& plan, const std::vector<int64_t>& gpus) {
  const ReshardRequest& q = plan.request;
  const std::set<int64_t> lost(q.lost.begin(), q.lost.end());
  const auto node = [&](int64_t gpu) { return gpu / q.gpus_per_node; };
  using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t>;
  std::map<Key, bool> on_store;  // every surviving piece: whether the store node already holds it
  std::map<Key, double> bytes;
  for (int64_t r = 0; r < q.from.ranks(); ++r) {
    if (lost.count(r)) continue;
    for (const Piece& p : rank_state(model, plan.transfers.tensors, q.from, r)) {
      const Key k{p.tensor, static_cast<int>(p.kind), p.rect.r0, p.rect.r1, p.rect.c0, p.rect.c1};
      on_store[k] = on_store[k] || node(r) == 0;
      bytes[k] = static_cast<double>(p.rect.area()) * bytes_per_element(p.kind);
    }
  }
  CentralBytes b;
  for (const auto& [k, here] : on_store)
    if (!here) b.upload += bytes[k];
  for (int64_t r = 0; r < q.to.ranks(); ++r)
    (node(gpus[r]) != 0 ? b.download : b.stays) += state_bytes(rank_state(model, plan.transfers.tensors, q.to, r));
  return b;
}

}  // namespace

ReconfigurationCost price_reconfiguration(const ModelShape& model, const ReconfigurationPlan& plan,
                                          const ReconfigurationCosts& costs) {
  assert(costs.state_store_GBps > 0);
  const ReshardRequest& q = plan.request;
  ReconfigurationCost c;
  const int64_t gpus = reshard_gpus(q);
  const int64_t nodes = (gpus + q.gpus_per_node - 1) / q.gpus_per_node;
  // Tenplex transforms state per node (each node's store fetches what its ranks need): a range
  // several ranks of one node need crosses the network to that node once, then is copied inside it.
  std::vector<double> out(nodes, 0), in(nodes, 0);
  std::set<std::tuple<int64_t, int, int, int64_t, int64_t, int64_t, int64_t>> arrived;  // (node, piece)
  for (const Transfer& t : plan.transfers.transfers) {
    const int64_t to = t.dst_gpu / q.gpus_per_node;
    const bool fresh = arrived
                           .insert({to, t.piece.tensor, static_cast<int>(t.piece.kind), t.piece.rect.r0, t.piece.rect.r1,
                                    t.piece.rect.c0, t.piece.rect.c1})
                           .second;
    if (link_class(t.src, t.dst_gpu, q.gpus_per_node) != LinkClass::network || !fresh) {
      c.local_bytes += t.bytes();
      continue;
    }
    c.network_bytes += t.bytes();
    out[t.src / q.gpus_per_node] += t.bytes();
    in[to] += t.bytes();
  }
  for (const Transfer& u : plan.transfers.unrecoverable) c.unrecoverable_bytes += u.bytes();
  if (plan.store == StateStore::parallel) {
    for (int64_t n = 0; n < nodes; ++n)
      if (std::max(in[n], out[n]) > c.critical_bytes) {
        c.critical_bytes = std::max(in[n], out[n]);
        c.critical_node = n;
      }
  } else {
    // plan_reshard accepted the request, so its GPU map is valid.
    const CentralBytes b = central_store_bytes(model, plan, *target_gpus(q));
    c.critical_bytes = b.upload + b.download;  // in, then out: the store transforms the whole state between
    c.critical_node = 0;
    c.network_bytes = b.upload + b.download;
    c.local_bytes = b.stays;
  }
  c.restart_s = costs.restart_s;
  c.transfer_s = c.critical_bytes > 0 ? c.critical_bytes / (costs.state_store_GBps * 1e9) : 0;
  c.seconds = c.restart_s + c.transfer_s;
  return c;
}

}  // namespace cpbench
