#include "core/sim/layer_cost.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "core/cost/calibrate.h"
#include "core/model/formulas.h"
#include "core/model/model_flops.h"

namespace cpbench {
namespace {

constexpr double kAct = 2;  // bytes per 16-bit activation element

// One GEMM Y[m,n] = X[m,k]·W[k,n]: backward is the input gradient dX[m,k] = dY·Wᵀ (dgrad) and the
// weight gradient dW[k,n] = Xᵀ·dY (wgrad), two kernels.
struct Gemm {
  int64_t m, n, k;
};
// The kernel each pass of a linear runs, as C[m,n] = A[m,k]·B[k,n].
Gemm fwd(const Gemm& g) { return g; }
Gemm dgrad(const Gemm& g) { return {g.m, g.k, g.n}; }
Gemm wgrad(const Gemm& g) { return {g.k, g.n, g.m}; }

// `ops` without ZeRO-3's parameter gathers, the waits for them and FSDP2's copy-out of them (deps
// on them dropped, the rest renumbered).
OpList without_zero3_ops(const OpList& ops) {
  std::vector<int> index(ops.size(), -1);
  OpList out;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].stream == OpStream::dp || ops[i].name == kZero3WaitOp || ops[i].name == kZero3CopyOutOp) continue;
    LayerOp op = ops[i];
    std::vector<int> deps;
    for (int d : op.deps)
      if (index[d] >= 0) deps.push_back(index[d]);
    op.deps = std::move(deps);
    index[i] = static_cast<int>(out.size());
    out.push_back(std::move(op));
  }
  return out;
}

GroupPlacement tp_group(const CostModel& cost, const ParallelConfig& layout) {
  return placement(layout.tp, 1, cost.cluster().gpus_per_node);
}

// Appends ops; an op's deps are indices of earlier ops (negative entries, "no such op", dropped).
class OpBuilder {
 public:
  explicit OpBuilder(const CostModel& cost) : cost_(cost) {}

  int compute(std::string name, double s, std::vector<int> deps, int kernels = 1, bool sm_bound = true) {
    return add({std::move(name), OpStream::compute, s, kernels, sm_bound, std::move(deps), {}, {}, {}});
  }
  // One GEMM kernel (C[m,n] = A[m,k]·B[k,n]).
  int gemm(std::string name, const Gemm& g, std::vector<int> deps) {
    const int i = compute(std::move(name), cost_.gemm_s(g.m, g.n, g.k), std::move(deps));
    measured_as(i, "gemm", {{"m", double(g.m)}, {"n", double(g.n)}, {"k", double(g.k)}});
    return i;
  }
  // An element-wise pass moving `bytes` through HBM in `kernels` kernels (each launch counted).
  int elementwise(std::string name, double bytes, std::vector<int> deps, int kernels = 1) {
    const double s = cost_.memory_bound_s(bytes) + (kernels - 1) * cost_.params().kernel_overhead_us * 1e-6;
    const int i = compute(std::move(name), s, std::move(deps), kernels, false);
    if (kernels == 1) measured_as(i, "memory_bound", {{"bytes", bytes}});
    return i;
  }
  // Names op i as one kernel of a measured family (LayerOp::kernel).
  void measured_as(int i, std::string kernel, std::map<std::string, double> shape) {
    ops_[static_cast<size_t>(i)].kernel = std::move(kernel);
    ops_[static_cast<size_t>(i)].shape = std::move(shape);
  }
  // A TP collective of `bytes` (collective_s's convention); with one TP rank there is none and
  // the data is `input` itself.
  int tp(std::string name, Collective kind, double bytes, const GroupPlacement& group, std::vector<int> deps) {
    if (group.size <= 1) return deps.empty() ? -1 : deps.front();
    return add({std::move(name), OpStream::tp, cost_.collective_s(kind, bytes, group), 1, false, std::move(deps),
                collective_sent_bytes(kind, bytes, group), {}, {}});
  }
  // One ring step of a TP collective split for overlap: `bytes` to the next rank.
  int tp_step(std::string name, double bytes, bool network, std::vector<int> deps) {
    LinkBytes sent;
    (network ? sent.network : sent.nvlink) = bytes;
    return add({std::move(name), OpStream::tp, cost_.p2p_s(bytes, network ? Link::network : Link::nvlink), 1, false,
                std::move(deps), sent, {}, {}});
  }
  // A ZeRO-3 collective of the layer's parameters or gradients over the DP×CP shards.
  int dp(std::string name, Collective kind, double bytes, const GroupPlacement& group, std::vector<int> deps) {
    if (group.size <= 1) return -1;
    return add({std::move(name), OpStream::dp, cost_.collective_s(kind, bytes, group), 1, false, std::move(deps),
                collective_sent_bytes(kind, bytes, group), {}, {}});
  }
  // A copy on the dp stream (DeepSpeed's, beside its collectives): an HBM pass of `bytes`.
  int dp_copy(std::string name, double bytes, std::vector<int> deps) {
    const int i = add({std::move(name), OpStream::dp, cost_.memory_bound_s(bytes), 1, false, std::move(deps), {}, {}, {}});
    ops_[static_cast<size_t>(i)].hbm_bytes = bytes;
    return i;
  }
  // The attention core waiting for CP transfers it could not hide (priced by the attention-plan
  // simulation, which already ran the transfers beside the tiles).
  int cp_wait(double s, std::vector<int> deps) {
    if (s <= 0) return -1;
    return add({"cp wait", OpStream::cp, s, 0, false, std::move(deps), {}, {}, {}});
  }
  // The ops added from here on run in module `m` (LayerOp::module).
  void enter(LayerModule m) { module_ = m; }
  // The forward calls module `m`: enter(m), and the next op the host issues (one with kernels)
  // opens the call (LayerOp::module_call) — a CP wait, which issues nothing, does not.
  void call(LayerModule m) {
    enter(m);
    call_pending_ = true;
  }
  // Appends `ops` (another list: the forward, run again) as recomputed ops, its deps shifted;
  // the first op also reads `after`.
  int append(const OpList& ops, const std::string& prefix, int after) {
    const int base = static_cast<int>(ops_.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      LayerOp op = ops[i];
      op.name = prefix + op.name;
      for (int& d : op.deps) d += base;
      if (i == 0 && after >= 0) op.deps.push_back(after);
      op.recomputed = true;
      ops_.push_back(std::move(op));
    }
    return static_cast<int>(ops_.size()) - 1;
  }
  int last() const { return static_cast<int>(ops_.size()) - 1; }
  OpList take() { return std::move(ops_); }

