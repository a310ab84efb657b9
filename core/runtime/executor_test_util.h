// executor_test_util.h — what the tests of executed attention plans share: every mask kind (sized
// for short test sequences), and the check that a plan executed on a Communicator (MPI ranks, or
// thread ranks in one process) matches the single-device reference (O, LSE, dQ, dK, dV) with each
// rank moving exactly the plan's bytes; and FencedKernels, which checks that the walker hands its
// kernels and TensorOps only memory that TensorOps made (what a GPU backend needs: a host pointer
// handed to a device kernel is a crash there, a silent success here without the fence).
// Requires: GoogleTest; core/runtime (executor, attention_check, thread ranks). For tests only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/attention_check.h"
#include "core/runtime/cpu_attention_kernels.h"
#include "core/runtime/communicator.h"
#include "core/runtime/executor.h"
#include "core/runtime/host_tensor_ops.h"
#include "core/runtime/thread_communicator.h"

namespace cpbench {

// TensorOps on host memory that knows every buffer it made and still holds, and records each
// access — by its own operations or by FencedKernels — that reaches outside them.
class FencedTensorOps final : public TensorOps {
  // The deleter of a buffer: it leaves the live set as it is freed.
  template <class T>
  auto release() {
    return [this](T* p) {
      live_.erase(reinterpret_cast<const std::byte*>(p));
      delete[] p;
    };
  }

 public:
  FloatBuffer floats(int64_t n, float value) override {
    std::shared_ptr<float[]> p(new float[static_cast<size_t>(std::max<int64_t>(n, 1))], release<float>());
    std::fill_n(p.get(), n, value);
    live_[reinterpret_cast<const std::byte*>(p.get())] = n * 4;
    return {std::move(p), n};
  }
  ByteBuffer bytes(int64_t n) override {
    std::shared_ptr<std::byte[]> p(new std::byte[static_cast<size_t>(std::max<int64_t>(n, 1))], release<std::byte>());
    live_[p.get()] = n;
    return {std::move(p), n};
  }
  void copy(Rows<float> dst, Rows<const float> src, int64_t rows, int64_t width) override {
    fence(dst, rows, width, "copy to");
    fence(src, rows, width, "copy from");
    host_.copy(dst, src, rows, width);
  }
  void add(Rows<float> dst, Rows<const float> src, int64_t rows, int64_t width) override {
    fence(dst, rows, width, "add to");
    fence(src, rows, width, "add from");
    host_.add(dst, src, rows, width);
  }
  void merge(const LseMerge& m) override {
    const int64_t row = m.heads * m.head_dim;
    fence(m.out, m.tokens, row, "merge into O");
    fence(m.out_lse, m.heads, m.tokens, "merge into LSE");
    fence(m.o, m.tokens, row, "merge from O");
    fence(m.lse, m.heads, m.tokens, "merge from LSE");
    host_.merge(m);
  }
  void copy_bytes(std::byte* dst, const std::byte* src, int64_t n) override {
    check(dst, n, "copy bytes to");
    check(src, n, "copy bytes from");
    host_.copy_bytes(dst, src, n);
  }
  void encode(std::byte* dst, const float* src, int64_t n, int value_bytes) override {
    check(dst, n * value_bytes, "encode to");
    check(src, n * 4, "encode from");
    host_.encode(dst, src, n, value_bytes);
  }
  void decode(float* dst, const std::byte* src, int64_t n, int value_bytes) override {
    check(dst, n * 4, "decode to");
    check(src, n * value_bytes, "decode from");
    host_.decode(dst, src, n, value_bytes);
  }
  void upload(Rows<float> dst, Rows<const float> host, int64_t rows, int64_t width) override {
    fence(dst, rows, width, "upload to");
    host_.upload(dst, host, rows, width);
  }
  void download(std::span<float> host, const float* src) override {
    check(src, static_cast<int64_t>(host.size()) * 4, "download from");
    host_.download(host, src);
  }

