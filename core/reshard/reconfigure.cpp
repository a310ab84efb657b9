#include "core/reshard/reconfigure.h"

#include <algorithm>
#include <set>

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

// The central store's traffic: one copy of the source state (DP replica 0's weights; its optimizer
// state, or every DP rank's shard under the distributed optimizer) uploaded by the ranks off the
// store node, and every target rank off the store node's whole state sent back.
struct CentralBytes {
  double upload = 0, download = 0, stays = 0;  // stays: target state already on the store node
};
CentralBytes central_store_bytes(const ModelShape& model, const ReconfigurationPlan& plan, const std::vector<int64_t>& gpus) {
  const ReshardRequest& q = plan.request;
  const std::set<int64_t> lost(q.lost.begin(), q.lost.end());
  const auto node = [&](int64_t gpu) { return gpu / q.gpus_per_node; };
  CentralBytes b;
  for (int64_t r = 0; r < q.from.ranks(); ++r) {
    if (lost.count(r) || node(r) == 0) continue;
    for (const Piece& p : rank_state(model, plan.transfers.tensors, q.from, r)) {
      const bool first_copy = q.from.dp_rank(r) == 0 || (p.kind == StateKind::optimizer && q.from.distributed_optimizer);
      if (first_copy) b.upload += static_cast<double>(p.rect.area()) * bytes_per_element(p.kind);
    }
  }
  for (int64_t r = 0; r < q.to.ranks(); ++r)
    (node(gpus[r]) != 0 ? b.download : b.stays) += state_bytes(rank_state(model, plan.transfers.tensors, q.to, r));
  return b;
}

}  // namespace

ReconfigurationCost price_reconfiguration(const ModelShape& model, const ReconfigurationPlan& plan,
                                          const ReconfigurationCosts& costs) {
  const ReshardRequest& q = plan.request;
  ReconfigurationCost c;
  const int64_t gpus = reshard_gpus(q);
  const int64_t nodes = (gpus + q.gpus_per_node - 1) / q.gpus_per_node;
  std::vector<double> out(nodes, 0), in(nodes, 0);
  for (const Transfer& t : plan.transfers.transfers) {
    if (link_class(t.src, t.dst_gpu, q.gpus_per_node) != LinkClass::network) {
      c.local_bytes += t.bytes();
      continue;
    }
    c.network_bytes += t.bytes();
    out[t.src / q.gpus_per_node] += t.bytes();
    in[t.dst_gpu / q.gpus_per_node] += t.bytes();
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
  c.transfer_s = costs.state_store_GBps > 0 ? c.critical_bytes / (costs.state_store_GBps * 1e9) : 0;
  c.seconds = c.restart_s + c.transfer_s;
  return c;
}

}  // namespace cpbench