 private:
  int add(LayerOp op) {
    std::erase_if(op.deps, [](int d) { return d < 0; });
    op.module = module_;
    if (op.kernels > 0) op.module_call = std::exchange(call_pending_, false);
    ops_.push_back(std::move(op));
    return last();
  }
  const CostModel& cost_;
  OpList ops_;
  LayerModule module_ = LayerModule::none;
  bool call_pending_ = false;
};

// The attention core (scores, softmax, weighted sum) of a micro-batch on one TP rank, without CP.
// A flash core is one kernel of a measured family (`kernel`, `shape`: LayerOp's).
struct CoreCost {
  double s = 0;
  int kernels = 0;
  std::string kernel;
  std::map<std::string, double> shape;
};
CoreCost attention_core(const CostModel& cost, const ModelShape& m, const ParallelConfig& layout,
                        const PlanMicroBatch& mb, bool backward) {
  CoreCost p;
  const int64_t heads = m.heads / layout.tp;
  const int64_t d = m.head_dim();
  if (layout.attention_kernel == "flash") {
    // One varlen kernel over the packed sequences; mean_len = 2·pairs / query rows makes the
    // cost model's per-row overhead exact for the pack (attention_sim.h uses the same rule).
    double pairs = 0, rows = 0;
    for (int64_t L : mb.padded_lengths()) {
      pairs += 0.5 * static_cast<double>(L) * static_cast<double>(L + 1);  // causal
      rows += static_cast<double>(L);
    }
    const double mean_len = rows > 0 ? 2 * pairs / rows : 0;
    p.s = backward ? cost.flash_attention_bwd_s(pairs, heads, d, mean_len)
                   : cost.flash_attention_fwd_s(pairs, heads, d, mean_len);
    p.kernels = 1;
    p.kernel = backward ? "flash_attention_bwd" : "flash_attention_fwd";
    p.shape = {{"pairs", pairs}, {"heads", double(heads)}, {"head_dim", double(d)}, {"mean_len", mean_len}};
    return p;
  }
  // Unfused (Megatron 2021): per sequence length, batched GEMMs over (sequences × heads); the
  // scores S and probabilities P (s×s per head) go through HBM for the fused scale-mask-softmax
  // and for dropout (a 1-byte mask). Forward: S=QKᵀ, P=softmax(S), P'=dropout(P), O=P'V.
  std::map<int64_t, int64_t> count;
  for (int64_t L : mb.padded_lengths()) ++count[L];
  for (const auto& [s, n] : count) {
    const int64_t batch = n * heads;
    const double scores_bytes = kAct * static_cast<double>(batch) * s * s;
    if (!backward) {
      p.s += cost.gemm_s(s, s, d, batch) + cost.gemm_s(s, d, s, batch);
      if (layout.elementwise_fusion) {
        p.s += cost.memory_bound_s(2 * scores_bytes);  // fused scale-mask-softmax: read S, write P
      } else {
        // masked_fill_ then softmax, each reading and writing the scores. Megatron's SC'21 runs
        // leave --apply-query-key-layer-scaling off (examples/sc21/CONFIG.sh), so there is no
        // extra scale kernel (1/√d is baddbmm's alpha) and the softmax stays in fp16.
        for (int k = 0; k < 2; ++k) p.s += cost.memory_bound_s(2 * scores_bytes);
      }
      p.s += cost.memory_bound_s(2 * scores_bytes + scores_bytes / 2);  // dropout: read P, write P', mask
      p.kernels += layout.elementwise_fusion ? 4 : 5;
    } else {
      // dP' = dO·Vᵀ, dV = P'ᵀ·dO, dS = softmax'(dropout'(dP')), dQ = dS·K, dK = dSᵀ·Q.
      p.s += cost.gemm_s(s, s, d, batch) + 3 * cost.gemm_s(s, d, s, batch);
      p.s += cost.memory_bound_s(2 * scores_bytes + scores_bytes / 2);  // dropout bwd
      p.s += cost.memory_bound_s(3 * scores_bytes);  // softmax bwd: P, dP in; dS out
      p.kernels += 6;
      if (!layout.elementwise_fusion) {  // masked_fill_ backward reads and writes dS
        p.s += cost.memory_bound_s(2 * scores_bytes);
        p.kernels += 1;
      }
    }
  }
  return p;
}

// The attention core's op(s) of one pass: the wait on CP transfers, then the kernels; backward,
// then the wait for the gradient partials still on their way home (AttentionCost::bwd_tail_s).
// The wait starts after `wait_after` when given (the K/V producer, cp_comm_overlap), else after
// `input`.
struct AttentionOps {
  int kernels = -1;  // the attention kernels
  int done = -1;     // what reads the attention's gradients waits for: the tail, else the kernels
};
AttentionOps attention_ops(OpBuilder& b, const CostModel& cost, const ModelShape& m, const ParallelConfig& layout,
                           const PlanMicroBatch& mb, const AttentionCost* attention, bool backward, int input,
                           const std::string& prefix = "", int wait_after = -1) {
  AttentionOps out;
  if (attention) {
    const double total = backward ? attention->bwd_s : attention->fwd_s;
    const double wait = backward ? attention->bwd_wait_s : attention->fwd_wait_s;
    const double tail = backward ? attention->bwd_tail_s : 0.0;
    const int w = b.cp_wait(wait - tail, {wait_after >= 0 ? wait_after : input});
    // One kernel per CP stage (ring step) of the attention plan.
    out.kernels = b.compute(prefix + (backward ? "attention bwd" : "attention"), total - wait, {input, w},
                            static_cast<int>(std::max<int64_t>(1, mb.cp)));
    const int t = b.cp_wait(tail, {out.kernels});
    out.done = t >= 0 ? t : out.kernels;
    return out;
  }
  const CoreCost c = attention_core(cost, m, layout, mb, backward);
  out.kernels = out.done = b.compute(prefix + (backward ? "attention bwd" : "attention"), c.s, {input}, c.kernels);
  if (!c.kernel.empty()) b.measured_as(out.kernels, c.kernel, c.shape);
  return out;
}

