// framework_args.h — a planned layout said in the user's framework: Megatron-LM's command-line
// arguments and torchtitan's job config, and the way back from each (what a user pastes is read
// into the same ParallelConfig, so a test holds the two spellings to one layout).
// Requires: spec.h (PointConfig). Names as the frameworks spell them, read in their source:
// Megatron-LM main d98e8a64 and dev d48bd6be (megatron/training/arguments.py and the config
// classes its ArgumentGroupFactory turns into flags), torchtitan's TOML job config at e347b1e5
// (torchtitan/config/job_config.py, the last version before its Python-dataclass configs).
// Note: what a framework cannot express (cpbench's own packers, Kwai's balanced checkpointing and
// offloading, the Dynamic-CP solver, DCP, a layout torchtitan lacks) is left out of the arguments
// and said in a note: the arguments never claim more than the framework runs.
#pragma once

#include <string>
#include <vector>

#include "core/common/expected.h"
#include "core/experiment/spec.h"

namespace cpbench {

struct FrameworkArgs {
  std::vector<std::string> lines;  // Megatron: one argument (with its value) per line; torchtitan: TOML lines
  std::vector<std::string> notes;  // what does not translate, one sentence each
};

// Megatron-LM arguments for the point's layout and strategy (parallel sizes, virtual and uneven
// stages, CP and its comm type, SP, recompute, the distributed optimizer, overlaps, gradient dtype,
// batch sizes; Dynamic-CP and packing switches where the strategy is one of Megatron's).
FrameworkArgs megatron_arguments(const PointConfig& point);

// What Megatron runs for these arguments (tokens as a shell splits them; "--flag value" or
// "--flag=value"), on num_gpus GPUs: the ParallelConfig fields the arguments set, defaults
// elsewhere (Megatron's: overlaps off, fp32 gradient reduction), and the strategy they select
// ("ptdp", "zero3", "packing", "dynamic_cp", "dynamic_cp_dev"). An unknown or malformed argument is
// an error naming it.
struct FrameworkLayout {
  ParallelConfig parallel;
  std::string strategy;
};
Expected<FrameworkLayout> parse_megatron_arguments(const std::vector<std::string>& args, int64_t num_gpus);

// torchtitan's [parallelism], [activation_checkpoint] and [training] sections for the point.
FrameworkArgs torchtitan_config(const PointConfig& point);

// The layout of a torchtitan TOML config (the sections above; other sections and keys ignored).
Expected<FrameworkLayout> parse_torchtitan_config(const std::string& toml, int64_t num_gpus, const ModelShape& model);

}  // namespace cpbench
