#include "kernels/cudnn/sdpa_graph.h"

#include <cmath>
#include <functional>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <cuda_runtime.h>

#include <cudnn_frontend.h>

namespace cpbench::kernels {

namespace fe = cudnn_frontend;

namespace {

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// [B, H, S, D] over THD rows: a token's heads side by side.
TensorPtr thd_tensor(fe::graph::Graph& g, const char* name, const SdpaShape& s, int64_t heads, int64_t seq) {
  auto t = g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_dim({s.batch, heads, seq, s.head_dim})
                        .set_stride({seq * heads * s.head_dim, s.head_dim, heads * s.head_dim, 1}));
  if (s.ragged) {
    // Where each sequence's rows start (in elements), B + 1 offsets.
    auto offsets = g.tensor(fe::graph::Tensor_attributes()
                                .set_name((std::string(name) + "_offsets").c_str())
                                .set_dim({s.batch + 1, 1, 1, 1})
                                .set_stride({1, 1, 1, 1})
                                .set_data_type(fe::DataType_t::INT32));
    t->set_ragged_offset(offsets);
  }
  return t;
}

TensorPtr lengths_tensor(fe::graph::Graph& g, const char* name, int64_t batch) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_dim({batch, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_data_type(fe::DataType_t::INT32));
}

// The tile mode in cuDNN's terms: the diagonal's alignment, the band's right bound 0 (causal) and,
// with a window of w keys, its left bound. tile_mode.h's window keeps keys j > i + offset − w; that
// cuDNN's left bound counts the same keys is checked against the reference on a device
// (scripts/device_check.sh), not here.
template <class Attributes>
void set_mode(Attributes& a, const TileMode& mode) {
  if (mode.mask == TileMask::causal_top_left) a.set_causal_mask(true);
  if (mode.mask == TileMask::causal_bottom_right) a.set_causal_mask_bottom_right(true);
  if (mode.window > 0) a.set_diagonal_band_left_bound(static_cast<int>(mode.window));
}

// A graph of one SDPA call and its tensors, for validate() here or for a handle (SdpaRunner).
struct SdpaGraphOf {
  std::shared_ptr<fe::graph::Graph> graph = std::make_shared<fe::graph::Graph>();
  TensorPtr q, k, v, o, stats, d_o, dq, dk, dv, seq_len_q, seq_len_kv;
};

// sm > 0: the SM version the graph is checked for (no device needed); 0: the device's. The nodes
// take the graph's context when they are made, so it is set first.
SdpaGraphOf make_graph(const SdpaShape& s, const TileMode& mode, bool backward, int sm) {
  SdpaGraphOf r;
  fe::graph::Graph& g = *r.graph;
  if (sm > 0) g.set_sm_version(sm);
  g.set_io_data_type(s.bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const float scale = s.scale > 0.0f ? s.scale : 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  r.q = thd_tensor(g, "Q", s, s.heads_q, s.s_q);
  r.k = thd_tensor(g, "K", s, s.heads_kv, s.s_kv);
  r.v = thd_tensor(g, "V", s, s.heads_kv, s.s_kv);
  auto output_dims = [&](const TensorPtr& t, int64_t heads, int64_t seq) {
    t->set_output(true)
        .set_dim({s.batch, heads, seq, s.head_dim})
        .set_stride({seq * heads * s.head_dim, s.head_dim, heads * s.head_dim, 1});
  };
  if (s.ragged) {
    r.seq_len_q = lengths_tensor(g, "seq_len_q", s.batch);
    r.seq_len_kv = lengths_tensor(g, "seq_len_kv", s.batch);
  }
  if (!backward) {
    auto a = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(scale);
    set_mode(a, mode);
    if (s.ragged) a.set_padding_mask(true).set_seq_len_q(r.seq_len_q).set_seq_len_kv(r.seq_len_kv);
    auto [o, stats] = g.sdpa(r.q, r.k, r.v, a);
    output_dims(o, s.heads_q, s.s_q);
    if (s.ragged) o->set_ragged_offset(r.q->get_ragged_offset());
    stats->set_output(true)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({s.batch, s.heads_q, s.s_q, 1})
        .set_stride({s.heads_q * s.s_q, s.s_q, 1, 1});
    r.o = o;
    r.stats = stats;
  } else {
    // O and dO are rows of Q's layout: Q's ragged offsets serve them (one tensor, one pointer).
    r.o = thd_tensor(g, "O", s, s.heads_q, s.s_q);
    r.d_o = thd_tensor(g, "dO", s, s.heads_q, s.s_q);
    r.stats = g.tensor(fe::graph::Tensor_attributes()
                           .set_name("stats")
                           .set_dim({s.batch, s.heads_q, s.s_q, 1})
                           .set_stride({s.heads_q * s.s_q, s.s_q, 1, 1})
                           .set_data_type(fe::DataType_t::FLOAT));
    auto a = fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(scale);
    set_mode(a, mode);
    if (s.ragged) a.set_padding_mask(true).set_seq_len_q(r.seq_len_q).set_seq_len_kv(r.seq_len_kv);
    auto [dq, dk, dv] = g.sdpa_backward(r.q, r.k, r.v, r.o, r.d_o, r.stats, a);
    output_dims(dq, s.heads_q, s.s_q);
    output_dims(dk, s.heads_kv, s.s_kv);
    output_dims(dv, s.heads_kv, s.s_kv);
    if (s.ragged) {
      dq->set_ragged_offset(r.q->get_ragged_offset());
      dk->set_ragged_offset(r.k->get_ragged_offset());
      dv->set_ragged_offset(r.v->get_ragged_offset());
    }
    r.dq = dq;
    r.dk = dk;
    r.dv = dv;
  }
  return r;
}

SdpaStatus status_of(fe::error_t e, const char* step) {
  if (e.is_good()) return {true, ""};
  return {false, std::string(step) + ": " + e.get_message()};
}

SdpaStatus refusal(const TileMode& mode) {
  return {false, std::string("tile mode ") + tile_mask_name(mode.mask) + " is not sent to cuDNN"};
}

// The ragged tensors' pointers: sequence lengths, and the offsets shared by Q's layout (Q, O, dO,
// dQ) and by K's (K, V, dK, dV).
void add_ragged(std::unordered_map<TensorPtr, void*>& pack, const SdpaGraphOf& g, const SdpaShape& s,
                const SdpaTensors& t) {
  if (!s.ragged) return;
  pack[g.seq_len_q] = const_cast<int32_t*>(t.seq_len_q);
  pack[g.seq_len_kv] = const_cast<int32_t*>(t.seq_len_kv);
  for (const TensorPtr& x : {g.q, g.o, g.d_o})
    if (x) pack[x->get_ragged_offset()] = const_cast<int32_t*>(t.offsets_q);
  for (const TensorPtr& x : {g.k, g.v})
    if (x) pack[x->get_ragged_offset()] = const_cast<int32_t*>(t.offsets_kv);
}

}  // namespace

bool sdpa_mode_supported(const TileMode& mode) {
  switch (mode.mask) {
    case TileMask::full: return mode.window == 0;
    case TileMask::causal_top_left:
    case TileMask::causal_bottom_right: return mode.window >= 0;
    case TileMask::empty:
    case TileMask::custom: return false;
  }
  return false;
}

SdpaStatus validate_sdpa_graph(const SdpaShape& s, const TileMode& mode, bool backward, int sm) {
  if (!sdpa_mode_supported(mode)) return refusal(mode);
  SdpaGraphOf g = make_graph(s, mode, backward, sm);
  auto e = g.graph->validate();
  return {e.is_good(), e.is_good() ? "" : e.get_message()};
}

// ---- SdpaRunner ---------------------------------------------------------------------------------

struct SdpaRunner::Impl {
  cudnnHandle_t handle = nullptr;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, float, int, int64_t, bool>,
           SdpaGraphOf>
      graphs;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  ~Impl() {
    if (workspace) cudaFree(workspace);
    if (handle) cudnnDestroy(handle);
  }
};

std::unique_ptr<SdpaRunner> SdpaRunner::create(void* stream, std::string* error) {
  auto impl = std::make_unique<Impl>();
  if (const cudnnStatus_t st = cudnnCreate(&impl->handle); st != CUDNN_STATUS_SUCCESS) {
    if (error) *error = std::string("cudnnCreate: ") + cudnnGetErrorString(st);
    impl->handle = nullptr;
    return nullptr;
  }
  if (const cudnnStatus_t st = cudnnSetStream(impl->handle, static_cast<cudaStream_t>(stream)); st != CUDNN_STATUS_SUCCESS) {
    if (error) *error = std::string("cudnnSetStream: ") + cudnnGetErrorString(st);
    return nullptr;
  }
  return std::unique_ptr<SdpaRunner>(new SdpaRunner(std::move(impl)));
}

SdpaRunner::SdpaRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SdpaRunner::~SdpaRunner() = default;

SdpaStatus SdpaRunner::prepare(const SdpaShape& s, const TileMode& mode, bool backward) {
  return graph_for(s, mode, backward).first;
}

std::pair<SdpaStatus, const void*> SdpaRunner::graph_for(const SdpaShape& s, const TileMode& mode, bool backward) {
  if (!sdpa_mode_supported(mode)) return {refusal(mode), nullptr};
  const auto key = std::make_tuple(s.batch, s.heads_q, s.heads_kv, s.s_q, s.s_kv, s.head_dim, s.bf16, s.ragged, s.scale,
                                   static_cast<int>(mode.mask), mode.window, backward);
  if (auto it = impl_->graphs.find(key); it != impl_->graphs.end()) return {{true, ""}, &it->second};
  SdpaGraphOf g = make_graph(s, mode, backward, 0);
  fe::graph::Graph& graph = *g.graph;
  // Each step only after the one before it succeeded.
  const std::pair<const char*, std::function<fe::error_t()>> steps[] = {
      {"validate", [&] { return graph.validate(); }},
      {"build_operation_graph", [&] { return graph.build_operation_graph(impl_->handle); }},
      {"create_execution_plans", [&] { return graph.create_execution_plans({fe::HeurMode_t::A}); }},
      {"check_support", [&] { return graph.check_support(impl_->handle); }},
      {"build_plans", [&] { return graph.build_plans(impl_->handle); }}};
  for (const auto& [step, run] : steps)
    if (auto e = run(); !e.is_good()) return {status_of(e, step), nullptr};
  int64_t bytes = 0;
  if (auto e = graph.get_workspace_size(bytes); !e.is_good()) return {status_of(e, "get_workspace_size"), nullptr};
  if (bytes > impl_->workspace_bytes) {
    if (impl_->workspace) cudaFree(impl_->workspace);
    impl_->workspace = nullptr;
    impl_->workspace_bytes = 0;
    if (cudaMalloc(&impl_->workspace, static_cast<size_t>(bytes)) != cudaSuccess)
      return {{false, "cudaMalloc of a " + std::to_string(bytes) + "-byte cuDNN workspace failed"}, nullptr};
    impl_->workspace_bytes = bytes;
  }
  auto [it, inserted] = impl_->graphs.emplace(key, std::move(g));
  return {{true, ""}, &it->second};
}

SdpaStatus SdpaRunner::forward(const SdpaShape& s, const TileMode& mode, const SdpaTensors& t) {
  auto [st, opaque] = graph_for(s, mode, false);
  if (!st.ok) return st;
  const auto& g = *static_cast<const SdpaGraphOf*>(opaque);
  std::unordered_map<TensorPtr, void*> pack = {
      {g.q, const_cast<void*>(t.q)}, {g.k, const_cast<void*>(t.k)}, {g.v, const_cast<void*>(t.v)},
      {g.o, t.o},                    {g.stats, t.stats}};
  add_ragged(pack, g, s, t);
  return status_of(g.graph->execute(impl_->handle, pack, impl_->workspace), "execute");
}

SdpaStatus SdpaRunner::backward(const SdpaShape& s, const TileMode& mode, const SdpaTensors& t) {
  auto [st, opaque] = graph_for(s, mode, true);
  if (!st.ok) return st;
  const auto& g = *static_cast<const SdpaGraphOf*>(opaque);
  std::unordered_map<TensorPtr, void*> pack = {
      {g.q, const_cast<void*>(t.q)},         {g.k, const_cast<void*>(t.k)},
      {g.v, const_cast<void*>(t.v)},         {g.o, const_cast<void*>(t.o_in)},
      {g.d_o, const_cast<void*>(t.d_o)},     {g.stats, const_cast<float*>(t.stats_in)},
      {g.dq, t.dq},                          {g.dk, t.dk},
      {g.dv, t.dv}};
  add_ragged(pack, g, s, t);
  return status_of(g.graph->execute(impl_->handle, pack, impl_->workspace), "execute");
}

}  // namespace cpbench::kernels
