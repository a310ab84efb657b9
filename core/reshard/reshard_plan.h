// reshard_plan.h — Tenplex's re-sharding of a training job's state from one (TP, PP, DP) layout to
// another (any change of the sizes or of the GPU count, and ranks lost to a failure): the
// sub-slice transfers each target rank needs, each from the source that costs least (its own GPU,
// then a GPU of the same node, then another node; among equals the least loaded), grouped into
// stages whose received bytes per rank fit a staging-memory cap; and a checker that every element
// of the target state has exactly one source.
// Requires: state_layout.h. GPU i ran rank i of the source layout; target rank r runs on GPU
// to_gpus[r] (by default GPU r, or with lost ranks the surviving GPUs in order), so GPUs join
// (scale-out) or leave (scale-in). A lost rank's GPU holds nothing, sends nothing and runs nothing.
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
  std::vector<int64_t> to_gpus;  // the GPU of each target rank; empty = the default above
  int64_t max_seq = 2048;     // rows of a learned position table
};

enum class LinkClass { local, nvlink, network };  // same GPU, same node, across nodes

struct Transfer {
  int64_t src = 0;      // source rank = the GPU sending
  int64_t dst = 0;      // target rank receiving …
  int64_t dst_gpu = 0;  // … on this GPU
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

LinkClass link_class(int64_t src_gpu, int64_t dst_gpu, int64_t gpus_per_node);

// The GPU of each target rank (request.to_gpus, or its default); errors when they are not
// distinct GPUs, or one was lost.
Expected<std::vector<int64_t>> target_gpus(const ReshardRequest& request);
// GPUs the change involves: those of either layout (the job's ranks when executed).
int64_t reshard_gpus(const ReshardRequest& request);

// Bytes each GPU sends (and receives) by link class: [gpu][class].
struct GpuStateBytes {
  std::vector<std::array<double, 3>> sent, received;
};
GpuStateBytes rank_bytes(const ReshardPlan& plan, const ReshardRequest& request);

}  // namespace cpbench
