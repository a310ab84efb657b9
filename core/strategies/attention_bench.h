// attention_bench.h — attention micro-benchmarks as strategies (DCP, SOSP'25 §6.2): the whole
// batch's attention, one layer forward and backward, on all num_gpus ranks as one context-parallel
// group (Plan::attention_only). The static layouts of the field and DCP plan the same batch.
// Requires: core/layouts/cp_layouts.h, dcp.h. The layout must be tp = pp = 1 and cp = num_gpus; the
// model's heads, KV heads and head size are the attention shape (a per-TP-rank shape is a model
// preset of its own, e.g. dcp_micro_attention). The workload's mask applies to every sequence.
#pragma once

#include "core/strategies/strategy.h"

namespace cpbench {

// parallel.attention_layout over the group (sequences padded to what the layout needs). Causal and
// full masks as the layout runs them; a sparse mask (lambda, shared_question, causal_blockwise)
// on the causal layout's tiles with the work of the causal envelope (causal_envelope_work).
PlanOutcome plan_cp_attention(const StrategyInput& in);

// DCP's blockwise placement (parallel.dcp_block_tokens, dcp_divisions, dcp_eps_mem, dcp_eps_comp);
// the note gives blocks, km1 and stages.
PlanOutcome plan_dcp_attention(const StrategyInput& in);

}  // namespace cpbench
