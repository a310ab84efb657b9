// reconfigure.h — what changing a running job's parallelism costs in time: Tenplex's parallel
// state transformation against a central state store (SOSP'24; references/tenplex_tensoropt.md).
// Requires: reshard_plan.h (the transfers), core/hardware/hardware.h (the node size and the
// stack's ReconfigurationCosts). A reconfiguration strategy decides where state flows; price_...
// prices what it decided; core/evaluate/evaluate.h is the one entry that backends use.
// Note: the state lives in each node's store (Tenplex's in-memory file system) and travels between
// stores over the network; a GPU failure loses the GPU, not its node's store, so a failed GPU's
// state is still a source unless the request lists it as lost. The mechanism priced is the
// network of each node (a range several ranks of one node need crosses the network to it once,
// then is copied inside it): every node's store moves state_store_GBps in each direction at once
// (full duplex), so the transfer time is that of the busiest node in its busier direction; the
// central store transforms the whole state between receiving and sending it, so its upload and
// download add. These are assumptions of the model (the reference does not describe the store's
// network path); with them the central store is never faster than the parallel transformation. State moving inside a node (the same GPU or
// another GPU of its node) is not charged: a local read of the node's store is far faster than its
// network path. Every change pays restart_s once (stopping the workers, starting them under the
// new layout, loading the state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/common/expected.h"
#include "core/hardware/hardware.h"
#include "core/reshard/reshard_plan.h"

namespace cpbench {

// Where the state goes on its way from the old layout to the new one.
enum class StateStore {
  parallel,  // Tenplex: each target rank fetches its sub-slices from the node that holds them
  central,   // Tenplex-Central: the state goes up to one node's store (the job's first; one copy of
             // what that node lacks), which sends every target rank off it its whole state
};

// A reconfiguration strategy as the registry lists it.
struct ReconfigurationStrategyInfo {
  std::string name;
  std::string summary;
  StateStore store;
};
const std::vector<ReconfigurationStrategyInfo>& reconfiguration_strategies();
const ReconfigurationStrategyInfo* find_reconfiguration_strategy(const std::string& name);

// A decided change: the request, the transfers of the cheapest sources (plan_reshard) and the
// route the strategy gives them.
struct ReconfigurationPlan {
  ReshardRequest request;
  ReshardPlan transfers;
  StateStore store = StateStore::parallel;
};

// Plans the change (errors: the layouts do not fit the model, a bad GPU map).
Expected<ReconfigurationPlan> plan_reconfiguration(const ModelShape& model, const ReshardRequest& request,
                                                   StateStore store);

struct ReconfigurationCost {
  double seconds = 0;      // restart_s + transfer_s
  double transfer_s = 0;   // the busiest node's network bytes / state_store_GBps
  double restart_s = 0;
  double critical_bytes = 0;  // bytes through the busiest node's network in its busier direction
                              // (central: the store node's upload plus download)
  int64_t critical_node = 0;
  double network_bytes = 0;   // all bytes that cross nodes
  double local_bytes = 0;     // bytes that stay on their node (same GPU or another GPU of it)
  double unrecoverable_bytes = 0;  // target state no surviving source holds (a checkpoint is needed)
};

// Prices a plan on nodes of `gpus_per_node` GPUs (the request's) with the stack's costs
// (costs.state_store_GBps > 0: the stack parser's bound).
ReconfigurationCost price_reconfiguration(const ModelShape& model, const ReconfigurationPlan& plan,
                                          const ReconfigurationCosts& costs);

}  // namespace cpbench
