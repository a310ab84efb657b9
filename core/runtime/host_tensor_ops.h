// host_tensor_ops.h — HostTensorOps: TensorOps on host memory, the CPU backend's and the thread
// ranks' (tensor_ops.h says what each operation does).
// Requires: nothing beyond the standard library; every call completes before it returns.
#pragma once

#include "core/runtime/tensor_ops.h"

namespace cpbench {

class HostTensorOps final : public TensorOps {
 public:
  FloatBuffer floats(int64_t n, float value) override;
  ByteBuffer bytes(int64_t n) override;
  void copy(Rows<float> dst, Rows<const float> src, int64_t rows, int64_t width) override;
  void add(Rows<float> dst, Rows<const float> src, int64_t rows, int64_t width) override;
  void merge(const LseMerge& m) override;
  void copy_bytes(std::byte* dst, const std::byte* src, int64_t n) override;
  void encode(std::byte* dst, const float* src, int64_t n, int value_bytes) override;
  void decode(float* dst, const std::byte* src, int64_t n, int value_bytes) override;
  void upload(Rows<float> dst, Rows<const float> host, int64_t rows, int64_t width) override;
  void download(std::span<float> host, const float* src) override;
};

// bf16 of an fp32 value, rounded to nearest even (a NaN stays a NaN), and back: HostTensorOps'
// wire encoding, exposed for tests.
uint16_t to_bf16(float f);
float from_bf16(uint16_t h);

}  // namespace cpbench
