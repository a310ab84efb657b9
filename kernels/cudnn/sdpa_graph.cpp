#include "kernels/cudnn/sdpa_graph.h"

#include <cmath>

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
  if (!sdpa_mode_supported(mode))
    return {false, std::string("tile mode ") + tile_mask_name(mode.mask) + " is not sent to cuDNN"};
  fe::graph::Graph g;
  g.set_io_data_type(s.bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  g.set_sm_version(sm);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  auto q = thd_tensor(g, "Q", s, s.heads_q, s.s_q);
  auto k = thd_tensor(g, "K", s, s.heads_kv, s.s_kv);
  auto v = thd_tensor(g, "V", s, s.heads_kv, s.s_kv);
  auto output_dims = [&](const TensorPtr& t, int64_t heads, int64_t seq) {
    t->set_output(true)
        .set_dim({s.batch, heads, seq, s.head_dim})
        .set_stride({seq * heads * s.head_dim, s.head_dim, heads * s.head_dim, 1});
  };
  if (!backward) {
    auto a = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(scale);
    set_mode(a, mode);
    if (s.ragged)
      a.set_padding_mask(true).set_seq_len_q(lengths_tensor(g, "seq_len_q", s.batch))
          .set_seq_len_kv(lengths_tensor(g, "seq_len_kv", s.batch));
    auto [o, stats] = g.sdpa(q, k, v, a);
    output_dims(o, s.heads_q, s.s_q);
    if (s.ragged) o->set_ragged_offset(q->get_ragged_offset());
    stats->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  } else {
    auto o = thd_tensor(g, "O", s, s.heads_q, s.s_q);
    auto d_o = thd_tensor(g, "dO", s, s.heads_q, s.s_q);
    auto stats = g.tensor(fe::graph::Tensor_attributes()
                              .set_name("stats")
                              .set_dim({s.batch, s.heads_q, s.s_q, 1})
                              .set_stride({s.heads_q * s.s_q, s.s_q, 1, 1})
                              .set_data_type(fe::DataType_t::FLOAT));
    auto a = fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(scale);
    set_mode(a, mode);
    if (s.ragged)
      a.set_padding_mask(true).set_seq_len_q(lengths_tensor(g, "seq_len_q", s.batch))
          .set_seq_len_kv(lengths_tensor(g, "seq_len_kv", s.batch));
    auto [dq, dk, dv] = g.sdpa_backward(q, k, v, o, d_o, stats, a);
    output_dims(dq, s.heads_q, s.s_q);
    output_dims(dk, s.heads_kv, s.s_kv);
    output_dims(dv, s.heads_kv, s.s_kv);
    if (s.ragged) {
      dq->set_ragged_offset(q->get_ragged_offset());
      dk->set_ragged_offset(k->get_ragged_offset());
      dv->set_ragged_offset(v->get_ragged_offset());
    }
  }
  auto status = g.validate();
  return {status.is_good(), status.is_good() ? "" : status.get_message()};
}

}  // namespace cpbench::kernels