  // A block of `rows` rows of `width` values, `pitch` apart, must lie in one live buffer.
  template <class T>
  void fence(Rows<T> b, int64_t rows, int64_t width, const char* what) {
    if (rows > 0 && width > 0) check(b.at, ((rows - 1) * b.pitch + width) * int64_t{sizeof(float)}, what);
  }
  void check(const void* p, int64_t bytes, const char* what) {
    ++checked_;
    if (bytes <= 0) return;
    const auto* at = static_cast<const std::byte*>(p);
    auto it = live_.upper_bound(at);
    if (it != live_.begin() && at + bytes <= std::prev(it)->first + std::prev(it)->second) return;
    violations_.push_back(std::string(what) + ": " + std::to_string(bytes) + " bytes outside every buffer");
  }
  const std::vector<std::string>& violations() const { return violations_; }
  int64_t checked() const { return checked_; }

 private:
  HostTensorOps host_;
  std::map<const std::byte*, int64_t> live_;
  std::vector<std::string> violations_;
  int64_t checked_ = 0;
};

// CpuAttentionKernels over FencedTensorOps, checking every tensor a call reads or writes.
class FencedKernels final : public AttentionKernels {
 public:
  explicit FencedKernels(const kernels::FlashConfig& config) : cpu_(config) {}
  TensorOps& memory() override { return ops_; }
  void tile_forward(const ForwardCall& c) override {
    fence_inputs(c.tile);
    ops_.check(c.out, c.tile.rows_q * q_row(c.tile) * 4, "kernel O");
    ops_.check(c.lse, c.tile.rows_q * c.tile.dims.heads_q * 4, "kernel LSE");
    cpu_.tile_forward(c);
  }
  void tile_backward(const BackwardCall& c) override {
    fence_inputs(c.tile);
    const int64_t q_bytes = c.tile.rows_q * q_row(c.tile) * 4;
    const int64_t kv_bytes = c.tile.rows_k * c.tile.dims.heads_kv * c.tile.dims.head_dim * 4;
    ops_.check(c.out, q_bytes, "kernel O");
    ops_.check(c.lse, ((c.tile.dims.heads_q - 1) * c.lse_stride + c.tile.rows_q) * 4, "kernel LSE");
    ops_.check(c.dout, q_bytes, "kernel dO");
    ops_.check(c.dq, q_bytes, "kernel dQ");
    ops_.check(c.dk, kv_bytes, "kernel dK");
    ops_.check(c.dv, kv_bytes, "kernel dV");
    cpu_.tile_backward(c);
  }
  const FencedTensorOps& fenced() const { return ops_; }

