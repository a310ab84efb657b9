// flash_mma.cu — the tensor-core attention forward and backward (flash_mma.h) on a device: the
// blocks' code is flash_mma_body.h's, instantiated here with the device's own instructions
// (DeviceCtx: thread indices, __syncthreads, warp shuffles, mma.sync and ldmatrix as inline PTX,
// atomics); flash_mma_emulate.cpp runs the same code on the CPU.
#include "kernels/cuda/flash_mma.h"

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/flash_mma_body.h"

namespace cpbench::kernels {

namespace {

using mma_body::kThreads;

// What a CUDA thread of these kernels uses, as the bodies call it. Host versions exist only so
// that the __host__ __device__ bodies compile for the host side of this file; they never run.
struct DeviceCtx {
#if defined(__CUDA_ARCH__)
  CPB_HD_INLINE int thread() const { return static_cast<int>(threadIdx.x); }
  CPB_HD_INLINE int block_x() const { return static_cast<int>(blockIdx.x); }
  CPB_HD_INLINE int block_y() const { return static_cast<int>(blockIdx.y); }
  CPB_HD_INLINE int grid_x() const { return static_cast<int>(gridDim.x); }
#else
  CPB_HD_INLINE int thread() const { return 0; }
  CPB_HD_INLINE int block_x() const { return 0; }
  CPB_HD_INLINE int block_y() const { return 0; }
  CPB_HD_INLINE int grid_x() const { return 1; }
#endif
  CPB_HD_INLINE void sync() {
#if defined(__CUDA_ARCH__)
    __syncthreads();
#endif
  }
  CPB_HD_INLINE bool sync_or(bool v) {
#if defined(__CUDA_ARCH__)
    return __syncthreads_or(v) != 0;
#else
    return v;
#endif
  }
  CPB_HD_INLINE float shfl_xor(float x, int lane_mask) {
#if defined(__CUDA_ARCH__)
    return __shfl_xor_sync(0xffffffffu, x, lane_mask);
#else
    return x;
#endif
  }
  // D += A·B, m16n8k16, bf16 inputs, fp32 accumulators.
  CPB_HD_INLINE void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
  }
  // Four 8×8 bf16 matrices from shared memory, transposed: lane l gives the address of row l % 8 of
  // matrix l / 8; register m then holds, for lane (group, quad), rows 2·quad and 2·quad + 1 of
  // column `group` of matrix m — the B fragment (mma_b_coord) of a row-major [k][n] tile.
  CPB_HD_INLINE void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* row) {
#if defined(__CUDA_ARCH__)
    const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
#endif
  }
  CPB_HD_INLINE void atomic_add(float* p, float v) {
#if defined(__CUDA_ARCH__)
    atomicAdd(p, v);
#endif
  }
  CPB_HD_INLINE void atomic_min(int* p, int v) {
#if defined(__CUDA_ARCH__)
    atomicMin(p, v);
#endif
  }
  CPB_HD_INLINE void atomic_max(int* p, int v) {
#if defined(__CUDA_ARCH__)
    atomicMax(p, v);
#endif
  }
};

template <int D>
__global__ void __launch_bounds__(kThreads) mma_forward_kernel(SimtTile<Bf16> t, float* out, float* lse,
                                                               int64_t lse_stride) {
  __shared__ __align__(16) uint16_t ks[kMmaKeysPerBlock * mma_body::kForwardLd<D>];
  __shared__ __align__(16) uint16_t vs[kMmaKeysPerBlock * mma_body::kForwardLd<D>];
  __shared__ int span[2];
  DeviceCtx ctx;
  mma_body::forward_block<D>(ctx, t, out, lse, lse_stride, ks, vs, span);
}

__global__ void row_dot_kernel(SimtTile<Bf16> t, const Bf16* dout, const float* out, float* dvec) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // i·Hq + h
  if (item < t.rows_q * t.heads_q) mma_body::row_dot(t, dout, out, dvec, item);
}

template <int D>
__global__ void __launch_bounds__(kThreads) mma_backward_kernel(SimtTile<Bf16> t, const float* lse, int64_t lse_stride,
                                                                const float* dvec, const Bf16* dout, float* dq,
                                                                float* dk, float* dv) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceCtx ctx;
  mma_body::backward_block<D>(ctx, t, lse, lse_stride, dvec, dout, dq, dk, dv, smem);
}

template <int D>
int launch_backward(const SimtTile<Bf16>& t, const float* lse, int64_t lse_stride, const float* dvec, const Bf16* dout,
                    float* dq, float* dk, float* dv, cudaStream_t s) {
  constexpr size_t bytes = mma_body::backward_smem_bytes<D>();
  // More than 48 KB of dynamic shared memory needs the function's opt-in, set once.
  static const cudaError_t opted_in = cudaFuncSetAttribute(
      mma_backward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (opted_in != cudaSuccess) return static_cast<int>(opted_in);
  const dim3 grid(static_cast<unsigned>((t.rows_k + kMmaKeysPerBlock - 1) / kMmaKeysPerBlock),
                  static_cast<unsigned>(t.heads_kv));
  mma_backward_kernel<D><<<grid, kThreads, bytes, s>>>(t, lse, lse_stride, dvec, dout, dq, dk, dv);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int mma_forward_cuda(const SimtTile<Bf16>& t, float* out, float* lse, int64_t lse_stride, void* stream) {
  if (!mma_forward_supports(t)) return static_cast<int>(cudaErrorInvalidValue);
  if (t.rows_q == 0) return 0;
  const dim3 grid(static_cast<unsigned>((t.rows_q + kMmaRowsPerBlock - 1) / kMmaRowsPerBlock),
                  static_cast<unsigned>(t.heads_q));
  auto s = static_cast<cudaStream_t>(stream);
  if (t.head_dim == 64)
    mma_forward_kernel<64><<<grid, kThreads, 0, s>>>(t, out, lse, lse_stride);
  else
    mma_forward_kernel<128><<<grid, kThreads, 0, s>>>(t, out, lse, lse_stride);
  return static_cast<int>(cudaGetLastError());
}

int mma_backward_cuda(const SimtTile<Bf16>& t, const float* out, const float* lse, int64_t lse_stride,
                      const Bf16* dout, float* dq, float* dk, float* dv, void* stream) {
  if (!mma_backward_supports(t, dout)) return static_cast<int>(cudaErrorInvalidValue);
  if (t.rows_q == 0 || t.rows_k == 0) return 0;  // no pair: every gradient term is zero
  auto s = static_cast<cudaStream_t>(stream);
  const int64_t items = t.rows_q * t.heads_q;
  float* dvec = nullptr;
  if (const cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&dvec), items * sizeof(float), s); e != cudaSuccess)
    return static_cast<int>(e);
  row_dot_kernel<<<static_cast<unsigned>((items + kThreads - 1) / kThreads), kThreads, 0, s>>>(t, dout, out, dvec);
  int rc = static_cast<int>(cudaGetLastError());
  if (rc == 0)
    rc = t.head_dim == 64 ? launch_backward<64>(t, lse, lse_stride, dvec, dout, dq, dk, dv, s)
                          : launch_backward<128>(t, lse, lse_stride, dvec, dout, dq, dk, dv, s);
  const cudaError_t freed = cudaFreeAsync(dvec, s);
  return rc != 0 ? rc : static_cast<int>(freed);
}

}  // namespace cpbench::kernels
