// allocator_replay.cpp — the stage's schedule as allocations and frees (see the header for the
// trace's rules), run once through the caching allocator.
#include "core/sim/allocator_replay.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string_view>

#include "core/sim/caching_allocator.h"
#include "core/sim/memory.h"

namespace cpbench {
namespace {

// ---- One layer of one micro-batch as tensors and ops ------------------------------------------

struct Tensor {
  double bytes = 0;
  bool saved = false;     // held from the forward to the backward under the recompute mode
  bool kept = false;      // held under recompute none: what a recomputation brings back
  bool gradient = true;   // the backward materializes a gradient of it (not masks, the LSE)
};
struct Op {
  std::vector<int> in, out;
  double weight_bytes = 0;  // a GEMM's 16-bit weight gradient, a temporary without accumulation fusion
};
// Megatron's decoder layer on one TP rank: tensor 0 is the layer input, the last the output.
struct LayerGraph {
  std::vector<Tensor> tensors;
  std::vector<Op> ops;
  std::vector<int> first_use, last_use;  // [tensor] the first and last forward op reading it, else −1
};

// Sizes of the saved tensors come from layer_activation_tensors (formulas.h) by name, so what the
// replay keeps is what the memory walk counts; the rest are the ops' transient outputs.
LayerGraph layer_graph(const ModelShape& m, const ParallelConfig& L, const std::vector<LayerTensor>& list) {
  LayerGraph g;
  if (list.empty()) return g;  // an empty micro-batch (a rank with no sequences): nothing to allocate
  auto tensor = [&](std::initializer_list<const char*> names, bool gradient = true) {
    Tensor t;
    bool found = false;
    for (const LayerTensor& x : list)
      for (const char* name : names)
        if (std::string_view(x.name) == name) {
          t.bytes += x.bytes;
          t.saved = x.saved;
          t.kept = found = true;
        }
    if (!found) return -1;
    t.gradient = gradient;
    g.tensors.push_back(t);
    return static_cast<int>(g.tensors.size()) - 1;
  };
  auto transient = [&](double bytes) {
    g.tensors.push_back({bytes, false, false, true});
    return static_cast<int>(g.tensors.size()) - 1;
  };
  auto op = [&](std::vector<int> in, std::vector<int> out, double weight_elements = 0) {
    std::erase(in, -1);
    std::erase(out, -1);
    g.ops.push_back({in, out, L.gradient_accumulation_fusion || L.zero3 ? 0 : 2 * weight_elements});  // ZeRO-3: no main_grad
  };
  const double h = static_cast<double>(m.hidden), t = static_cast<double>(L.tp);
  const double H = static_cast<double>(m.ffn_hidden) * (m.gated_mlp ? 2 : 1);
  const double qkv_width = static_cast<double>((m.heads + 2 * m.kv_heads) * m.head_dim());
  const double attention_width = static_cast<double>(m.heads * m.head_dim());
  const int x = tensor({"layer input"});
  const double residual = g.tensors[x].bytes;  // 2·s·b·h, ÷t with SP
  const bool sp = L.sequence_parallel && L.tp > 1;
  // A row-parallel GEMM's output is the whole hidden state, reduced (in place) or reduce-scattered.
  const double row_output = sp ? residual * t : residual;
  const int n1 = tensor({"QKV input"});
  op({x}, {n1});
  const int qkv = tensor({"Q", "K", "V"});
  op({n1}, {qkv}, h * qkv_width / t);
  const int lse = tensor({"LSE"}, false), softmax = tensor({"softmax output"});
  const int mask = tensor({"softmax dropout mask"}, false), dropped = tensor({"softmax dropout output"});
  const int o = tensor({"attention output"});
  op({qkv}, {lse, softmax, mask, dropped, o});
  const int p = transient(row_output);
  op({o}, {p}, attention_width * h / t);
  int p_rank = p;
  if (sp) op({p}, {p_rank = transient(residual)});
  const int m1 = tensor({"attention dropout mask"}, false), y = tensor({"MLP norm input"});
  op({p_rank, x}, {y, m1});
  const int n2 = tensor({"MLP input"});
  op({y}, {n2});
  const int f = tensor({"FC1 output", "gate", "up"});
  op({n2}, {f}, h * H / t);
  const int a = tensor({"GeLU output", "SwiGLU output", "act(gate)", "act(gate)·up"});
  op({f}, {a});
  const int z = transient(row_output);
  op({a}, {z}, static_cast<double>(m.ffn_hidden) * h / t);
  int z_rank = z;
  if (sp) op({z}, {z_rank = transient(residual)});
  const int m2 = tensor({"MLP dropout mask"}, false);
  const int out = transient(residual);
  op({z_rank, y}, {out, m2});
  g.first_use.assign(g.tensors.size(), -1);
  g.last_use.assign(g.tensors.size(), -1);
  for (int i = 0; i < static_cast<int>(g.ops.size()); ++i)
    for (int in : g.ops[i].in) {
      if (g.first_use[in] < 0) g.first_use[in] = i;
      g.last_use[in] = i;
    }
  return g;
}

}  // namespace

std::vector<double> chunk_parameter_tensors(const ModelShape& m, const ParallelConfig& L, int stage, int chunk,
                                            int64_t seq_length) {
  const double h = static_cast<double>(m.hidden), t = static_cast<double>(L.tp);
  const double qkv = static_cast<double>((m.heads + 2 * m.kv_heads) * m.head_dim());
  const double attention = static_cast<double>(m.heads * m.head_dim());
  const double fc1 = static_cast<double>(m.ffn_hidden) * (m.gated_mlp ? 2 : 1), ffn = static_cast<double>(m.ffn_hidden);
  std::vector<double> out;
  auto norm = [&] {
    out.push_back(h);
    if (m.norm == "layernorm") out.push_back(h);
  };
  auto linear = [&](double weight, double bias) {
    out.push_back(weight);
    if (m.bias) out.push_back(bias);
  };
  if (stage == 0 && chunk == 0) {
    out.push_back(static_cast<double>(m.vocab) / t * h);
    if (m.position_embedding == "learned") out.push_back(static_cast<double>(seq_length) * h);
  }
  for (int64_t l = 0; l < chunk_layers(L, m.layers, stage, chunk); ++l) {
    norm();
    linear(qkv / t * h, qkv / t);
    linear(h * attention / t, h);
    norm();
    linear(fc1 / t * h, fc1 / t);
    linear(h * ffn / t, h);
  }
  if (holds_loss(L, stage, chunk)) {
    norm();
    if (!m.tied_embeddings || L.pp > 1) out.push_back(static_cast<double>(m.vocab) / t * h);
  }
  return out;
}

namespace {

// ---- The trace through the allocator -------------------------------------------------------------

using Allocation = CachingAllocator::Allocation;
// [tensor] its block while it lives: one layer's view into a chunk's handles, which hold its
// layers one after another (one buffer a chunk, not one a layer: the replay's hot path).
using Handles = std::span<std::optional<Allocation>>;

class Replay {
 public:
  Replay(bool expandable, double capacity_bytes)
      : allocator_(expandable, capacity_bytes >= static_cast<double>(std::numeric_limits<uint64_t>::max())
                                   ? std::numeric_limits<uint64_t>::max()
                                   : static_cast<uint64_t>(std::max(0.0, capacity_bytes))) {}