// One transformer layer of one micro-batch on one TP rank, lowered to ops. The recipes — forward()
// and backward() — read as the layer runs; the pieces they call are named below them: Megatron's
// tensor-parallel linears (column- and row-parallel, forward and backward, with or without
// TransformerEngine's ring-exchange overlap), the attention core, ZeRO-3's parameter gathers and
// gradient reduce-scatter, and activation recomputation.
class LayerLowering {
 public:
  LayerLowering(const CostModel& cost, const ModelShape& m, const ParallelConfig& layout, const PlanMicroBatch& mb,
                const AttentionCost* attention, Zero3Gather gather)
      : cost_(cost), m_(m), layout_(layout), mb_(mb), attention_(attention), recompute_(parse_recompute(layout.recompute)),
        t_(layout.tp), T_(mb.rank_tokens()), h_(m.hidden), qkv_{T_, (h_ + 2 * m.kv_dim()) / t_, h_},
        proj_{T_, h_, h_ / t_}, fc1_{T_, (m.gated_mlp ? 2 : 1) * m.ffn_hidden / t_, h_}, fc2_{T_, h_, m.ffn_hidden / t_},
        tp_(tp_group(cost, layout)), sp_(layout.sequence_parallel), a_bytes_(kAct * static_cast<double>(T_) * h_),
        overlap_(sp_ && layout.tp_comm_overlap && tp_.size > 1), tp_network_(tp_.ranks_per_node < tp_.size),
        chunks_(overlap_ ? t_ : 1), zero3_(layout.zero3 && layout.dp() * layout.cp > 1),
        per_parameter_(zero3_ && layout.zero3_sharding == "per_parameter"),
        deepspeed_(zero3_ && layout.zero3_sharding == "deepspeed"),
        cp_overlap_(layout.cp_comm_overlap && attention && mb.cp > 1),
        layer_params_(static_cast<double>(param_count(m, 0).per_layer) / t_),
        forward_gather_(gather.forward >= 0 ? gather.forward : layer_params_),
        backward_gather_(gather.backward >= 0 ? gather.backward : layout.zero3_reshard_after_forward ? layer_params_ : 0),
        bucket_copied_(gather.bucket_copied >= 0 ? gather.bucket_copied : layer_params_),
        shards_(placement(layout.dp() * layout.cp, t_, cost.cluster().gpus_per_node)) {
    // Element-wise traffic (bytes): each norm reads x and writes y; the MLP activation (bias + GeLU
    // reads and writes ffn/t per token; SwiGLU reads two halves); each fused bias-dropout-residual
    // add reads x and the residual, writes, and writes a 1-byte mask. With sequence parallelism the
    // norms and residual adds see T/t tokens. Without Megatron's fusions (elementwise_fusion false)
    // the bias add, the activation and the bias, dropout and residual adds are separate kernels:
    // the MLP activation reads and writes its tensor twice (bias add, GeLU; bias-free SwiGLU:
    // activation 2 passes + product 3, against 3 fused) in 2 kernels, each bias-dropout-add becomes
    // add (2 passes) + dropout (2.5) + add (3) = 7.5 in 3 kernels. Backward reads the saved input
    // and the incoming gradient and writes the input gradient: 1.5× the forward's traffic.
    const bool fused = layout.elementwise_fusion;
    const double norm_tokens = sp_ ? static_cast<double>(T_) / t_ : T_;
    norm_bytes_ = kAct * 2 * norm_tokens * h_;
    act_bytes_ = kAct * (m.gated_mlp ? (fused ? 3 : 5) : (fused ? 2 : 4)) * static_cast<double>(T_) * m.ffn_hidden / t_;
    bda_bytes_ = kAct * (fused ? 3.5 : 7.5) * norm_tokens * h_;
    act_kernels_ = fused ? 1 : 2;
    bda_kernels_ = fused ? 1 : 3;
  }

  // Norm, QKV, attention, projection, bias-dropout-add; norm, FC1, activation, FC2,
  // bias-dropout-add — under ZeRO-3 with the next layer's parameters gathered beside it.
  OpList forward() const {
    OpBuilder f(cost_);
    f.enter(LayerModule::norm1);
    const int n1 = f.elementwise("norm1", norm_bytes_, {copy_out_parameters(f, -1)});
    const int gather = prefetch_next_layer(f, n1, forward_gather_);
    f.call(LayerModule::qkv);
    const auto [q, kv] = qkv_forward(f, n1);
    f.call(LayerModule::core_attention);
    const int a = attention_ops(f, cost_, m_, layout_, mb_, attention_, false, q, "", kv).done;
    f.call(LayerModule::proj);
    const int b1 = f.elementwise("bias-dropout-add1", bda_bytes_, {row_forward(f, "proj", proj_, a)}, bda_kernels_);
    f.enter(LayerModule::norm2);
    const int n2 = f.elementwise("norm2", norm_bytes_, {b1});
    f.call(LayerModule::fc1);
    const int f1 = column_forward(f, "fc1", fc1_, n2);
    const int act = f.elementwise("activation", act_bytes_, {f1}, act_kernels_);
    f.call(LayerModule::fc2);
    const int b2 = f.elementwise("bias-dropout-add2", bda_bytes_, {row_forward(f, "fc2", fc2_, act), b1}, bda_kernels_);
    wait_for_gather(f, gather, b2);
    return f.take();
  }

