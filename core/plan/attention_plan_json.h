// attention_plan_json.h — an AttentionPlan as JSON and back, every field, so that a plan made on
// one machine executes on another: DCP's planner needs Zoltan and MPI, which a GPU machine that
// only runs the carried binaries lacks, so its plans are written where they are made
// (build/dcp_test_plans.json) and read where they run (executed_plans_gpu_test).
// Requires: nlohmann/json, core/common/json_reader.h (strict reading: an error names the file,
// the JSON pointer and what was expected). Note: slices, transfers and tiles are arrays to keep a
// file of a hundred plans small: a slice [seq, tok_begin, tok_end, head_begin, head_end], a
// transfer [src, dst, tensor, slice, relay], a tile [q slice, kv slice].
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/common/json_reader.h"
#include "core/plan/attention_plan.h"

namespace cpbench {

json attention_plan_json(const AttentionPlan& plan);

// Reads what attention_plan_json wrote; errors go to `diag` at `pointer` (the result is then
// partial). Structure only: check_attention_plan says whether the plan is consistent.
AttentionPlan parse_attention_plan(const json& j, const std::string& pointer, Diagnostics& diag);

// A file of plans, each with a label saying what it is:
// {"format": "cpbench attention plans", "version": 1, "plans": [{"label": ..., "plan": {...}}]}.
struct LabelledPlan {
  std::string label;
  AttentionPlan plan;
  bool operator==(const LabelledPlan&) const = default;
};
Status write_attention_plans(const std::filesystem::path& path, const std::vector<LabelledPlan>& plans);
Expected<std::vector<LabelledPlan>> read_attention_plans(const std::filesystem::path& path);

}  // namespace cpbench