  bool ok() const { return ok_; }
  double reserved() const { return static_cast<double>(allocator_.stats().reserved); }

  // A layer's forward: each op's outputs are made, then the inputs no later op reads and the
  // mode does not save are freed. `keep`: the share of saved tensors left on the device (offload).
  // REQUIRES: held[0], the layer input, exists. Leaves the output in held.back().
  void forward(const LayerGraph& g, Handles held, double keep) {
    for (size_t i = 0; i < g.ops.size() && ok_; ++i) {
      const Op& op = g.ops[i];
      for (int out : op.out) held[out] = allocate(g.tensors[out].saved ? keep * g.tensors[out].bytes : g.tensors[out].bytes);
      for (int in : op.in)
        if (!g.tensors[in].saved && g.last_use[in] == static_cast<int>(i)) release(held[in]);
      for (int out : op.out)  // not saved and read by no op (a mask, the LSE under full recompute)
        if (!g.tensors[out].saved && g.last_use[out] < 0 && out + 1 != static_cast<int>(g.tensors.size())) release(held[out]);
    }
  }

  // A layer's backward from the gradient of its output: first the tensors the mode did not save
  // are recomputed (an op runs again when one of its kept outputs is missing; the recomputation's
  // own transients are left out), then the ops in reverse: the gradients of an op's inputs are
  // made (a second gradient into one tensor is made and added), its weight gradient's temporary,
  // then the gradients of its outputs and the tensors no earlier op needs are freed. Leaves the
  // input's gradient in gradients[0].
  void backward(const LayerGraph& g, Handles held, Handles gradients) {
    for (size_t i = 0; i < g.ops.size() && ok_; ++i) {
      const Op& op = g.ops[i];
      if (std::none_of(op.out.begin(), op.out.end(), [&](int t) { return g.tensors[t].kept && !held[t]; })) continue;
      for (int out : op.out)
        if (!held[out] && g.tensors[out].kept) held[out] = allocate(g.tensors[out].bytes);
    }
    for (size_t i = g.ops.size(); i-- > 0 && ok_;) {
      const Op& op = g.ops[i];
      for (int in : op.in) {
        if (!g.tensors[in].gradient) continue;
        auto made = allocate(g.tensors[in].bytes);
        if (gradients[in]) {
          release(made);  // added into the one already there
        } else {
          gradients[in] = made;
        }
      }
      if (op.weight_bytes > 0) {
        auto temporary = allocate(op.weight_bytes);
        release(temporary);  // added into the fp32 main gradient
      }
      for (int out : op.out) {
        release(gradients[out]);
        if (g.first_use[out] < 0) release(held[out]);  // read by no op: a mask, the output
      }
      for (int in : op.in)
        if (g.first_use[in] == static_cast<int>(i)) release(held[in]);
    }
  }

