// attention_gpu_bench.cpp — our attention kernels beside cuDNN's fused SDPA on one GPU, on the
// shapes issue 32's targets name: one sequence of L tokens (2K and 8K), 32 heads of 128, bf16,
// causal and full, and a pack of 32K tokens of causal documents of 128–8192 tokens (log-uniform;
// ours as one tile with block-diagonal key ranges, cuDNN as THD ragged). Rows: our tensor-core
// forward and backward (flash_mma), our SIMT forward (the correctness path), cuDNN's forward and
// backward through SdpaRunner (the GPU backend's fast path). torch's own SDPA backends run on the
// single-sequence shapes from scripts/measure_gpu_ops.py --sdpa, so the two files read side by
// side (scripts/device_check.sh writes both).
// Requires: a CUDA device; cuDNN and cudnn-frontend at build time (CMake builds *_gpu_bench files
// only then). Run: ./build/attention_gpu_bench [--benchmark_format=csv].
// Note: each timing is one call between two CUDA events (manual time), after a warm-up call that
// also builds cuDNN's plan. TFLOP/s counts 4·pairs·heads·d forward and 2.5× that backward
// (FlashAttention-2, Dao 2023, §4.1), pairs = allowed (query, key) pairs: a causal call is credited
// half the work of a full one, as FlashAttention's and cuDNN's benchmarks count it.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/flash_mma.h"
#include "kernels/cuda/flash_simt_cuda.h"
#include "kernels/cudnn/sdpa_graph.h"

namespace {

using namespace cpbench::kernels;

constexpr int64_t kHeads = 32, kHeadDim = 128;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "attention_gpu_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// What a benchmark's second argument names: one sequence with a full or a causal mask, or a pack
// of causal sequences of different lengths (THD, one call over all of them: a training batch of
// documents).
enum class Kind : int64_t { full = 0, causal = 1, causal_pack = 2 };

// Device buffers of one call over L tokens: bf16 Q, K, V, dO and outputs, the rows' key ranges,
// and for a pack its sequences as cuDNN's ragged THD reads them.
struct Problem {
  int64_t L = 0;
  Kind kind = Kind::full;
  std::vector<int64_t> lengths;  // the sequences (one unless a pack)
  Bf16 *q = nullptr, *k = nullptr, *v = nullptr, *d_o = nullptr, *o16 = nullptr, *dq = nullptr, *dk = nullptr,
       *dv = nullptr;
  float *o32 = nullptr, *lse = nullptr, *stats = nullptr, *dq32 = nullptr, *dk32 = nullptr, *dv32 = nullptr;
  KeyRanges* ranges = nullptr;
  int32_t *seq_len = nullptr, *offsets = nullptr;

