// lse_merge.h — one row of TensorOps::merge (tensor_ops.h, LseMerge), written once for the host
// (HostTensorOps' loop) and the device (CudaTensorOps' kernel, one thread per row).
// Requires: kernels/cuda/bf16.h for CPB_HD (__host__ __device__ under nvcc, empty elsewhere).
// Note: float math from <math.h> (expf, logf, fmaxf), the functions host and device both have.
#pragma once

#include <math.h>

#include <cstdint>

#include "core/runtime/tensor_ops.h"
#include "kernels/cuda/bf16.h"

namespace cpbench {

// Merges partial row (t, h) into the accumulated one: m = max(a, b), lse = m + log(e^(a−m) +
// e^(b−m)), out = the e^(·−m)-weighted mean; a partial LSE of −inf changes nothing, an accumulated
// one of −inf takes the partial as is.
CPB_HD inline void merge_lse_row(const LseMerge& m, int64_t h, int64_t t) {
  const int64_t d = m.head_dim;
  const float lb = m.lse.at[h * m.lse.pitch + t];
  if (lb == -INFINITY) return;
  float& la = m.out_lse.at[h * m.out_lse.pitch + t];
  float* oa = m.out.at + t * m.out.pitch + h * d;
  const float* ob = m.o.at + t * m.o.pitch + h * d;
  if (la == -INFINITY) {
    for (int64_t x = 0; x < d; ++x) oa[x] = ob[x];
    la = lb;
    return;
  }
  const float mx = fmaxf(la, lb);
  const float wa = expf(la - mx), wb = expf(lb - mx), sum = wa + wb;
  for (int64_t x = 0; x < d; ++x) oa[x] = (wa * oa[x] + wb * ob[x]) / sum;
  la = mx + logf(sum);
}

}  // namespace cpbench