  std::optional<Allocation> allocate(double bytes) {
    const uint64_t n = static_cast<uint64_t>(std::llround(bytes));
    if (n == 0 || !ok_) return std::nullopt;
    auto got = allocator_.allocate(n);
    ok_ = got.has_value();
    return got;
  }
  void release(std::optional<Allocation>& address) {
    if (address) allocator_.free(*address);
    address.reset();
  }

  // Megatron's start-up with the distributed optimizer, before the first step: every chunk's
  // parameters are allocated as the model is built (`chunks`: each chunk's tensors, in elements);
  // then, chunk by chunk, its DDP allocates the 16-bit parameter buffer and the gradient buffer,
  // copies each parameter into the buffer and frees the original, in reverse order
  // (megatron/core/distributed/param_and_grad_buffer.py: param.data = the buffer's view, then
  // `del old_param_data`): the originals' blocks stay cached. Then, for each piece of a parameter
  // in this rank's shard (`pieces`, elements), the optimizer's fp32 master copy, made by a 16-bit
  // clone cast to fp32 (megatron/core/optimizer/distrib_optimizer.py: shard_model_param.clone()
  // .float()), and the two Adam moments (zeros_like in the fused Adam's first step; here before
  // the first micro-batch, where they would take the same cached blocks). The peaks restart after
  // it, as torch.cuda.reset_peak_memory_stats; what stays allocated is the start-up's live bytes.
  void start_up(const std::vector<std::vector<double>>& chunks, const std::vector<double>& pieces, double grad_bytes) {
    std::vector<std::vector<std::optional<Allocation>>> originals;
    for (const auto& tensors : chunks) {
      originals.emplace_back();
      for (double n : tensors) originals.back().push_back(allocate(2 * n));
    }
    for (size_t c = 0; c < chunks.size(); ++c) {
      double elements = 0;
      for (double n : chunks[c]) elements += n;
      static_.push_back(allocate(2 * elements));
      static_.push_back(allocate(grad_bytes * elements));
      for (auto it = originals[c].rbegin(); it != originals[c].rend(); ++it) release(*it);
    }
    for (double n : pieces) {
      std::optional<Allocation> clone = allocate(2 * n);
      static_.push_back(allocate(4 * n));
      release(clone);
    }
    for (double n : pieces)
      for (int moment = 0; moment < 2; ++moment) static_.push_back(allocate(4 * n));
    start_up_bytes_ = static_cast<double>(allocator_.stats().requested);
    allocator_.reset_peaks();
  }

