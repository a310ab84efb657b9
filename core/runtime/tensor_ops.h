// tensor_ops.h — TensorOps: the memory a rank's attention tensors live in, and the data movement the
// executor makes on it: copy and add blocks of rows, the LSE merge of partial outputs, the wire
// encoding (fp32 or bf16), loading home slices from the host and reading results back.
// Requires: pointers into buffers this object made (or offsets into them); the executor computes
// addresses but never reads or writes a value itself, so the same walk runs on host memory
// (HostTensorOps, core/runtime/host_tensor_ops.h) and on device memory (a GPU backend: its copies
// are cudaMemcpy2D-shaped, add/merge/encode one kernel each, ordered with its kernels and NCCL on
// one stream).
// Note: a block is `rows` rows of `width` elements, `pitch` elements apart — cudaMemcpy2D's shape,
// in elements rather than bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace cpbench {

// An owned run of values in a TensorOps' memory. Copies share it (a store's entry and the report
// that reads it), as a tensor's views do; the deleter is the allocator's.
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(std::shared_ptr<T[]> owner, int64_t size) : owner_(std::move(owner)), size_(size) {}
  T* data() const { return owner_.get(); }
  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<T> span() const { return {owner_.get(), static_cast<std::size_t>(size_)}; }

 private:
  std::shared_ptr<T[]> owner_;
  int64_t size_ = 0;
};
using FloatBuffer = Buffer<float>;
using ByteBuffer = Buffer<std::byte>;

// Rows of a block: row r starts at at + r·pitch.
template <class T>
struct Rows {
  T* at = nullptr;
  int64_t pitch = 0;
};

// The LSE merge of a partial (o, lse) of `tokens` query rows × `heads` heads into the accumulated
// (out, out_lse): output row (t, h) of d values at out.at + t·out.pitch + h·d, its LSE at
// out_lse.at + h·out_lse.pitch + t, and the same for the partial. Per row, with m = max(a, b):
// lse = m + log(e^(a−m) + e^(b−m)), out = (e^(a−m)·out + e^(b−m)·o) / (e^(a−m) + e^(b−m));
// a partial LSE of −inf changes nothing, an accumulated one of −inf takes the partial as is.
struct LseMerge {
  Rows<float> out, out_lse;
  Rows<const float> o, lse;
  int64_t tokens = 0, heads = 0, head_dim = 0;
};

class TensorOps {
 public:
  virtual ~TensorOps() = default;

  // ---- memory ----------------------------------------------------------------------------------
  // n values, each `value`.
  virtual FloatBuffer floats(int64_t n, float value) = 0;
  // n bytes, uninitialised: a message buffer (what a Communicator sends from or receives into).
  virtual ByteBuffer bytes(int64_t n) = 0;

  // ---- blocks ----------------------------------------------------------------------------------
  virtual void copy(Rows<float> dst, Rows<const float> src, int64_t rows, int64_t width) = 0;
  virtual void add(Rows<float> dst, Rows<const float> src, int64_t rows, int64_t width) = 0;
  virtual void merge(const LseMerge& m) = 0;
  virtual void copy_bytes(std::byte* dst, const std::byte* src, int64_t n) = 0;

  // ---- the wire --------------------------------------------------------------------------------
  // n values as `value_bytes` each: 4 = fp32 as is; 2 = bf16, rounded to nearest even (a NaN stays
  // a NaN), what a 16-bit training step puts on the wire. decode is its inverse.
  virtual void encode(std::byte* dst, const float* src, int64_t n, int value_bytes) = 0;
  virtual void decode(float* dst, const std::byte* src, int64_t n, int value_bytes) = 0;

  // ---- the host --------------------------------------------------------------------------------
  // A block of host memory into this memory (home slices), and a whole buffer back (results).
  virtual void upload(Rows<float> dst, Rows<const float> host, int64_t rows, int64_t width) = 0;
  virtual void download(std::span<float> host, const float* src) = 0;
};

}  // namespace cpbench
