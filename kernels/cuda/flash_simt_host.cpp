// flash_simt_host.cpp — the SIMT kernel's rows run in loops on the CPU: the same functions as the
// CUDA kernels' threads (flash_simt.h), so CI checks the GPU kernel's arithmetic without a GPU.
#include "kernels/cuda/flash_simt.h"

#include <vector>

namespace cpbench::kernels {

template <class T>
void simt_forward_host(const SimtTile<T>& t, float* out, float* lse, int64_t lse_stride) {
  std::vector<float> acc(static_cast<size_t>(t.head_dim));
  for (int64_t i = 0; i < t.rows_q; ++i)
    for (int64_t h = 0; h < t.heads_q; ++h)
      simt_forward_row(t, i, h, acc.data(), out + (i * t.heads_q + h) * t.head_dim, lse + h * lse_stride + i);
}

template <class T>
void simt_backward_host(const SimtTile<T>& t, const float* out, const float* lse, int64_t lse_stride, const T* dout,
                        float* dq, float* dk, float* dv) {
  const int64_t d = t.head_dim;
  for (int64_t i = 0; i < t.rows_q; ++i)
    for (int64_t h = 0; h < t.heads_q; ++h)
      simt_dq_row(t, i, h, out + (i * t.heads_q + h) * d, lse[h * lse_stride + i], dout + (i * t.heads_q + h) * d,
                  dq + (i * t.heads_q + h) * d);
  for (int64_t j = 0; j < t.rows_k; ++j)
    for (int64_t g = 0; g < t.heads_kv; ++g)
      simt_dkv_row(t, j, g, out, lse, lse_stride, dout, dk + (j * t.heads_kv + g) * d, dv + (j * t.heads_kv + g) * d);
}

template void simt_forward_host<float>(const SimtTile<float>&, float*, float*, int64_t);
template void simt_forward_host<Bf16>(const SimtTile<Bf16>&, float*, float*, int64_t);
template void simt_backward_host<float>(const SimtTile<float>&, const float*, const float*, int64_t, const float*,
                                        float*, float*, float*);
template void simt_backward_host<Bf16>(const SimtTile<Bf16>&, const float*, const float*, int64_t, const Bf16*,
                                       float*, float*, float*);

}  // namespace cpbench::kernels