  // The forward's ops in reverse, each linear's dgrad and wgrad, after the recomputation the
  // layout asks for; under ZeRO-3 the gradients reduce-scattered at the end.
  OpList backward(const OpList& forward) const {
    OpBuilder bw(cost_);
    int start = layout_.zero3_reshard_after_forward ? copy_out_parameters(bw, -1) : -1;
    if (recompute_ == Recompute::full) start = recompute_layer(bw, forward, start);
    // Each op in the module whose backward hook fired last before it: a module's hook fires once
    // the gradient of its output exists, so the element-wise backward that makes it belongs to
    // the module before — bias-dropout-add2's to the layer's own hook, which has no tensors to
    // wait for: it is counted with FC2's.
    bw.enter(LayerModule::fc2);
    const int b2 = bw.elementwise("bias-dropout-add2 bwd", 1.5 * bda_bytes_, {start}, bda_kernels_);
    const int gather = backward_gather_ > 0 ? prefetch_next_layer(bw, b2, backward_gather_) : -1;
    const int f2 = row_backward(bw, "fc2", fc2_, recompute_for_wgrad(bw, "activation", act_bytes_, b2, act_kernels_));
    const int act = bw.elementwise("activation bwd", 1.5 * act_bytes_, {f2}, act_kernels_);
    bw.enter(LayerModule::fc1);
    const int f1 = column_backward(bw, "fc1", fc1_, recompute_for_wgrad(bw, "norm2", norm_bytes_, act, 1));
    bw.enter(LayerModule::norm2);
    const int n2 = bw.elementwise("norm2 bwd", 1.5 * norm_bytes_, {f1});
    const int b1 = bw.elementwise("bias-dropout-add1 bwd", 1.5 * bda_bytes_, {n2, b2}, bda_kernels_);
    bw.enter(LayerModule::proj);
    int pr = row_backward(bw, "proj", proj_, b1);
    bw.enter(LayerModule::core_attention);
    if (recompute_ == Recompute::selective) pr = recompute_attention(bw, pr);
    // The attention's transfers start with its kernels, once the projection's backward is done
    // (autograd runs the linear's dgrad and wgrad, then the attention's backward): a stall of the
    // attention plan cannot hide behind the projection's weight gradient.
    const AttentionOps a = attention_ops(bw, cost_, m_, layout_, mb_, attention_, true, pr, "", bw.last());
    bw.enter(LayerModule::qkv);
    const int qkv = qkv_backward(bw, a);
    bw.enter(LayerModule::norm1);
    const int n1 = bw.elementwise("norm1 bwd", 1.5 * norm_bytes_, {qkv});
    if (zero3_) reduce_scatter_gradients(bw, n1);
    wait_for_gather(bw, gather, n1);
    return bw.take();
  }

 private:
  // ---- the QKV projection ------------------------------------------------------------------------
  // (Q, K/V): with cp_comm_overlap (Kwai's CP) the K and V columns first, so the CP all-gather of
  // K/V (the attention's wait) runs beside the Q GEMM; else one QKV GEMM the wait follows (K/V -1).
  std::pair<int, int> qkv_forward(OpBuilder& b, int in) const {
    if (!cp_overlap_) return {column_forward(b, "qkv", qkv_, in), -1};
    const int kv = column_forward(b, "qkv (k, v)", Gemm{T_, 2 * m_.kv_dim() / t_, h_}, in);
    return {b.gemm("qkv (q)", Gemm{T_, h_ / t_, h_}, {kv}), kv};
  }
  // With cp_comm_overlap, the Q columns' backward runs while dK/dV go home (the reduce-scatter of
  // the all-gathered K/V's gradients); else the QKV backward waits for them.
  int qkv_backward(OpBuilder& b, const AttentionOps& a) const {
    if (cp_overlap_ && a.done != a.kernels) {
      const Gemm kv_part{T_, 2 * m_.kv_dim() / t_, h_};
      return column_backward(b, "qkv (q)", Gemm{T_, h_ / t_, h_}, recompute_for_wgrad(b, "norm1", norm_bytes_, a.kernels, 1),
                             "qkv (k, v)", &kv_part, a.done);
    }
    return column_backward(b, "qkv", qkv_, recompute_for_wgrad(b, "norm1", norm_bytes_, a.done, 1));
  }

  // ---- tensor-parallel linears ---------------------------------------------------------------------
  // TP collectives of activations [T, h] (16-bit). Megatron's f (before the column-parallel GEMMs)
  // and g (after the row-parallel ones): without SP, f is the identity forward and an all-reduce
  // backward, g an all-reduce forward and the identity backward; with SP, f all-gathers forward
  // and reduce-scatters backward, g the reverse.
  int f_forward(OpBuilder& b, int in) const {
    return sp_ ? b.tp("tp all-gather", Collective::all_gather, a_bytes_, tp_, {in}) : in;
  }
  int g_forward(OpBuilder& b, int in) const {
    return b.tp(sp_ ? "tp reduce-scatter" : "tp all-reduce", sp_ ? Collective::reduce_scatter : Collective::all_reduce,
                a_bytes_, tp_, {in});
  }
  int g_backward(OpBuilder& b, int in) const {
    return sp_ ? b.tp("tp all-gather", Collective::all_gather, a_bytes_, tp_, {in}) : in;
  }

  // tp_comm_overlap (TransformerEngine userbuffers, ring exchange): a GEMM over the all-gathered
  // [T, ·] input runs as tp chunk GEMMs of T/tp rows, chunk i once the ring step bringing it has
  // arrived (chunk 0 is local); a GEMM whose output is reduce-scattered runs as tp chunk GEMMs,
  // each partial sent on to the next rank (added to what arrived) as soon as it is computed. The
  // ring steps move a_bytes/tp each, tp − 1 of them: the bytes of the blocking collectives.
  // TransformerEngine issues the chunk GEMMs round-robin on up to three compute streams
  // (NVTE_COMM_OVERLAP_MAX_STREAMS = 3, transformer_engine/common/comm_gemm_overlap; the GEMMs of
  // CommOverlapP2PBase run on _stream_compute[i % 3]), so a chunk whose data is there runs beside
  // the previous ones and their waves share the SMs: a chunk costs its share of one GEMM over
  // that many chunks' rows, plus its own launch.
  static constexpr int64_t kTeComputeStreams = 3;
  using GemmTime = Gemm (*)(const Gemm&);
  double chunk_s(GemmTime pass, const Gemm& g) const {
    const int64_t rows = (g.m + chunks_ - 1) / chunks_, together = std::min(chunks_, kTeComputeStreams);
    const double launch = cost_.params().kernel_overhead_us * 1e-6;
    const Gemm k = pass(Gemm{together * rows, g.n, g.k});
    return (cost_.gemm_s(k.m, k.n, k.k) - launch) / static_cast<double>(together) + launch;
  }
  // All-gather + GEMM; returns the last chunk GEMM, `arrived` the last ring step (-1 without).
  int all_gather_gemm(OpBuilder& b, const std::string& name, const Gemm& g, GemmTime time, int in, int* arrived) const {
    int step = -1, gemm = -1;
    for (int64_t i = 0; i < chunks_; ++i) {
      gemm = b.compute(name + " chunk " + std::to_string(i), chunk_s(time, g), {i == 0 ? in : step});
      if (i + 1 < chunks_) step = b.tp_step("tp ring all-gather step", a_bytes_ / t_, tp_network_, {i == 0 ? in : step});
    }
    if (arrived) *arrived = step;
    return gemm;
  }
  // GEMM + reduce-scatter; returns the op completing this rank's reduced chunk.
  int gemm_reduce_scatter(OpBuilder& b, const std::string& name, const Gemm& g, GemmTime time, int in) const {
    int step = -1, gemm = -1;
    for (int64_t i = 0; i < chunks_; ++i) {
      gemm = b.compute(name + " chunk " + std::to_string(i), chunk_s(time, g), {in});
      if (i + 1 < chunks_) step = b.tp_step("tp ring reduce-scatter step", a_bytes_ / t_, tp_network_, {gemm, step});
    }
    return step >= 0 ? step : gemm;
  }

