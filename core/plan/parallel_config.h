// parallel_config.h — the step-level layout of a training iteration: TP, PP (schedule, virtual
// chunks), DP, CP, micro-batch size, recompute and the overlap switches.
// Requires: core/common/json_reader.h. dp is derived (num_gpus / (tp·pp·cp)); a layout whose sizes
// do not divide is reported by `check_parallel_config` as a reason string (a point `infeasible`),
// not as an input error: the JSON is valid, the configuration just cannot run.
#pragma once

#include <cstdint>
#include <string>

#include "core/common/json_reader.h"

namespace cpbench {

struct ParallelConfig {
  int64_t num_gpus = 1;
  int64_t tp = 1;                    // tensor-parallel size
  int64_t pp = 1;                    // pipeline-parallel size (stages)
  int64_t cp = 1;                    // context-parallel size
  int64_t vp = 1;                    // model chunks per pipeline rank (interleaved 1F1B when > 1)
  int64_t micro_batch_size = 1;      // sequences per micro-batch (b)
  // Layers of the first and the last pipeline stage (Megatron's --decoder-first-pipeline-num-layers
  // and --decoder-last-pipeline-num-layers); 0 = an even share. The other stages split the rest
  // evenly. Megatron uses it to offset the embedding and output layer (SC'21's 126-layer GPT on 16
  // stages would not divide otherwise).
  int64_t first_stage_layers = 0;
  int64_t last_stage_layers = 0;
  // Megatron's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split:
  // the pipeline split counts the input embedding (the loss) as one layer, so the layers plus
  // those split evenly over the pp·vp virtual stages and the first (last) virtual stage holds one
  // transformer layer fewer — none when a virtual stage is one layer: Llama 3 405B's 126 layers on
  // 16 stages × 8 chunks. Either excludes first_stage_layers / last_stage_layers.
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;
  bool sequence_parallel = false;    // Megatron SP: norms/dropout split over the TP group
  std::string recompute = "none";    // "none" | "selective" | "full" | "balanced" (Kwai's GEMM-last)
  // Kwai's pipeline-aware activation offloading (ATC'24, references/kwai.md): after each forward
  // the largest fraction α of the saved bytes is copied to pinned host memory on a copy stream
  // (device-to-host over the GPU's PCIe link) and copied back before the matching backward
  // (host-to-device), which waits for it; when each happens: core/sim/memory.h, offload_schedule.
  // 0 = none.
  double activation_offload_ratio = 0;
  bool scatter_gather = true;        // SC'21 §4.1: split pipeline sends over the TP ranks' NICs
  bool overlap_grad_reduce = true;   // DP gradient reduction overlapped with the backward pass
  // Parameters per gradient bucket with overlap_grad_reduce (Megatron's --ddp-bucket-size); 0 =
  // Megatron Core's default, max(40M, 1M × the DP×CP size).
  int64_t grad_reduce_bucket_params = 0;
  bool distributed_optimizer = false;  // ZeRO-1 style optimizer-state sharding over DP
  // The distributed optimizer's all-gather of the updated parameters overlapped with the next
  // step's forward (Megatron's --overlap-param-gather): gathered layer by layer (one bucket per
  // layer) from the step's start, each chunk's first forward waiting for its first layer and the
  // op after it for the whole chunk; off, the gather closes the step after the optimizer.
  bool overlap_param_gather = false;
  // ZeRO-3 / FSDP (strategy "zero3"): parameters, gradients and optimizer state sharded over the
  // DP×CP ranks; each layer's parameters all-gathered before its forward (prefetched during the
  // previous layer) and, with zero3_reshard_after_forward (FSDP's reshard_after_forward, DeepSpeed
  // stage 3's default), again before its backward; its gradients reduce-scattered after it.
  bool zero3 = false;
  bool zero3_reshard_after_forward = true;
  // How ZeRO-3 holds a layer's parameters: "flat" (FSDP1's FlatParameter: the all-gather writes
  // the unsharded flat tensor the parameters are views of, the reduce-scatter reads the flat
  // gradient in place) or "per_parameter" (FSDP2's fully_shard: each parameter its own DTensor
  // shard; the all-gather output is copied out into the parameters and the gradients copied in
  // to the reduce-scatter input, both on the compute stream — torch/distributed/fsdp/_fully_shard/
  // _fsdp_collectives.py, foreach_all_gather_copy_out and foreach_reduce_scatter_copy_in), or
  // "deepspeed" (DeepSpeed's stage 3: gathered and released per module by its coordinator, which
  // keeps a parameter reused within stage3_max_reuse_distance elements, so the last layers stay
  // gathered from their forward to their backward and under full recomputation some tensors are
  // gathered a third time; the gradients reduced in reduce_bucket_size buckets:
  // deepspeed_gathered, core/sim/deepspeed_zero3.h; pp must be 1), or "deepspeed_2021" (its
  // releases of 2021, v0.3.12 to v0.5.x: the host in step with the device at every module that
  // gathers, one collective per tensor; deepspeed_synchronous_times).
  std::string zero3_sharding = "flat";
  // DeepSpeed's contiguous_gradients under "deepspeed_2021": true (v0.4.3 to v0.5.x's default)
  // copies each gradient into the reduce bucket and reduce-scatters the bucket tensor by tensor;
  // false (v0.3.12 to v0.4.2's default: stage3.py reduce_ipg_grads → buffered_reduce_fallback)
  // flattens each full bucket, all-reduces it as one tensor and copies it back. Only
  // "deepspeed_2021" takes false.
  bool zero3_contiguous_gradients = true;
  std::string cp_comm_type = "p2p";  // "p2p" | "all_gather" | "a2a" | "a2a+p2p"
  // Attention micro-benchmarks (strategy cp_attention): the static layout that runs the batch
  // (core/layouts/cp_layouts.h: "single" (cp 1), "ring", "zigzag", "all_gather", "a2a", "a2a+p2p", "double_ring"), the
  // a2a+p2p / double_ring head-parallel group size (0: the largest dividing both head counts) and
  // the double ring's window (LoongTrain's inner ring, in head-parallel groups).
  std::string attention_layout = "zigzag";
  int64_t attention_a2a_size = 0;
  int64_t attention_ring_window = 0;
  // Every sequence padded to the batch's longest (a layout without variable-length input: DCP §7
  // ran LoongTrain so), the padding computed as tokens.
  bool attention_pad_to_longest = false;
  // DCP (strategy dcp_attention, core/strategies/dcp.h): token block size, divisions (the stages
  // with communication after the local stage 0, DCP's DCP_N_STAGES) and the balance tolerances of
  // memory and compute (DCP's defaults: 4, 0.2, 0.1). Block size 0: DCP's heuristic
  // (dcp_block_size). dcp_early_outputs: partial outputs and gradients leave as soon as they are
  // final, inside the divisions, instead of after the last one as DCP's executor sends them.
  // cp_attention under a sparse mask: the layout's kernels skip the mask's empty key blocks (DCP
  // §7 ran TransformerEngine's layouts with DCP's masked kernels) instead of computing the causal
  // envelope (TransformerEngine as shipped). The communication is the layout's either way.
  bool attention_sparse_kernel = false;
  // a2a+p2p as the TransformerEngine fork of DCP's artifact runs it: a Python loop reorders every
  // sequence's chunks around its all-to-alls (core/layouts/cp_layouts.h apply_te_a2a_sequence_loop).
  bool te_a2a_sequence_loop = false;
  // cp_attention: bytes of each dK/dV (and dQ) partial value on the wire; 0: the dtype's (2).
  // ring-flash-attention and LoongTrain accumulate dK/dV in fp32 and pass them on the backward
  // ring so (ring_flash_attn_varlen.py: dk = block_dk_buffer.to(torch.float32), then send_recv(dk)):
  // 4. TransformerEngine passes them in the dtype.
  int64_t attention_grad_bytes = 0;
  // How every CP attention plan runs (static layouts, DCP, Dynamic-CP's groups, in `run` and in
  // `cpbench exec`/`validate` alike): activation values on the wire in attention_value_bytes bytes
  // (0: the dtype's, 2; 4: fp32, as `exec --dtype fp32` runs the CPU executor), and with
  // attention_per_tile one kernel call per tile and the three-phase backward instead of
  // TransformerEngine's fused stages and pipelined backward.
  int64_t attention_value_bytes = 0;
  bool attention_per_tile = false;
  int64_t dcp_block_tokens = 0;
  int64_t dcp_divisions = 4;
  int64_t dcp_head_blocks = 0;  // head blocks per token block: 0 = one per KV group (DCP's default)
  double dcp_eps_mem = 0.2, dcp_eps_comp = 0.1;
  bool dcp_early_outputs = false;
  // DCP: each stage's exchange as DCP's executor issues it, NCCL all-to-alls over all the ranks
  // (AttentionPlan::collective_exchange); false: point-to-point sends between the pairs that move
  // data (a what-if: DCP's runtime does not run so).
  bool dcp_all_to_all = true;
  // Kwai's CP overlap (ATC'24; needs cp_comm_type "all_gather"): the QKV GEMM computes the K and V
  // columns first, and the all-gather of K/V runs beside the Q columns' GEMM. Forward only: the
  // backward's dK/dV reduction is priced as without it.
  bool cp_comm_overlap = false;
  int64_t max_seqlen_per_dp_cp_rank = 0;  // token cap per rank for packing / Dynamic-CP; 0 = unset
  std::string dtype = "bf16";        // "bf16" | "fp16": both use the dense 16-bit tensor rate
  // "flash": fused attention (FlashAttention/cuDNN); "unfused": QKᵀ and ·V as batched GEMMs with
  // the s×s scores through HBM for softmax and dropout, as Megatron ran in 2021 (SC'21).
  std::string attention_kernel = "flash";
  // The loss on the logits (core/sim/memory.h LossTensors; core/sim/layer_cost.cpp
  // lower_output_layer): "vocab_parallel", Megatron's vocabulary-parallel cross-entropy, or
  // "torch", torch.nn.functional.cross_entropy on the logits upcast to fp32 (torchtitan's train
  // step; Hugging Face's causal-LM heads upcast likewise): a log_softmax and an NLL in fp32,
  // each with its own output and gradient. "torch" needs tp = 1 (under TP, torchtitan's
  // loss_parallel shards the vocabulary).
  std::string loss = "vocab_parallel";
  // Megatron's element-wise fusions (SC'21 §4.2): bias + GeLU, bias + dropout + residual add, and
  // scale + mask + softmax (the last only matters with attention_kernel "unfused"). false runs each
  // as its own PyTorch kernel (--no-bias-gelu-fusion --no-bias-dropout-fusion
  // --no-masked-softmax-fusion): the same FLOPs, more HBM passes and launches.
  bool elementwise_fusion = true;
  // Megatron's pipeline sends are blocking on the compute timeline (batched isend/irecv, then
  // wait); true models overlapped P2P (Megatron's --overlap-p2p-communication, Kwai ATC'24).
  bool overlap_p2p = false;
  // Without sequence parallelism, the all-reduce of a column-parallel GEMM's input gradient runs
  // beside its weight-gradient GEMM (Megatron ≥ 2022: LinearWithGradAccumulationAndAsync-
  // Communication; --no-async-tensor-model-parallel-allreduce turns it off); false, as in SC'21's
  // code, reduces after the linear's whole backward. With SP the overlap is always on.
  bool async_tensor_model_parallel_allreduce = false;
  // TransformerEngine's userbuffers overlap (Megatron's --tp-comm-overlap; needs sequence
  // parallelism): each SP all-gather feeding a column-parallel GEMM, and each reduce-scatter fed by
  // a row-parallel GEMM, split into tp ring steps pipelined with tp chunks of the GEMM (the
  // ring-exchange overlap), forward and backward; the wgrad input's re-gather stays beside dgrad.
  bool tp_comm_overlap = false;
  // Weight-gradient GEMMs accumulate straight into the fp32 main_grad (Megatron ≥ 2022). Off, as
  // in SC'21's code, every micro-batch's backward adds its 16-bit gradients to main_grad in a
  // separate memory-bound pass (read 2 + read 4 + write 4 bytes per parameter).
  bool gradient_accumulation_fusion = true;
  // Gradients accumulated and reduced over DP in fp32 (4 bytes) or in the 16-bit dtype (2 bytes).
  // Megatron's default: fp32 with bf16, 16-bit with fp16 (--accumulate-allreduce-grads-in-fp32).
  bool grad_reduce_in_fp32 = true;
  // Megatron-LM's NaN checks (--no-check-for-nan-in-loss-and-grad turns them off): every
  // micro-batch's loss on the last stage (pretrain_gpt.py loss_func: validate_result with
  // torch.isnan, then torch.isinf) and every gradient bucket's L2 norm before its DP collective
  // (param_and_grad_buffer.py check_grads, check_for_nan_in_grad), each test a host
  // synchronization. On by default in Megatron-LM since 2023-12 (commit d66807759c moved the
  // gradient check before the DP collective); cpbench's default off: the 2021–23 stacks it
  // reproduces predate it or run without it.
  bool check_for_nan_in_loss_and_grad = false;

