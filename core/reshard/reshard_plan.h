// reshard_plan.h — Tenplex's re-sharding of a training job's state from one (TP, PP, DP) layout to
// another (any change of the sizes or of the GPU count, and ranks lost to a failure): the
// sub-slice transfers each target rank needs, each from the source that costs least (its own GPU,
// then a GPU of the same node, then another node; among equals the least loaded), grouped into
// stages whose received bytes per rank fit a staging-memory cap; and a checker that every element
// of the target state has exactly one source.
// Requires: state_layout.h. GPU i runs rank i under both layouts; ranks ≥ the smaller layout's
// size join (scale-out) or leave (scale-in). A lost rank holds nothing and sends nothing.
// Note: the vocabulary's padding rows carry no state and are zero at the target (no transfer).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/common/expected.h"
#include "core/reshard/state_layout.h"

namespace cpbench {

struct ReshardRequest {
  StateLayout from, to;
  int64_t gpus_per_node = 8;
  double staging_bytes = 0;   // per rank and stage, received; 0 = one stage
  std::vector<int64_t> lost;  // ranks of `from` whose state is gone (a failure)
  int64_t max_seq = 2048;     // rows of a learned position table
};

enum class LinkClass { local, nvlink, network };  // same GPU, same node, across nodes

struct Transfer {
  int64_t src = 0, dst = 0;
  Piece piece;
  double bytes() const { return static_cast<double>(piece.rect.area()) * bytes_per_element(piece.kind); }
};

struct ReshardPlan {
  std::vector<ModelTensor> tensors;
  std::vector<Transfer> transfers;    // stage by stage
  std::vector<size_t> stage_begin;    // stage k: transfers [stage_begin[k], stage_begin[k + 1])
  std::vector<Transfer> unrecoverable;  // target pieces no surviving rank holds (dst set, src −1): a checkpoint is needed
  size_t stages() const { return stage_begin.empty() ? 0 : stage_begin.size() - 1; }
};

// Errors: a layout the model does not split under, a lost rank outside `from`.
Expected<ReshardPlan> plan_reshard(const ModelShape& model, const ReshardRequest& request);

// "" when every element of every target rank's state (but the unrecoverable pieces) arrives
// exactly once from a rank that holds it under `from` and is not lost, and nothing else moves;
// otherwise the first violation.
std::string check_reshard_plan(const ModelShape& model, const ReshardRequest& request, const ReshardPlan& plan);

LinkClass link_class(int64_t src, int64_t dst, int64_t gpus_per_node);

// Bytes each rank sends (and receives) by link class: [rank][class].
struct RankBytes {
  std::vector<std::array<double, 3>> sent, received;
};
RankBytes rank_bytes(const ReshardPlan& plan, const ReshardRequest& request);

}  // namespace cpbench