  // Forward GEMMs fed by f (column-parallel: QKV, FC1), and feeding g (row-parallel: proj, FC2).
  int column_forward(OpBuilder& b, const std::string& name, const Gemm& g, int in) const {
    return overlap_ ? all_gather_gemm(b, name, g, fwd, in, nullptr) : b.gemm(name, fwd(g), {f_forward(b, in)});
  }
  int row_forward(OpBuilder& b, const std::string& name, const Gemm& g, int in) const {
    return overlap_ ? gemm_reduce_scatter(b, name, g, fwd, in) : g_forward(b, b.gemm(name, fwd(g), {in}));
  }

  // Backward of a column-parallel GEMM (QKV, FC1) fed by f: with SP, Megatron all-gathers the
  // input again for the weight gradient (issued before the dgrad GEMM, beside it) and
  // reduce-scatters dX beside the wgrad GEMM; without SP the all-reduce of dX runs beside wgrad
  // with async_tensor_model_parallel_allreduce, else after the whole backward of the linear
  // (Megatron-LM of 2021). Returns the op producing dX.
  // With `late` (cp_comm_overlap's backward, Kwai's CP): `g` is the part of the output columns
  // whose gradient is ready (Q) and `late_g` the part whose gradient arrives with `late` (dK/dV
  // coming home): g's weight gradient — and without tp_comm_overlap its dgrad, which dX
  // accumulates — run before `late`, late_g's after it, and dX is reduced once, as one GEMM's.
  int column_backward(OpBuilder& b, const std::string& name, const Gemm& g, int grad, const std::string& late_name = "",
                      const Gemm* late_g = nullptr, int late = -1) const {
    const int regather =
        sp_ && tp_.size > 1 ? b.tp("tp all-gather (wgrad input)", Collective::all_gather, a_bytes_, tp_, {grad}) : -1;
    if (overlap_) {  // dgrad chunks feeding the ring reduce-scatter; wgrad beside, on the re-gathered input
      if (late_g) {
        b.gemm(name + " wgrad", wgrad(g), {grad, regather});
        const int reduced = gemm_reduce_scatter(b, name + "+" + late_name + " dgrad", Gemm{g.m, g.n + late_g->n, g.k}, dgrad, late);
        b.gemm(late_name + " wgrad", wgrad(*late_g), {late, regather});
        return reduced;
      }
      const int reduced = gemm_reduce_scatter(b, name + " dgrad", g, dgrad, grad);
      b.gemm(name + " wgrad", wgrad(g), {grad, regather});
      return reduced;
    }
    int d = b.gemm(name + " dgrad", dgrad(g), {grad});
    if (late_g) {
      b.gemm(name + " wgrad", wgrad(g), {grad, regather});
      d = b.gemm(late_name + " dgrad", dgrad(*late_g), {d, late});
    }
    const bool beside = sp_ || layout_.async_tensor_model_parallel_allreduce;
    int reduced = beside ? b.tp(sp_ ? "tp reduce-scatter" : "tp all-reduce",
                                sp_ ? Collective::reduce_scatter : Collective::all_reduce, a_bytes_, tp_, {d})
                         : -1;
    const int w = late_g ? b.gemm(late_name + " wgrad", wgrad(*late_g), {late, regather})
                         : b.gemm(name + " wgrad", wgrad(g), {grad, regather});
    if (!beside) reduced = b.tp("tp all-reduce", Collective::all_reduce, a_bytes_, tp_, {d, w});
    return reduced == d || reduced < 0 ? d : reduced;
  }
  // Backward of a row-parallel GEMM (proj, FC2), its output gradient all-gathered by g's backward
  // (`grad` is the op before the gather); the wgrad needs the whole gathered gradient.
  int row_backward(OpBuilder& b, const std::string& name, const Gemm& g, int grad) const {
    if (overlap_) {
      int arrived = -1;
      const int d = all_gather_gemm(b, name + " dgrad", g, dgrad, grad, &arrived);
      b.gemm(name + " wgrad", wgrad(g), {d, arrived});
      return d;
    }
    const int gathered = g_backward(b, grad);
    const int d = b.gemm(name + " dgrad", dgrad(g), {gathered});
    b.gemm(name + " wgrad", wgrad(g), {gathered});
    return d;
  }

