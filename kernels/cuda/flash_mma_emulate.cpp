// flash_mma_emulate.cpp — a host context for flash_mma_body.h's blocks (flash_mma_emulate.h).
// Written here rather than taken from a library: no maintained CPU emulator of warp-level PTX
// (mma.sync, ldmatrix) runs a kernel's own C++ source.
#include "kernels/cuda/flash_mma_emulate.h"

#include <array>
#include <atomic>
#include <barrier>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/cuda/flash_mma_body.h"

namespace cpbench::kernels {

namespace {

using mma_body::kThreads;

// The PTX ISA's fragment layouts for mma.m16n8k16 with .bf16 inputs ("Matrix fragments for
// mma.m16n8k16"), lane = 4·groupID + threadID_in_group: where each element of A (16×16) and B
// (16×8) is held — (lane, 32-bit register, half: 0 the low 16 bits).
struct Where {
  int lane = 0, reg = 0, half = 0;
};
struct Layouts {
  Where a[16][16];
  Where b[16][8];
  Layouts() {
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, t = lane % 4;
      // A: a0..a7 in registers of two; a_i at row g (+8 for i = 2, 3, 6, 7), column 2t + (i & 1)
      // (+8 for i ≥ 4).
      for (int i = 0; i < 8; ++i) {
        const int row = g + ((i / 2) % 2) * 8, col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
        a[row][col] = {lane, i / 2, i & 1};
      }
      // B: b0..b3; b_i at row 2t + (i & 1) (+8 for i ≥ 2), column g.
      for (int i = 0; i < 4; ++i) b[2 * t + (i & 1) + (i >= 2 ? 8 : 0)][g] = {lane, i / 2, i & 1};
    }
  }
};
const Layouts& layouts() {
  static const Layouts l;
  return l;
}

float half_of(uint32_t reg, int half) { return to_f32(Bf16{static_cast<uint16_t>(half ? reg >> 16 : reg & 0xffffu)}); }

// One thread block's shared state: the barriers and each warp's exchange slots.
struct Block {
  Block(int bx, int by, int gx) : all(kThreads), x(bx), y(by), grid_x(gx) {
    for (int w = 0; w < kThreads / 32; ++w) warp.push_back(std::make_unique<std::barrier<>>(32));
    slots.resize(2 * kThreads / 32);
  }
  struct Slot {
    uint32_t a[4] = {};
    uint32_t b[2] = {};
    float f = 0;
    const uint16_t* p = nullptr;
  };
  std::barrier<> all;
  std::vector<std::unique_ptr<std::barrier<>>> warp;
  // Two banks per warp, used by alternate warp instructions: a lane writes the next instruction's
  // operands only after the barrier that every lane reached once done reading the previous one's,
  // so one barrier per instruction suffices.
  std::vector<std::array<Slot, 32>> slots;
  std::atomic<bool> any{false};
  int x, y, grid_x;
};

std::mutex atomics;  // the device's atomics: every emulated thread of every block

class HostCtx {
 public:
  HostCtx(Block& b, int thread) : b_(b), thread_(thread), lane_(thread % 32), warp_(thread / 32) {}
  int thread() const { return thread_; }
  int block_x() const { return b_.x; }
  int block_y() const { return b_.y; }
  int grid_x() const { return b_.grid_x; }
  void sync() { b_.all.arrive_and_wait(); }
  bool sync_or(bool v) {
    if (v) b_.any = true;
    sync();
    const bool any = b_.any;
    sync();
    if (thread_ == 0) b_.any = false;
    sync();
    return any;
  }
  float shfl_xor(float x, int lane_mask) {
    mine().f = x;
    warp_sync();
    return lane(lane_ ^ lane_mask).f;
  }
  // D += A·B over the warp: this lane's four D elements (c0, c1 at row g, columns 2t and 2t + 1;
  // c2, c3 at row g + 8), each a sum over k of A and B elements read from the lanes holding them.
  void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    for (int r = 0; r < 4; ++r) mine().a[r] = a[r];
    mine().b[0] = b0, mine().b[1] = b1;
    warp_sync();
    const Layouts& l = layouts();
    const int g = lane_ / 4, t = lane_ % 4;
    for (int e = 0; e < 4; ++e) {
      const int row = g + (e / 2) * 8, col = 2 * t + (e & 1);
      float s = 0.0f;
      for (int k = 0; k < 16; ++k) {
        const Where wa = l.a[row][k], wb = l.b[k][col];
        s += half_of(lane(wa.lane).a[wa.reg], wa.half) * half_of(lane(wb.lane).b[wb.reg], wb.half);
      }
      d[e] += s;
    }
  }
  // ldmatrix .x4 .trans: lane l addresses row l % 8 of matrix l / 8; register m of lane (g, t)
  // gets that matrix's elements (2t, g) and (2t + 1, g), the first in the low half.
  void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* row) {
    mine().p = row;
    warp_sync();
    const int g = lane_ / 4, t = lane_ % 4;
    for (int m = 0; m < 4; ++m)
      r[m] = static_cast<uint32_t>(lane(8 * m + 2 * t).p[g]) | (static_cast<uint32_t>(lane(8 * m + 2 * t + 1).p[g]) << 16);
  }
  void atomic_add(float* p, float v) {
    const std::lock_guard<std::mutex> lock(atomics);
    *p += v;
  }
  void atomic_min(int* p, int v) {
    const std::lock_guard<std::mutex> lock(atomics);
    if (v < *p) *p = v;
  }
  void atomic_max(int* p, int v) {
    const std::lock_guard<std::mutex> lock(atomics);
    if (v > *p) *p = v;
  }

 private:
  // After writing this instruction's operands: every lane's are there. The bank flips for the next.
  void warp_sync() {
    b_.warp[warp_]->arrive_and_wait();
    reading_ = bank_;
    bank_ ^= 1;
  }
  Block::Slot& mine() { return b_.slots[2 * warp_ + bank_][lane_]; }
  const Block::Slot& lane(int l) const { return b_.slots[2 * warp_ + reading_][l]; }

  Block& b_;
  int thread_, lane_, warp_;
  int bank_ = 0, reading_ = 0;
};