 private:
  static int64_t q_row(const kernels::TileInput& t) { return t.dims.heads_q * t.dims.head_dim; }
  void fence_inputs(const kernels::TileInput& t) {
    const int64_t kv_bytes = t.rows_k * t.dims.heads_kv * t.dims.head_dim * 4;
    ops_.check(t.q, t.rows_q * q_row(t) * 4, "kernel Q");
    ops_.check(t.k, kv_bytes, "kernel K");
    ops_.check(t.v, kv_bytes, "kernel V");
  }
  FencedTensorOps ops_;  // declared first, destroyed last
  CpuAttentionKernels cpu_;
};

struct MaskCase {
  const char* name;
  MaskSpec mask;
};

// full, causal, lambda (a 4-token sink and `window_tokens`), shared_question, causal_blockwise
// (blocks of `block_tokens`).
inline std::vector<MaskCase> every_mask(int64_t window_tokens, int64_t block_tokens) {
  MaskSpec lambda{MaskKind::lambda};
  lambda.sink_tokens = 4;
  lambda.window_tokens = window_tokens;
  MaskSpec blockwise{MaskKind::causal_blockwise};
  blockwise.block_tokens = block_tokens;
  return {{"full", MaskSpec{MaskKind::full}},
          {"causal", MaskSpec{MaskKind::causal}},
          {"lambda", lambda},
          {"shared_question", MaskSpec{MaskKind::shared_question}},
          {"causal_blockwise", blockwise}};
}

// Executes `plan` forward and backward on `comm` (its rank = the plan's rank) with inputs of
// `seed`; every home slice within the reference's tolerance, bytes sent and received as
// plan_bytes says. Failures name `what`.
// One rank's executed plan (forward and backward) against the reference and plan_bytes.
inline void expect_rank_as_planned(const AttentionPlan& plan, int rank, const ExecutionReport& rep,
                                   const ReferenceAttention& ref, const std::string& what) {
  ASSERT_EQ(rep.home.size(), plan.home[rank].size()) << what;
  for (const auto& h : rep.home) {
    const CheckResult c = check_home(plan, h, ref, true);
    EXPECT_LE(c.worst, 1.0) << what << " rank " << rank << ": " << c.where << " off by " << c.max_abs_error;
  }
  const RankBytes predicted = plan_bytes(plan, true);
  EXPECT_EQ(rep.bytes_sent, predicted.sent[rank]) << what << " rank " << rank;
  EXPECT_EQ(rep.bytes_received, predicted.received[rank]) << what << " rank " << rank;
}

inline void expect_runs_as_planned(const AttentionPlan& plan, Communicator& comm, uint64_t seed, const std::string& what) {
  OwnedInputs in = make_attention_inputs(plan, seed);
  auto rep = execute_attention(plan, comm, in.view(), true);
  ASSERT_TRUE(rep.ok()) << what << ": " << rep.error_str();
  expect_rank_as_planned(plan, comm.rank(), *rep, reference_attention(plan, in, true), what);
}

// One rank's kernels, made on the rank's own thread (a GPU's: its own stream).
using KernelsFactory = std::function<std::unique_ptr<AttentionKernels>()>;

// The same on plan.ranks thread ranks of this process: inputs and the reference made once. By
// default every rank's kernels are the CPU ones on one OpenMP thread (a rank is a core, as under
// mpirun), behind the fence; `make` and `copy` put the ranks on another device instead (the CUDA
// backend's kernels and copy: core/runtime/cuda/cuda_runtime.h), where a pointer outside its
// memory is the device's fault to report.
inline void expect_runs_on_thread_ranks(const AttentionPlan& plan, uint64_t seed, const std::string& what,
                                        const KernelsFactory& make = {}, MemoryCopy copy = {}) {
  const OwnedInputs in = make_attention_inputs(plan, seed);
  const ReferenceAttention ref = reference_attention(plan, in, true);
  std::vector<ExecutionReport> reports(static_cast<size_t>(plan.ranks));
  kernels::FlashConfig one_thread;
  one_thread.threads = 1;
  std::vector<std::vector<std::string>> outside(static_cast<size_t>(plan.ranks));
  std::vector<int64_t> checked(static_cast<size_t>(plan.ranks), 0);
  const std::vector<Status> st = run_thread_ranks(
      plan.ranks,
      [&](Communicator& comm) -> Status {
        const size_t r = static_cast<size_t>(comm.rank());
        Expected<ExecutionReport> rep = ExecutionReport{};
        if (make) {
          std::unique_ptr<AttentionKernels> kernels = make();
          rep = execute_attention(plan, comm, *kernels, in.view(), true);
        } else {
          FencedKernels kernels(one_thread);
          rep = execute_attention(plan, comm, kernels, in.view(), true);
          outside[r] = kernels.fenced().violations();
          checked[r] = kernels.fenced().checked();
        }
        if (!rep) return rep.errors();
        reports[r] = std::move(*rep);
        return ok_status();
      },
      std::chrono::seconds(60), std::move(copy));
  for (int r = 0; r < plan.ranks; ++r) {
    ASSERT_TRUE(st[static_cast<size_t>(r)]) << what << " rank " << r << ": " << st[static_cast<size_t>(r)].error_str();
    expect_rank_as_planned(plan, r, reports[static_cast<size_t>(r)], ref, what);
    if (make) continue;
    EXPECT_GT(checked[static_cast<size_t>(r)], 0) << what << " rank " << r << ": nothing went through the fence";
    EXPECT_TRUE(outside[static_cast<size_t>(r)].empty())
        << what << " rank " << r << " reached memory TensorOps did not make: " << outside[static_cast<size_t>(r)].front();
  }
}

}  // namespace cpbench