  // ---- ZeRO-3 ---------------------------------------------------------------------------------------
  // The layer's parameters (this TP rank's share, 16-bit) live sharded over the DP×CP ranks. Each
  // layer copy all-gathers the NEXT layer's parameters once its first kernel ran (FSDP's forward
  // prefetch, one layer ahead) and ends with a zero-length op waiting for them, so a gather slower
  // than the layer's compute is exposed; the first layer of a chunk is taken as prefetched during
  // the op before. Backward: the same gather with reshard_after_forward, and the layer's gradients
  // reduce-scattered once its backward is done. Under DeepSpeed the gathers are as many elements
  // as its coordinator gathers for the pass (forward_gather_, backward_gather_; deepspeed_zero3.h).
  // DeepSpeed (0.6 and later) copies on its streams: each gathered parameter rebuilt from the
  // rank-major output by one torch.cat before the compute may use it (partition_parameters.py
  // AllGatherCoalescedHandle.wait), and each gradient copied into the reduce bucket, then the
  // bucket re-interleaved by rank for the reduce-scatter (stage3.py __add_grad_to_ipg_bucket, not
  // for a tensor of reduce_bucket_size elements or more, bucket_copied_; coalesced_collectives.py
  // reduce_scatter_coalesced, every tensor); the 1/n-sized copies of the shards are left out.
  int prefetch_next_layer(OpBuilder& b, int after, double elements) const {
    if (!zero3_) return -1;
    const double bytes = zero3_element_bytes(Collective::all_gather, layout_) * elements;
    const int gather = b.dp("dp param all-gather (next layer)", Collective::all_gather, bytes, shards_, {after});
    return deepspeed_ && gather >= 0 ? b.dp_copy("dp param rebuild", 2 * bytes, {gather}) : gather;
  }
  void wait_for_gather(OpBuilder& b, int gather, int last) const {
    if (gather >= 0) b.compute(kZero3WaitOp, 0, {last, gather}, 0);
  }
  void reduce_scatter_gradients(OpBuilder& b, int after) const {
    const double reduced = zero3_element_bytes(Collective::reduce_scatter, layout_);  // per element
    if (per_parameter_)  // FSDP2: the gradients (16-bit) copied into the reduce-scatter input, in its dtype
      after = b.elementwise("dp grad copy-in", (kAct + reduced) * layer_params_, {after});
    if (deepspeed_ && shards_.size > 1)  // into the bucket, then re-interleaved (both on the reduce stream)
      after = b.dp_copy("dp grad bucket copy", deepspeed_bucket_copy_bytes(bucket_copied_, layer_params_, reduced), {after});
    b.dp("dp grad reduce-scatter", Collective::reduce_scatter, reduced * layer_params_, shards_, {after});
  }
  // FSDP2: this layer's parameters copied out of their all-gather's output (read and write, 16-bit)
  // before its first kernel; -1 (no op) otherwise.
  int copy_out_parameters(OpBuilder& b, int after) const {
    return per_parameter_
               ? b.elementwise(kZero3CopyOutOp, 2 * zero3_element_bytes(Collective::all_gather, layout_) * layer_params_, {after})
               : after;
  }

  // ---- recomputation ----------------------------------------------------------------------------------
  // Full: the layer's forward again, under ZeRO-3 on the parameters the backward gathered (no
  // gather of its own).
  int recompute_layer(OpBuilder& b, const OpList& forward, int after) const {
    return b.append(without_zero3_ops(forward), "recompute ", after);
  }
  // Balanced checkpointing (Kwai's GEMM-last): the element-wise output a weight gradient reads —
  // the MLP activation's for FC2, each norm's for FC1 and QKV — recomputed right before it.
  int recompute_for_wgrad(OpBuilder& b, const std::string& name, double bytes, int in, int kernels) const {
    return recompute_ == Recompute::balanced ? b.elementwise("recompute " + name, bytes, {in}, kernels) : in;
  }
  // Selective (Korthikanti et al.): only the attention core's forward, right before its backward.
  int recompute_attention(OpBuilder& b, int in) const {
    b.call(LayerModule::core_attention);  // the checkpointed core attention's forward, run again
    return attention_ops(b, cost_, m_, layout_, mb_, attention_, false, in, "recompute ").done;
  }

  const CostModel& cost_;
  const ModelShape& m_;
  const ParallelConfig& layout_;
  const PlanMicroBatch& mb_;
  const AttentionCost* attention_;
  const Recompute recompute_;
  const int64_t t_, T_, h_;
  const Gemm qkv_, proj_, fc1_, fc2_;
  const GroupPlacement tp_;
  const bool sp_;
  const double a_bytes_;  // an activation [T, h], 16-bit: what a TP collective moves
  const bool overlap_, tp_network_;
  const int64_t chunks_;
  const bool zero3_, per_parameter_, deepspeed_, cp_overlap_;
  const double layer_params_;
  const double forward_gather_, backward_gather_;  // ZeRO-3: elements gathered ahead of each pass
  const double bucket_copied_;  // DeepSpeed: of the layer's gradients, those copied into the reduce bucket
  const GroupPlacement shards_;
  double norm_bytes_ = 0, act_bytes_ = 0, bda_bytes_ = 0;
  int act_kernels_ = 1, bda_kernels_ = 1;
};

}  // namespace

PassCost& PassCost::operator+=(const PassCost& o) {
  compute_s += o.compute_s;
  tp_comm_s += o.tp_comm_s;
  cp_wait_s += o.cp_wait_s;
  dp_comm_s += o.dp_comm_s;
  host_s += o.host_s;
  sm_bound_s += o.sm_bound_s;
  contention_s += o.contention_s;
  kernels += o.kernels;
  tp_bytes += o.tp_bytes;
  dp_bytes += o.dp_bytes;
  return *this;
}

PassCost PassCost::operator*(double k) const {
  PassCost p = *this;
  p.compute_s *= k;
  p.tp_comm_s *= k;
  p.cp_wait_s *= k;
  p.dp_comm_s *= k;
  p.host_s *= k;
  p.sm_bound_s *= k;
  p.contention_s *= k;
  p.kernels = static_cast<int>(p.kernels * k);
  p.tp_bytes = p.tp_bytes * k;
  p.dp_bytes = p.dp_bytes * k;
  return p;
}

GroupPlacement placement(int64_t size, int64_t stride, int64_t gpus_per_node) {
  if (size <= 1) return {1, 1};
  int64_t per_node = stride >= gpus_per_node ? 1 : std::min(size, gpus_per_node / stride);
  return {size, std::max<int64_t>(1, per_node)};
}