// Shared memory of one block, 16-byte aligned.
class Shared {
 public:
  explicit Shared(size_t bytes) : v_(bytes / 16 + 1) {}
  unsigned char* bytes() { return reinterpret_cast<unsigned char*>(v_.data()); }

 private:
  struct alignas(16) Chunk {
    unsigned char b[16] = {};
  };
  std::vector<Chunk> v_;
};

// Runs body(ctx, shared) for every thread of every block of a gx × gy grid, one block at a time,
// each block with `shared_bytes` of shared memory its threads share.
template <class Body>
void run_grid(int gx, int gy, size_t shared_bytes, Body body) {
  for (int y = 0; y < gy; ++y)
    for (int x = 0; x < gx; ++x) {
      Block block(x, y, gx);
      Shared shared(shared_bytes);
      std::vector<std::thread> threads;
      for (int i = 0; i < kThreads; ++i)
        threads.emplace_back([&block, &shared, &body, i] {
          HostCtx ctx(block, i);
          body(ctx, shared.bytes());
        });
      for (std::thread& th : threads) th.join();
    }
}

int blocks(int64_t n, int per) { return static_cast<int>((n + per - 1) / per); }

template <int D>
void forward(const SimtTile<Bf16>& t, float* out, float* lse, int64_t lse_stride) {
  constexpr size_t kv = sizeof(uint16_t) * kMmaKeysPerBlock * mma_body::kForwardLd<D>;  // a multiple of 16
  run_grid(blocks(t.rows_q, kMmaRowsPerBlock), static_cast<int>(t.heads_q), 2 * kv + 2 * sizeof(int),
           [&](HostCtx& ctx, unsigned char* smem) {
             mma_body::forward_block<D>(ctx, t, out, lse, lse_stride, reinterpret_cast<uint16_t*>(smem),
                                        reinterpret_cast<uint16_t*>(smem + kv), reinterpret_cast<int*>(smem + 2 * kv));
           });
}

template <int D>
void backward(const SimtTile<Bf16>& t, const float* lse, int64_t lse_stride, const float* dvec, const Bf16* dout,
              float* dq, float* dk, float* dv) {
  run_grid(blocks(t.rows_k, kMmaKeysPerBlock), static_cast<int>(t.heads_kv), mma_body::backward_smem_bytes<D>(),
           [&](HostCtx& ctx, unsigned char* smem) {
             mma_body::backward_block<D>(ctx, t, lse, lse_stride, dvec, dout, dq, dk, dv, smem);
           });
}

}  // namespace

void mma_forward_emulated(const SimtTile<Bf16>& t, float* out, float* lse, int64_t lse_stride) {
  if (!mma_forward_supports(t)) throw std::invalid_argument("mma_forward_emulated: a tile the kernel does not take");
  if (t.rows_q == 0) return;
  if (t.head_dim == 64) forward<64>(t, out, lse, lse_stride);
  else forward<128>(t, out, lse, lse_stride);
}

void mma_backward_emulated(const SimtTile<Bf16>& t, const float* out, const float* lse, int64_t lse_stride,
                           const Bf16* dout, float* dq, float* dk, float* dv) {
  if (!mma_backward_supports(t, dout)) throw std::invalid_argument("mma_backward_emulated: a tile the kernel does not take");
  if (t.rows_q == 0 || t.rows_k == 0) return;
  std::vector<float> dvec(static_cast<size_t>(t.rows_q * t.heads_q));
  for (int64_t item = 0; item < t.rows_q * t.heads_q; ++item) mma_body::row_dot(t, dout, out, dvec.data(), item);
  if (t.head_dim == 64) backward<64>(t, lse, lse_stride, dvec.data(), dout, dq, dk, dv);
  else backward<128>(t, lse, lse_stride, dvec.data(), dout, dq, dk, dv);
}

}  // namespace cpbench::kernels