  Problem(int64_t length, Kind k_) : L(length), kind(k_) {
    uint64_t x = 88172645463325252ull;  // xorshift
    auto next = [&x] {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      return static_cast<double>(x >> 11) / static_cast<double>(1ull << 53);  // [0, 1)
    };
    // A pack: lengths log-uniform in [128, 8192], the last cut to fill L exactly.
    for (int64_t left = L; left > 0;) {
      const int64_t n = kind == Kind::causal_pack ? static_cast<int64_t>(128.0 * std::pow(64.0, next())) : L;
      lengths.push_back(std::min(n, left));
      left -= lengths.back();
    }
    const size_t n = static_cast<size_t>(L * kHeads * kHeadDim);
    std::vector<Bf16> host(n);
    for (Bf16& e : host) e = to_bf16(static_cast<float>(2.0 * next() - 1.0));  // values in [−1, 1)
    for (Bf16** p : {&q, &k, &v, &d_o, &o16, &dq, &dk, &dv}) {
      check(cudaMalloc(p, n * sizeof(Bf16)), "cudaMalloc");
      check(cudaMemcpy(*p, host.data(), n * sizeof(Bf16), cudaMemcpyHostToDevice), "upload");
    }
    for (float** p : {&o32, &dq32, &dk32, &dv32}) {
      check(cudaMalloc(p, n * sizeof(float)), "cudaMalloc");
      check(cudaMemset(*p, 0, n * sizeof(float)), "cudaMemset");
    }
    check(cudaMalloc(&lse, static_cast<size_t>(L * kHeads) * sizeof(float)), "cudaMalloc");
    // cuDNN's statistics: [B, H, longest, 1].
    check(cudaMalloc(&stats, static_cast<size_t>(lengths.size() * kHeads * longest()) * sizeof(float)), "cudaMalloc");
    std::vector<KeyRanges> r;
    std::vector<int32_t> lens, offs{0};
    int64_t start = 0;
    for (int64_t len : lengths) {
      for (int64_t i = start; i < start + len; ++i)
        r.push_back(kind == Kind::full ? KeyRanges{0, L, 0, 0} : KeyRanges{start, i + 1, 0, 0});
      start += len;
      lens.push_back(static_cast<int32_t>(len));
      offs.push_back(static_cast<int32_t>(start * kHeads * kHeadDim));  // cuDNN's ragged offsets: elements
    }
    check(cudaMalloc(&ranges, r.size() * sizeof(KeyRanges)), "cudaMalloc");
    check(cudaMemcpy(ranges, r.data(), r.size() * sizeof(KeyRanges), cudaMemcpyHostToDevice), "upload");
    check(cudaMalloc(&seq_len, lens.size() * sizeof(int32_t)), "cudaMalloc");
    check(cudaMemcpy(seq_len, lens.data(), lens.size() * sizeof(int32_t), cudaMemcpyHostToDevice), "upload");
    check(cudaMalloc(&offsets, offs.size() * sizeof(int32_t)), "cudaMalloc");
    check(cudaMemcpy(offsets, offs.data(), offs.size() * sizeof(int32_t), cudaMemcpyHostToDevice), "upload");
  }
  ~Problem() {
    for (void* p : {(void*)q, (void*)k, (void*)v, (void*)d_o, (void*)o16, (void*)dq, (void*)dk, (void*)dv, (void*)o32,
                    (void*)lse, (void*)stats, (void*)ranges, (void*)dq32, (void*)dk32, (void*)dv32, (void*)seq_len,
                    (void*)offsets})
      cudaFree(p);
  }
  int64_t longest() const { return *std::max_element(lengths.begin(), lengths.end()); }
  SimtTile<Bf16> tile() const {
    SimtTile<Bf16> t;
    t.q = q, t.k = k, t.v = v, t.ranges = ranges;
    t.rows_q = t.rows_k = L;
    t.heads_q = t.heads_kv = kHeads;
    t.head_dim = kHeadDim;
    t.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    return t;
  }
  double forward_flops() const {
    double pairs = 0;
    for (int64_t len : lengths) {
      const double l = static_cast<double>(len);
      pairs += kind == Kind::full ? l * l : 0.5 * l * (l + 1);
    }
    return 4.0 * pairs * kHeads * kHeadDim;
  }
};

// Times `call` once per iteration between two events; reports TFLOP/s of `flops` per call.
template <class Call>
void run_timed(benchmark::State& state, double flops, Call call) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  call();  // warm-up (and cuDNN's plan build)
  check(cudaDeviceSynchronize(), "warm-up");
  for (auto _ : state) {
    check(cudaEventRecord(a), "cudaEventRecord");
    call();
    check(cudaEventRecord(b), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    state.SetIterationTime(ms * 1e-3);
  }
  state.counters["TFLOP/s"] = benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
}

void label(benchmark::State& state, const Problem& p) {
  const char* what = p.kind == Kind::full ? "full" : p.kind == Kind::causal ? "causal" : "causal pack";
  state.SetLabel(std::string(what) + " L=" + std::to_string(p.L) + " sequences=" + std::to_string(p.lengths.size()) +
                 " H=" + std::to_string(kHeads) + " d=" + std::to_string(kHeadDim));
}

// Args: L, Kind (0 full, 1 causal, 2 a causal pack).
void BM_OursTensorCoreForward(benchmark::State& state) {
  const Problem p(state.range(0), static_cast<Kind>(state.range(1)));
  run_timed(state, p.forward_flops(), [&] { check(static_cast<cudaError_t>(mma_forward_cuda(p.tile(), p.o32, p.lse, p.L, nullptr)), "mma forward"); });
  label(state, p);
}

// Our tensor-core backward on the forward's O and LSE (gradients added into fp32 buffers).
void BM_OursTensorCoreBackward(benchmark::State& state) {
  const Problem p(state.range(0), static_cast<Kind>(state.range(1)));
  check(static_cast<cudaError_t>(mma_forward_cuda(p.tile(), p.o32, p.lse, p.L, nullptr)), "mma forward");
  run_timed(state, 2.5 * p.forward_flops(), [&] {
    check(static_cast<cudaError_t>(mma_backward_cuda(p.tile(), p.o32, p.lse, p.L, p.d_o, p.dq32, p.dk32, p.dv32, nullptr)),
          "mma backward");
  });
  label(state, p);
}

void BM_OursSimtForward(benchmark::State& state) {
  const Problem p(state.range(0), static_cast<Kind>(state.range(1)));
  run_timed(state, p.forward_flops(), [&] { check(static_cast<cudaError_t>(simt_forward_cuda(p.tile(), p.o32, p.lse, p.L, nullptr)), "simt forward"); });
  label(state, p);
}

SdpaShape sdpa_shape(const Problem& p) {
  SdpaShape s;
  s.batch = static_cast<int64_t>(p.lengths.size());
  s.heads_q = s.heads_kv = kHeads;
  s.s_q = s.s_kv = p.longest();
  s.head_dim = kHeadDim;
  s.ragged = p.kind == Kind::causal_pack;
  return s;
}

void cudnn_pass(benchmark::State& state, bool backward) {
  const Problem p(state.range(0), static_cast<Kind>(state.range(1)));
  std::string error;
  auto runner = SdpaRunner::create(nullptr, &error);
  if (!runner) {
    state.SkipWithError(error.c_str());
    return;
  }
  const TileMode mode{p.kind == Kind::full ? TileMask::full : TileMask::causal_top_left, 0};
  SdpaTensors t;
  t.q = p.q, t.k = p.k, t.v = p.v, t.o = p.o16, t.stats = p.stats;
  t.o_in = p.o16, t.stats_in = p.stats, t.d_o = p.d_o, t.dq = p.dq, t.dk = p.dk, t.dv = p.dv;
  if (p.kind == Kind::causal_pack) t.seq_len_q = t.seq_len_kv = p.seq_len, t.offsets_q = t.offsets_kv = p.offsets;
  const SdpaStatus fwd = runner->forward(sdpa_shape(p), mode, t);  // the backward's inputs, and a check
  if (!fwd.ok) {
    state.SkipWithError(fwd.message.c_str());
    return;
  }
  run_timed(state, backward ? 2.5 * p.forward_flops() : p.forward_flops(), [&] {
    const SdpaStatus st = backward ? runner->backward(sdpa_shape(p), mode, t) : runner->forward(sdpa_shape(p), mode, t);
    if (!st.ok) {
      std::fprintf(stderr, "attention_gpu_bench: cuDNN %s: %s\n", backward ? "backward" : "forward", st.message.c_str());
      std::exit(1);
    }
  });
  label(state, p);
}
void BM_CudnnForward(benchmark::State& state) { cudnn_pass(state, false); }
void BM_CudnnBackward(benchmark::State& state) { cudnn_pass(state, true); }

void shapes(benchmark::internal::Benchmark* b) {
  for (int64_t L : {2048, 8192})
    for (Kind kind : {Kind::causal, Kind::full}) b->Args({L, static_cast<int64_t>(kind)});
  b->Args({32768, static_cast<int64_t>(Kind::causal_pack)});  // a batch of documents, 128–8192 tokens each
  b->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);
}

BENCHMARK(BM_OursTensorCoreForward)->Apply(shapes);
BENCHMARK(BM_OursTensorCoreBackward)->Apply(shapes);
BENCHMARK(BM_CudnnForward)->Apply(shapes);
BENCHMARK(BM_CudnnBackward)->Apply(shapes);
BENCHMARK(BM_OursSimtForward)->Args({2048, 1})->Args({8192, 1})->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

int main(int argc, char** argv) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "attention_gpu_bench: no CUDA device\n");
    return 1;
  }
  benchmark::AddCustomContext("device", prop.name);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