LayerOps lower_layer(const CostModel& cost, const ModelShape& m, const ParallelConfig& layout,
                     const PlanMicroBatch& mb, const AttentionCost* attention, Zero3Gather gather) {
  if (mb.lengths.empty()) return {};  // an idle slot
  const LayerLowering layer(cost, m, layout, mb, attention, gather);
  LayerOps out;
  out.forward = layer.forward();
  out.backward = layer.backward(out.forward);
  return out;
}

LayerOps lower_embedding(const CostModel& cost, const ModelShape& m, const ParallelConfig& layout,
                         const PlanMicroBatch& mb) {
  // Gather rows of the (vocabulary-parallel) table, add positions, all-reduce over TP.
  const double bytes = kAct * static_cast<double>(mb.rank_tokens()) * m.hidden;
  if (bytes <= 0) return {};
  OpBuilder f(cost), b(cost);
  f.call(LayerModule::none);  // Megatron's VocabParallelEmbedding
  f.tp("tp all-reduce", Collective::all_reduce, bytes, tp_group(cost, layout),
       {f.elementwise("embedding", 3 * bytes, {})});
  // Backward: the table's dense 16-bit gradient zero-filled, the token rows' gradients
  // scatter-added into it (memory.h embedding_gradient_bytes), then, with Megatron's DDP, added
  // into main_grad by the parameter's hook (read 2 and the main gradient, write it): weight-
  // gradient fusion covers the linears only, and without it chunk_cost adds every parameter's.
  const double table = kAct * static_cast<double>(m.vocab) / static_cast<double>(layout.tp) * static_cast<double>(m.hidden);
  int last = b.elementwise("embedding grad zero fill", table, {});
  last = b.elementwise("embedding bwd", 3 * bytes, {last});  // scatter-add of the gradient rows
  if (!layout.zero3 && layout.gradient_accumulation_fusion)
    b.elementwise("embedding grad into main_grad", table + 2 * layout.grad_bytes() * table / kAct, {last});
  return {f.take(), b.take()};
}

LayerOps lower_output_layer(const CostModel& cost, const ModelShape& m, const ParallelConfig& layout,
                            const PlanMicroBatch& mb) {
  const int64_t T = mb.rank_tokens();
  if (T == 0) return {};
  const Gemm logits{T, m.vocab / layout.tp, m.hidden};
  const double entries = static_cast<double>(T) * m.vocab / layout.tp, logit_bytes = 4.0 * entries;
  const GroupPlacement tp = tp_group(cost, layout);
  // No module call: the output layer's comes after the last layer's, the host ahead of the device
  // there, and this pass is priced apart (the host would start it with the device).
  OpBuilder f(cost), b(cost);
  int last = f.gemm("logits", fwd(logits), {});
  int g = -1;
  if (layout.loss == "torch") {
    // cross_entropy(logits.float()): the cast (read 2, write 4 bytes per logit), log_softmax in
    // fp32 — rows of V entries are past what ATen's shared-memory and register kernels hold, so
    // cunn_SoftMaxForward reads each row for its max, again for its sum of exponentials and again
    // to write it (aten/src/ATen/native/cuda/SoftMax.cu) — and nll_loss's gather of T targets.
    // Backward: nll_loss's gradient (a zero fill of 4 bytes per logit, the targets scattered),
    // log_softmax's (cunn_SoftMaxBackward: the gradient read for its row sum, then it and the
    // output read and the input gradient written), the cast's (read 4, write 2).
    last = f.elementwise("logits to fp32", 6 * entries, {last});
    f.elementwise("log_softmax", 4 * logit_bytes, {last});
    g = b.elementwise("nll_loss bwd", logit_bytes, {});
    g = b.elementwise("log_softmax bwd", 4 * logit_bytes, {g});
    g = b.elementwise("fp32 to logits bwd", 6 * entries, {g});
  } else {
    // Vocabulary-parallel cross-entropy in fp32: the logits' max, sum of exponentials and target
    // logit, each a pass over the logits followed by an all-reduce of [T] fp32 statistics.
    for (const char* pass : {"logits max", "sum exp", "target logit"})
      last = f.tp("tp all-reduce", Collective::all_reduce, 4.0 * T, tp, {f.elementwise(pass, logit_bytes, {last})});
    g = b.elementwise("cross-entropy bwd", 2 * logit_bytes, {});
  }
  const int d = b.gemm("logits dgrad", dgrad(logits), {g});
  b.gemm("logits wgrad", wgrad(logits), {g});
  b.tp("tp all-reduce", Collective::all_reduce, kAct * static_cast<double>(T) * m.hidden, tp, {d});
  return {f.take(), b.take()};
}

namespace {
// The share of HBM a task moving `bytes` through it for its duration holds.
double hbm_share(const CostModel& cost, double bytes, double duration_s) {
  const double hbm_Bps = cost.cluster().gpu.hbm_bandwidth_GBps * 1e9 * cost.params().hbm_efficiency;
  return duration_s > 0 && hbm_Bps > 0 ? std::min(1.0, bytes / duration_s / hbm_Bps) : 0.0;
}
}  // namespace

void set_contention(const CostModel& cost, TaskSpec& task, const LinkBytes& sent) {
  // comm_sm_fraction 0: communication does not run on the compute device (the CPU executor moves
  // data inside its waits), so it takes neither SMs nor memory bandwidth from the kernels.
  if (cost.params().comm_sm_fraction <= 0) return;
  task.sm_share = cost.params().comm_sm_fraction;
  task.hbm_share = hbm_share(cost, 2 * (sent.nvlink + sent.network), task.duration_s);
}