  double grad_bytes() const { return grad_reduce_in_fp32 ? 4.0 : 2.0; }

  int64_t model_parallel_size() const { return tp * pp * cp; }
  // Data-parallel size; valid only when check_parallel_config() returned "".
  int64_t dp() const { return num_gpus / model_parallel_size(); }
  // Bytes of one activation value on the wire: 2 for bf16 / fp16, else 4.
  int32_t value_bytes() const { return dtype == "bf16" || dtype == "fp16" ? 2 : 4; }
  // Bytes of one attention activation value on the wire (attention_value_bytes, else the dtype's).
  int32_t attention_values() const {
    return attention_value_bytes > 0 ? static_cast<int32_t>(attention_value_bytes) : value_bytes();
  }
  bool operator==(const ParallelConfig&) const = default;
};

// The job's rank of pipeline stage `stage`, DP×CP rank `dpcp` (d·cp + c) and TP rank `tp_rank`, in
// Megatron's default order (tp fastest, then cp, then dp, then pp): (stage·dp·cp + dpcp)·tp + t.
// Its node is that rank / GPUs per node (ranks fill nodes in order, as mpirun and srun place them).
int64_t global_rank(const ParallelConfig& p, int64_t stage, int64_t dpcp, int64_t tp_rank);

// Transformer layers held by pipeline stage `stage` of a model with `layers` layers; valid when
// check_stage_layers returned "".
int64_t stage_layers(const ParallelConfig& p, int64_t layers, int64_t stage);

// Transformer layers of model chunk `chunk` (virtual stage) of pipeline stage `stage`: 1/vp of
// the stage's, or with the account_for_* splits the virtual stages' even share less the embedding
// (first) or the loss (last) counted as a layer.
int64_t chunk_layers(const ParallelConfig& p, int64_t layers, int64_t stage, int64_t chunk);

// Parameters per gradient bucket of model chunk `chunk`, as Megatron Core's DDP cuts a chunk's
// gradient buffer: with overlap_grad_reduce, grad_reduce_bucket_params (default max(40M, 1M × the
// DP×CP size)); one bucket for the whole chunk (infinity) without it and for every chunk after the
// first (megatron/training/training.py get_model: disable_bucketing = model_chunk_idx > 0).
double grad_bucket_params(const ParallelConfig& p, int64_t chunk);

// "" when `layers` split over the stages as the layout says (first/last stage counts, the rest
// evenly over the middle stages, every stage's layers a multiple of vp; or the account_for_*
// split, layers plus the embedding and loss a multiple of pp·vp); otherwise why not.
std::string check_stage_layers(const ParallelConfig& p, int64_t layers);

// Reads the "parallel" object of a spec. Impossible values (tp = 0, an unknown recompute mode)
// are errors in o.diag(); sizes that do not divide are left to check_parallel_config.
ParallelConfig parse_parallel_config(JsonObject& o);

// "" when the layout can run; otherwise why not ("num_gpus 30 is not a multiple of tp·pp·cp = 8").
std::string check_parallel_config(const ParallelConfig& p);

}  // namespace cpbench
