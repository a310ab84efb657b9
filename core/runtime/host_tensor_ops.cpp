#include "core/runtime/host_tensor_ops.h"

#include "core/runtime/lse_merge.h"
#include "kernels/cuda/bf16.h"

#include <algorithm>
#include <cstring>

namespace cpbench {

uint16_t to_bf16(float f) { return kernels::to_bf16(f).bits; }

float from_bf16(uint16_t h) { return kernels::to_f32(kernels::Bf16{h}); }

FloatBuffer HostTensorOps::floats(int64_t n, float value) {
  std::shared_ptr<float[]> p(new float[static_cast<size_t>(std::max<int64_t>(n, 1))]);
  std::fill_n(p.get(), n, value);
  return {std::move(p), n};
}

ByteBuffer HostTensorOps::bytes(int64_t n) {
  return {std::shared_ptr<std::byte[]>(new std::byte[static_cast<size_t>(std::max<int64_t>(n, 1))]), n};
}

void HostTensorOps::copy(Rows<float> dst, Rows<const float> src, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src.at + r * src.pitch, width, dst.at + r * dst.pitch);
}

void HostTensorOps::add(Rows<float> dst, Rows<const float> src, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) {
    float* d = dst.at + r * dst.pitch;
    const float* s = src.at + r * src.pitch;
    for (int64_t i = 0; i < width; ++i) d[i] += s[i];
  }
}

void HostTensorOps::merge(const LseMerge& m) {
  for (int64_t h = 0; h < m.heads; ++h)
    for (int64_t t = 0; t < m.tokens; ++t) merge_lse_row(m, h, t);
}

void HostTensorOps::copy_bytes(std::byte* dst, const std::byte* src, int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n));
}

void HostTensorOps::encode(std::byte* dst, const float* src, int64_t n, int value_bytes) {
  if (n <= 0) return;  // an empty part: no pointer to copy from
  if (value_bytes == 4) return (void)std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = to_bf16(src[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

void HostTensorOps::decode(float* dst, const std::byte* src, int64_t n, int value_bytes) {
  if (n <= 0) return;
  if (value_bytes == 4) return (void)std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = from_bf16(h);
  }
}

void HostTensorOps::upload(Rows<float> dst, Rows<const float> host, int64_t rows, int64_t width) {
  copy(dst, host, rows, width);
}

void HostTensorOps::download(std::span<float> host, const float* src) {
  std::copy_n(src, host.size(), host.data());
}

}  // namespace cpbench