void append_ops(TaskGraph& graph, const CostModel& cost, const OpList& ops, int copies, int device) {
  constexpr int kHost = 4;
  const double host_s = cost.params().host_op_us * 1e-6, module_s = cost.params().host_module_us * 1e-6;
  int previous_last = -1;
  for (int c = 0; c < copies; ++c) {
    std::vector<int> id(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      const LayerOp& op = ops[i];
      TaskSpec t;
      t.device = device;
      t.stream = static_cast<int>(op.stream);
      t.duration_s = op.duration_s;
      t.name = op.name;
      t.kind = op.stream == OpStream::compute ? 'c' : 'm';
      t.sm_bound = op.sm_bound ? 1 : 0;
      for (int d : op.deps) t.deps.push_back(id[d]);
      if (op.deps.empty() && previous_last >= 0) t.deps.push_back(previous_last);
      if (const double issue_s = op.kernels * host_s + (op.module_call ? module_s : 0); issue_s > 0)
        t.deps.push_back(graph.add({device, kHost, issue_s, {}, -1, -1, "issue " + op.name, 'o'}));
      if (op.stream == OpStream::tp || op.stream == OpStream::dp) set_contention(cost, t, op.bytes);
      if (op.hbm_bytes > 0) t.hbm_share = hbm_share(cost, op.hbm_bytes, t.duration_s);  // a copy beside the compute
      id[i] = graph.add(std::move(t));
    }
    // The next copy follows this copy's last op off the dp stream: ZeRO-3's trailing gradient
    // reduce-scatter runs beside the next layer instead of holding it.
    for (size_t i = ops.size(); i-- > 0;)
      if (ops[i].stream != OpStream::dp) {
        previous_last = id[i];
        break;
      }
  }
}

RepeatedPass price_repeated(const CostModel& cost, const OpList& ops) {
  RepeatedPass out;
  if (ops.empty()) return out;
  // One and two copies through the engine; the second copy's increments are every further one's.
  auto run = [&](int copies) {
    TaskGraph g;
    append_ops(g, cost, ops, copies);
    const SimResult r = simulate(g);
    PassCost p;
    p.compute_s = r.compute_busy_s[0];
    p.contention_s = r.contention_s[0];
    for (size_t i = 0; i < g.size(); ++i)
      if (g.task(static_cast<int>(i)).stream == 0 && g.task(static_cast<int>(i)).sm_bound > 0)
        p.sm_bound_s += r.end_s[i] - r.start_s[i];
    // The exposed communication splits into the CP waits and the TP collectives; the rest of the
    // makespan is the compute stream waiting for the host. A CP wait is exposed for as long as the
    // attention that reads it sat after the compute stream was free and its other inputs were
    // there (all of it when it follows the QKV GEMM; less beside the Q GEMM, cp_comm_overlap).
    double cp_wait = 0;
    {
      double free_s = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        const TaskSpec& t = g.task(static_cast<int>(i));
        if (t.stream != 0) continue;
        double others = free_s, cp_end = -1;
        for (int d : t.deps) {
          if (g.task(d).stream == static_cast<int>(OpStream::cp)) cp_end = std::max(cp_end, r.end_s[d]);
          else if (g.task(d).kind != 'o') others = std::max(others, r.end_s[d]);  // not the host's issue
        }
        if (cp_end >= 0) cp_wait += std::max(0.0, std::min(r.start_s[i], cp_end) - others);
        free_s = r.end_s[i];
      }
    }
    for (const LayerOp& op : ops) {
      if (op.stream == OpStream::tp) p.tp_bytes += op.bytes;
      if (op.stream == OpStream::dp) p.dp_bytes += op.bytes;
      p.kernels += op.kernels;
    }
    // ZeRO-3's exposed gather: how long each wait op sat after the compute stream was free.
    double previous_end = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const TaskSpec& t = g.task(static_cast<int>(i));
      if (t.stream != 0) continue;
      if (t.name == kZero3WaitOp) p.dp_comm_s += std::max(0.0, r.start_s[i] - previous_end);
      previous_end = r.end_s[i];
    }
    p.cp_wait_s = std::min(cp_wait, r.exposed_comm_s[0]);
    p.dp_comm_s = std::min(p.dp_comm_s, r.exposed_comm_s[0] - p.cp_wait_s);
    p.tp_comm_s = std::max(0.0, r.exposed_comm_s[0] - p.cp_wait_s - p.dp_comm_s);
    // The pass ends with its last task off the dp stream: a trailing ZeRO-3 reduce-scatter is the
    // iteration's to wait for (chunk_cost: the pass edges of FSDP and DeepSpeed), not this layer's.
    double pass_end = 0;
    for (size_t i = 0; i < g.size(); ++i)
      if (g.task(static_cast<int>(i)).stream != static_cast<int>(OpStream::dp)) pass_end = std::max(pass_end, r.end_s[i]);
    p.host_s = std::max(0.0, pass_end - p.compute_s - p.tp_comm_s - p.cp_wait_s - p.dp_comm_s);
    p.tp_bytes = p.tp_bytes * copies;
    p.dp_bytes = p.dp_bytes * copies;
    p.kernels *= copies;
    return p;
  };
  out.first = run(1);
  const PassCost two = run(2);
  out.next = two;
  out.next += out.first * -1;
  out.next.host_s = std::max(0.0, out.next.host_s);
  return out;
}

PassCost RepeatedPass::times(double repeats) const {
  if (repeats <= 0) return {};
  PassCost p = first;
  p += next * (repeats - 1);
  return p;
}

PassCost price_ops(const CostModel& cost, const OpList& ops, double repeats) {
  return price_repeated(cost, ops).times(repeats);
}

LayerCost layer_cost(const CostModel& cost, const ModelShape& model, const ParallelConfig& layout,
                     const PlanMicroBatch& mb, const AttentionCost* attention) {
  const LayerOps ops = lower_layer(cost, model, layout, mb, attention);
  return {price_ops(cost, ops.forward), price_ops(cost, ops.backward)};
}

std::string layer_ops_csv(const CostModel& cost, const LayerOps& ops) {
  std::string out = "op,shape,time_s\n";
  char num[64];
  for (const auto& [pass, list] : {std::pair<const char*, const OpList*>{"forward", &ops.forward}, {"backward", &ops.backward}})
    for (const LayerOp& op : *list) {
      if (op.kernel.empty()) continue;
      OpMeasurement m{op.kernel, op.shape, 0};
      std::string shape;
      for (const auto& [k, v] : op.shape) {
        std::snprintf(num, sizeof num, "%.17g", v);
        shape += (shape.empty() ? "" : ";") + k + "=" + num;
      }
      std::snprintf(num, sizeof num, "%.9g", predict_time_s(cost, m));
      out += std::string("# ") + pass + " " + op.name + "\n" + op.kernel + "," + shape + "," + num + "\n";
    }
  return out;
}

}  // namespace cpbench