  // The step's peaks, less what the start-up left allocated: the activation pool's.
  AllocatorReplay result() const {
    const AllocatorStats& s = allocator_.stats();
    return {static_cast<double>(s.peak_reserved) - start_up_bytes_, static_cast<double>(s.peak_requested) - start_up_bytes_,
            !ok_, start_up_bytes_};
  }

 private:
  CachingAllocator allocator_;
  bool ok_ = true;
  std::vector<std::optional<Allocation>> static_;  // the start-up's buffers and optimizer state
  double start_up_bytes_ = 0;
};

// The pieces of a stage's parameters in the first shard of the DP×CP group, in elements, as the
// distributed optimizer shards them: each chunk's parameters sit in its buffer in reverse order,
// cut into buckets (closed once they hold grad_bucket_params), and each bucket's first 1/(dp·cp) is the rank's
// (param_and_grad_buffer.py, distrib_optimizer.py _build_model_gbuf_range). Not followed: the
// shared embedding's bucket of its own under tied embeddings with pp > 1.
std::vector<double> first_shard_pieces(const ParallelConfig& L, const std::vector<std::vector<double>>& chunks) {
  const double shards = static_cast<double>(L.dp() * L.cp);
  std::vector<double> pieces;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const std::vector<double>& tensors = chunks[c];
    const double bucket = grad_bucket_params(L, static_cast<int64_t>(c));
    // Buckets as [first tensor, end) over the reversed order.
    std::vector<double> order(tensors.rbegin(), tensors.rend());
    for (size_t first = 0; first < order.size();) {
      size_t end = first;
      double size = 0;
      while (end < order.size() && size < bucket) size += order[end++];
      const double owned = size / shards;  // [0, owned) of the bucket is the first shard's
      double at = 0;
      for (size_t i = first; i < end && at < owned; ++i) {
        pieces.push_back(std::min(order[i], owned - at));
        at += order[i];
      }
      first = end;
    }
  }
  return pieces;
}

}  // namespace

