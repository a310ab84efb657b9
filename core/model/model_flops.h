// model_flops.h — the model FLOPs of one iteration over a global batch, by the definition the
// spec names (papers count differently; a reproduction must use the paper's own count).
// Requires: core/model/formulas.h. Every strategy reports tflops_per_gpu from this number, so
// two strategies on the same batch are compared on the same work.
#pragma once

#include <string>

#include "core/model/formulas.h"
#include "core/workload/batch.h"

namespace cpbench {

// "sc21": Σ over sequences of SC'21's per-sequence formula (96 coefficient with full recompute,
//         72 otherwise; attention not halved);
// "megatron": Megatron's variable-length count, causal attention (Σ L, Σ L²), recompute NOT
//         counted: training.py's num_floating_point_operations charges every GEMM 3× (forward,
//         wgrad, dgrad) whatever --recompute-granularity says, so its TFLOP/s are model FLOPs;
// "kwai": Σ over sequences of L × Kwai's MFU FLOPs per token at that length (recompute not counted).
double model_flops_per_iteration(const ModelShape& model, const GlobalBatch& batch, Recompute recompute,
                                 const std::string& definition);

Recompute parse_recompute(const std::string& mode);

}  // namespace cpbench
