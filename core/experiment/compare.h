// compare.h — `cpbench compare`: every strategy cpbench implements, run on a user's own sequence
// lengths, model and cluster, on the same batches, ranked; the winner said in Megatron-LM's and
// torchtitan's terms.
// Requires: spec.h, runner.h (the comparison is a runnable spec, run like any experiment),
// lengths_file.h, hf_config.h, framework_args.h.
// Note: the strategies share one base layout (TP, PP) chosen from memory (compare_base_layout)
// unless the user gives one; the PTD-P search and FSDP run their own layouts. Every choice is
// written into the spec, so `cpbench run DIR/compare.json` reproduces the comparison.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/common/expected.h"
#include "core/experiment/framework_args.h"
#include "core/experiment/results.h"
#include "core/experiment/spec.h"
#include "core/workload/lengths_file.h"

namespace cpbench {

struct CompareRequest {
  std::filesystem::path lengths;   // a lengths file or folder (lengths_file.h)
  std::string column;              // its column or field ("" = found by name)
  std::string model;               // a model preset name, or a Hugging Face config.json (or its folder)
  std::string hardware = "h100_dgx";
  std::string stack;               // "" = the hardware's default stack
  int64_t num_gpus = 64;
  int64_t global_batch_sequences = 0;  // exactly one of these two is > 0
  int64_t global_batch_tokens = 0;
  int64_t max_length = 0;          // 0 = the file's longest length
  std::string overlong = "error";  // lengths above max_length: "error" | "clip" | "drop"
  int64_t max_seqlen_per_rank = 0; // Megatron's max_seqlen_per_dp_cp_rank; 0 = chosen (compare_spec)
  std::string mask = "causal";
  int batches = 4;                 // the metrics are the mean over this many batches
  uint64_t seed = 1;
  bool quick = false;              // fewer strategies' variants, 2 batches, a narrower search
  int64_t tp = 0, pp = 0;          // the base layout; 0 = chosen from memory
};

// The base TP and PP: the smallest model-parallel size (TP first, within a node, dividing the
// heads; then PP dividing the layers) whose weights, gradients and optimizer state (distributed
// optimizer) take at most 40 % of a GPU's memory, leaving the rest to activations.
struct BaseLayout {
  int64_t tp = 1, pp = 1;
  std::string why;  // one sentence
};
BaseLayout compare_base_layout(const ModelShape& model, const ClusterSpec& cluster, int64_t num_gpus);

// The comparison's spec (runnable as written) and what the report says about the inputs. Bad input
// (a lengths file, a config.json, a length above the maximum, sizes that do not fit) is an error
// naming the file and line, the field or the flag.
struct CompareSpec {
  json spec;
  LengthsFile lengths;
  ModelShape model;
  BaseLayout base;
  int64_t max_length = 0, cap = 0;
};
Expected<CompareSpec> compare_spec(const CompareRequest& request, const std::filesystem::path& experiments_dir);

// One strategy's row of the ranking.
struct CompareRow {
  size_t point = 0;       // index into the spec's points
  std::string label, strategy, status, reason;
  double step_time_s = 0, tokens_per_s_per_gpu = 0, mfu = 0, peak_memory_gib = 0, exposed_comm_s = 0,
         bubble_fraction = 0, plan_time_ms = 0;
  double speedup = 0;     // baseline step / this step (ok rows)
};

struct CompareRanking {
  std::vector<CompareRow> rows;  // ok rows fastest first, then the others in spec order
  std::string baseline;          // the fastest static-CP packing row's label ("" when none ran)
};
CompareRanking rank_compare(const Spec& spec, const PointResults& results);

// The ranked table for a terminal; the markdown report; the speedup figure (SVG bars, fastest
// first, over the baseline).
std::string compare_table(const CompareRanking& ranking);
std::string compare_report(const CompareSpec& cs, const CompareRanking& ranking, const std::string& command,
                           const FrameworkArgs& megatron, const FrameworkArgs& torchtitan, const std::string& winner_layout);
std::string compare_svg(const CompareRanking& ranking);

}  // namespace cpbench