AllocatorReplay replay_stage_allocations(const ModelShape& model, const ParallelConfig& L,
                                         const std::vector<PlanMicroBatch>& micro_batches,
                                         const PipelineSchedule& schedule, int stage, bool expandable,
                                         double capacity_bytes, bool skip_repeats) {
  // One step, from an empty cache (see the header).
  const std::vector<PipeOp>& ops = schedule[stage];
  const OffloadSchedule off = offload_schedule(L, schedule[stage], stage);
  // Each micro-batch's layer, and its class: the first micro-batch with the same tensors.
  std::vector<LayerGraph> graphs;
  std::vector<int> kind;
  std::map<std::vector<double>, int> kinds;
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    if (k > 0 && micro_batches[k] == micro_batches[k - 1]) {  // the common case: one shape
      graphs.push_back(graphs.back());
      kind.push_back(kind.back());
      continue;
    }
    graphs.push_back(layer_graph(model, L, micro_batch_layer_tensors(model, L, micro_batches[k])));
    std::vector<double> sizes;
    for (const Tensor& t : graphs.back().tensors) sizes.push_back(t.bytes);
    kind.push_back(kinds.emplace(sizes, static_cast<int>(kinds.size())).first->second);
  }
  // The start-up, with the distributed optimizer (without it nothing is freed before the step:
  // the parameters and the gradient buffer stay where they were allocated, beside the pool).
  std::vector<std::vector<double>> chunks;
  std::vector<double> pieces;
  if (L.distributed_optimizer && !L.zero3) {
    int64_t longest = 0;
    for (const PlanMicroBatch& mb : micro_batches)
      for (int64_t len : mb.lengths) longest = std::max(longest, len);
    for (int c = 0; c < L.vp; ++c) chunks.push_back(chunk_parameter_tensors(model, L, stage, c, longest));
    pieces = first_shard_pieces(L, chunks);
  }
  // What the start-up leaves allocated, which the capacity excludes already (as stage_weight_bytes
  // counts it: its norms split over t and its position table at the plan's longest sequence, a
  // few kilobytes off these tensors').
  double start_up = 0;
  for (const auto& tensors : chunks)
    for (double n : tensors) start_up += (2 + L.grad_bytes()) * n;
  for (double n : pieces) start_up += 12 * n;
  Replay replay(expandable, capacity_bytes + start_up);
  if (!chunks.empty()) replay.start_up(chunks, pieces, L.grad_bytes());
  // (micro-batch, chunk) -> its layers' tensors, from the forward to the backward.
  std::map<std::pair<int, int>, std::vector<std::optional<Allocation>>> in_flight;
  std::vector<std::optional<Allocation>> gradient_buffer;

  // A settled steady state is not replayed to its end. Once the schedule repeats (1F1B: a forward
  // and a backward; interleaved: a round of 2·p·v ops) with micro-batches of one kind, and the
  // allocator has reserved nothing new for `settle` ops — twice over the rotation of the
  // tensors in flight through its blocks (up to p·v + 1 rounds) — the remaining repeats are
  // skipped: their tensors need what the last round needed, from a cache that stopped growing.
  // `same(i, j, d)`: op i is op j with its micro-batch d later, of the same kind.
  auto same = [&](size_t i, size_t j, int d) {
    return ops[i].forward == ops[j].forward && ops[i].chunk == ops[j].chunk &&
           ops[i].micro_batch == ops[j].micro_batch + d && kind[ops[i].micro_batch] == kind[ops[j].micro_batch];
  };
  const size_t round = L.vp == 1 ? 2 : static_cast<size_t>(2 * L.pp * L.vp);
  const size_t settle = 2 * static_cast<size_t>(L.pp * L.vp + 1) * round;
  size_t settled_since = 0;  // the boundary since which the rounds repeat and nothing new is reserved
  double reserved = 0;
  for (size_t i = 0; i < ops.size() && replay.ok();) {
    const bool repeats = [&] {
      if (!skip_repeats || i < 2 * round) return false;
      const int d = ops[i - round].micro_batch - ops[i - 2 * round].micro_batch;
      for (size_t r = 0; r < round; ++r)
        if (d <= 0 || !same(i - round + r, i - 2 * round + r, d)) return false;
      return true;
    }();
    if (!repeats || replay.reserved() != reserved) settled_since = i;
    reserved = replay.reserved();
    if (repeats && i - settled_since >= settle) {
      const int d = ops[i - round].micro_batch - ops[i - 2 * round].micro_batch;
      size_t k = 0;  // rounds ahead that repeat the last one, k + 1 rounds of micro-batches later
      while (i + (k + 1) * round <= ops.size()) {
        bool ok = true;
        for (size_t r = 0; r < round && ok; ++r) ok = same(i + k * round + r, i - round + r, static_cast<int>(k + 1) * d);
        if (!ok) break;
        ++k;
      }
      std::map<std::pair<int, int>, std::vector<std::optional<Allocation>>> shifted;
      for (auto& [key, layers] : in_flight) shifted[{key.first + static_cast<int>(k) * d, key.second}] = std::move(layers);
      in_flight = std::move(shifted);
      i += k * round;
      settled_since = i;
    }
    if (i >= ops.size()) break;
    const PipeOp& op = ops[i];
    const LayerGraph& g = graphs[op.micro_batch];
    if (g.tensors.empty()) {
      ++i;
      continue;
    }
    // The chunk's layers' handles, g.tensors.size() each, from its forward to its backward, then
    // the loss's softmax where the chunk holds the loss.
    std::vector<std::optional<Allocation>>& layers = in_flight[{op.micro_batch, op.chunk}];
    const size_t n = g.tensors.size();
    auto layer = [&](size_t l) { return Handles(layers.data() + l * n, n); };
    const bool loss = holds_loss(L, stage, op.chunk);
    const LossTensors lt = loss ? micro_batch_loss_tensors(model, L, micro_batches[op.micro_batch]) : LossTensors{};
    if (op.forward) {
      const double keep = off.offloaded[i] ? 1 - L.activation_offload_ratio : 1;
      std::optional<Allocation> input = replay.allocate(g.tensors.front().bytes);  // received or embedded
      const auto count = static_cast<size_t>(chunk_layers(L, model.layers, stage, op.chunk));
      layers.assign(count * n + 1, std::nullopt);
      for (size_t l = 0; l < count && replay.ok(); ++l) {
        Handles held = layer(l);
        held.front() = input;
        replay.forward(g, held, keep);
        input = held.back();  // the next layer's input
        held.back().reset();
      }
      if (loss) {  // the output layer's 16-bit logits, then the loss's tensors (LossTensors)
        const double E = lt.entries;
        std::optional<Allocation> logits = replay.allocate(2 * E), copy;
        if (L.loss == "torch") copy = replay.allocate(4 * E);  // log_softmax's input, freed once its output exists
        layers.back() = replay.allocate(4 * E);  // kept: Megatron's fp32 copy (the softmax), or log_softmax's output
        replay.release(copy);
        replay.release(logits);
      }
      replay.release(input);  // sent to the next stage (Megatron frees the output's storage)
    } else {
      gradient_buffer.assign(n, std::nullopt);
      Handles gradients(gradient_buffer);
      if (loss && !layers.empty()) {
        // The logits' 16-bit gradient, the kept tensor freed, the output layer's input gradient
        // made from it. Megatron computes it in the softmax's storage and casts; torch first makes
        // nll_loss's fp32 gradient and log_softmax's input gradient beside its output, frees the
        // output and the first, and casts the second.
        const double E = lt.entries;
        std::optional<Allocation> logits_gradient;
        if (L.loss == "torch") {
          std::optional<Allocation> nll_gradient = replay.allocate(4 * E), input_gradient = replay.allocate(4 * E);
          replay.release(layers.back());
          replay.release(nll_gradient);
          logits_gradient = replay.allocate(2 * E);
          replay.release(input_gradient);
        } else {
          logits_gradient = replay.allocate(2 * E);
          replay.release(layers.back());
        }
        gradients.back() = replay.allocate(g.tensors.back().bytes);
        replay.release(logits_gradient);
      } else {
        gradients.back() = replay.allocate(g.tensors.back().bytes);  // received from the next stage
      }
      for (size_t l = layers.size() / n; l-- > 0 && replay.ok();) {  // the layers its forward made
        replay.backward(g, layer(l), gradients);
        gradients.back() = gradients.front();  // the previous layer's output gradient
        gradients.front().reset();
      }
      if (holds_embedding(stage, op.chunk)) {  // the embedding's dense gradient, then the hook drops it
        std::optional<Allocation> embedding = replay.allocate(embedding_gradient_bytes(model, L));
        replay.release(gradients.back());
        replay.release(embedding);
      }
      replay.release(gradients.back());  // sent to the previous stage (freed above on the first)
      in_flight.erase({op.micro_batch, op.chunk});
    }
    ++i;
  }
  return replay.result();
}

}  // namespace cpbench
