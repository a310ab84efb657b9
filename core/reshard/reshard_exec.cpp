#include "core/reshard/reshard_exec.h"

#include <chrono>
#include <cstring>
#include <set>

#include "core/workload/rng.h"

namespace cpbench {
namespace {

// A deterministic value in [-1, 1) for element (row, col) of tensor t, state component k
// (0: the 16-bit weight, 1-3: fp32 master weight and the two moments): the first draw of
// SplitMix64 seeded with the key.
float element_value(int tensor, int k, int64_t row, int64_t col) {
  const uint64_t key = (static_cast<uint64_t>(tensor) << 48) ^ (static_cast<uint64_t>(k) << 44) ^
                       (static_cast<uint64_t>(row) << 22) ^ static_cast<uint64_t>(col);
  return static_cast<float>(2 * SplitMix64(key).uniform01() - 1);
}

size_t bpe(StateKind kind) { return static_cast<size_t>(bytes_per_element(kind)); }

// Byte offset of element (row, col) in a piece's row-major buffer.
size_t offset(const Rect& r, int64_t row, int64_t col, StateKind kind) {
  return static_cast<size_t>((row - r.r0) * (r.c1 - r.c0) + (col - r.c0)) * bpe(kind);
}

// The index of the piece of `pieces` that holds all of `x` (tensor, kind), or −1.
int holder(const std::vector<Piece>& pieces, const Piece& x) {
  for (size_t i = 0; i < pieces.size(); ++i)
    if (pieces[i].tensor == x.tensor && pieces[i].kind == x.kind && intersect(pieces[i].rect, x.rect) == x.rect)
      return static_cast<int>(i);
  return -1;
}

// Copies rect x between a piece buffer and a contiguous row-major run, in either direction.
void copy_rect(const Piece& piece, std::vector<std::byte>& buffer, const Piece& x, std::byte* run, bool to_run) {
  const size_t row_bytes = static_cast<size_t>(x.rect.c1 - x.rect.c0) * bpe(x.kind);
  for (int64_t row = x.rect.r0; row < x.rect.r1; ++row) {
    std::byte* in_piece = buffer.data() + offset(piece.rect, row, x.rect.c0, x.kind);
    std::byte* in_run = run + static_cast<size_t>(row - x.rect.r0) * row_bytes;
    if (to_run) std::memcpy(in_run, in_piece, row_bytes);
    else std::memcpy(in_piece, in_run, row_bytes);
  }
}

}  // namespace

std::vector<std::vector<std::byte>> generate_state(const std::vector<Piece>& pieces) {
  std::vector<std::vector<std::byte>> out;
  for (const Piece& p : pieces) {
    std::vector<std::byte> b(static_cast<size_t>(p.rect.area()) * bpe(p.kind));
    for (int64_t row = p.rect.r0; row < p.rect.r1; ++row)
      for (int64_t col = p.rect.c0; col < p.rect.c1; ++col) {
        std::byte* at = b.data() + offset(p.rect, row, col, p.kind);
        if (p.kind == StateKind::weights) {
          uint32_t bits;
          const float v = element_value(p.tensor, 0, row, col);
          std::memcpy(&bits, &v, 4);
          const uint16_t bf16 = static_cast<uint16_t>(bits >> 16);
          std::memcpy(at, &bf16, 2);
        } else {
          for (int k = 1; k <= 3; ++k) {
            const float v = element_value(p.tensor, k, row, col);
            std::memcpy(at + 4 * (k - 1), &v, 4);
          }
        }
      }
    out.push_back(std::move(b));
  }
  return out;
}

namespace {

// What GPU `me` holds before the change (nothing when lost or not a source rank) and keeps after
// it (nothing when it runs no target rank).
struct RankPieces {
  std::vector<Piece> have, want;
};
RankPieces rank_pieces(const ModelShape& model, const ReshardRequest& q, const ReshardPlan& plan,
                       const std::vector<int64_t>& gpus, int64_t me) {
  RankPieces out;
  const std::set<int64_t> lost(q.lost.begin(), q.lost.end());
  if (me < q.from.ranks() && !lost.count(me)) out.have = rank_state(model, plan.tensors, q.from, me);
  for (int64_t r = 0; r < q.to.ranks(); ++r)
    if (gpus[r] == me) out.want = rank_state(model, plan.tensors, q.to, r);
  return out;
}

double pieces_bytes(const std::vector<Piece>& pieces) {
  double b = 0;
  for (const Piece& p : pieces) b += static_cast<double>(p.rect.area()) * bpe(p.kind);
  return b;
}

}  // namespace

Expected<double> reshard_peak_bytes(const ModelShape& model, const ReshardRequest& q, const ReshardPlan& plan, int64_t gpu) {
  auto gpus = target_gpus(q);
  if (!gpus) return gpus.errors();
  const RankPieces pieces = rank_pieces(model, q, plan, *gpus, gpu);
  // The source state, the target assembled and the target built to compare with; then the
  // largest stage's send and receive buffers, or the largest slice copied in place.
  double stage_max = 0;
  for (size_t k = 0; k < plan.stages(); ++k) {
    double moved = 0;
    for (size_t i = plan.stage_begin[k]; i < plan.stage_begin[k + 1]; ++i) {
      const Transfer& t = plan.transfers[i];
      if (t.src == gpu && t.dst_gpu == gpu) stage_max = std::max(stage_max, t.bytes());
      else if (t.src == gpu || t.dst_gpu == gpu) moved += t.bytes();
    }
    stage_max = std::max(stage_max, moved);
  }
  return pieces_bytes(pieces.have) + 2 * pieces_bytes(pieces.want) + stage_max;
}

Expected<ReshardRun> execute_reshard(Communicator& comm, const ModelShape& model, const ReshardRequest& q,
                                     const ReshardPlan& plan) {
  const int64_t world = reshard_gpus(q);
  auto gpus = target_gpus(q);
  if (!gpus) return gpus.errors();
  if (comm.size() != world)
    return Error{"", "", "the re-shard " + q.from.str() + " → " + q.to.str() + " needs " + std::to_string(world) +
                             " ranks, the job has " + std::to_string(comm.size())};
  if (!plan.unrecoverable.empty()) {
    double bytes = 0;
    for (const Transfer& u : plan.unrecoverable) bytes += u.bytes();
    return Error{"", "", "needs a checkpoint: " + std::to_string(static_cast<int64_t>(bytes)) +
                             " bytes of the target state have no surviving source (lost ranks without a replica)"};
  }
  const int64_t me = comm.rank();
  const auto [have, want] = rank_pieces(model, q, plan, *gpus, me);
  std::vector<std::vector<std::byte>> source = generate_state(have);
  std::vector<std::vector<std::byte>> target(want.size());
  for (size_t i = 0; i < want.size(); ++i) target[i].assign(static_cast<size_t>(want[i].rect.area()) * bpe(want[i].kind), std::byte{0});

  // Every slice this rank sends it holds, every slice it receives it keeps: checked on every rank
  // and agreed before the first transfer, so a plan that does not fit the layouts is an error on
  // all ranks instead of one rank leaving the others waiting in a collective.
  double fits = 1;
  for (const Transfer& t : plan.transfers)
    if ((t.src == me && holder(have, t.piece) < 0) || (t.dst_gpu == me && holder(want, t.piece) < 0)) fits = 0;
  if (auto s = comm.all_reduce(std::span<double>(&fits, 1), ReduceOp::kSum); !s) return s.errors();
  if (fits < static_cast<double>(comm.size()))
    return Error{"", "", "the plan moves slices a rank does not hold under " + q.from.str() + " or keep under " + q.to.str() +
                             " (not a plan of this change)"};

  ReshardRun run;
  comm.reset_counters();
  if (auto s = comm.barrier(); !s) return s.errors();
  const auto start = std::chrono::steady_clock::now();
  const size_t n = static_cast<size_t>(world);
  for (size_t k = 0; k < plan.stages(); ++k) {
    // Both sides walk the stage's transfers in plan order, so each peer's bytes line up.
    std::vector<size_t> send_counts(n, 0), recv_counts(n, 0), send_displs(n, 0), recv_displs(n, 0);
    for (size_t i = plan.stage_begin[k]; i < plan.stage_begin[k + 1]; ++i) {
      const Transfer& t = plan.transfers[i];
      const size_t bytes = static_cast<size_t>(t.bytes());
      if (t.src == me && t.dst_gpu == me) {  // in place
        const int from = holder(have, t.piece), to = holder(want, t.piece);
        if (from < 0 || to < 0) return Error{"", "", "rank " + std::to_string(me) + ": a local copy of a slice it does not hold"};
        std::vector<std::byte> run_bytes(bytes);
        copy_rect(have[from], source[from], t.piece, run_bytes.data(), true);
        copy_rect(want[to], target[to], t.piece, run_bytes.data(), false);
        run.bytes_copied += bytes;
      } else if (t.src == me) {
        send_counts[t.dst_gpu] += bytes;
      } else if (t.dst_gpu == me) {
        recv_counts[t.src] += bytes;
      }
    }
    for (size_t r = 1; r < n; ++r) {
      send_displs[r] = send_displs[r - 1] + send_counts[r - 1];
      recv_displs[r] = recv_displs[r - 1] + recv_counts[r - 1];
    }
    std::vector<std::byte> send(send_displs[n - 1] + send_counts[n - 1]), recv(recv_displs[n - 1] + recv_counts[n - 1]);
    std::vector<size_t> send_at = send_displs, recv_at = recv_displs;
    for (size_t i = plan.stage_begin[k]; i < plan.stage_begin[k + 1]; ++i) {
      const Transfer& t = plan.transfers[i];
      if (t.src != me || t.dst_gpu == me) continue;
      const int from = holder(have, t.piece);
      if (from < 0) return Error{"", "", "rank " + std::to_string(me) + ": the plan sends a slice it does not hold"};
      copy_rect(have[from], source[from], t.piece, send.data() + send_at[t.dst_gpu], true);
      send_at[t.dst_gpu] += static_cast<size_t>(t.bytes());
      run.plan_bytes_sent += static_cast<uint64_t>(t.bytes());
    }
    if (auto s = comm.all_to_allv(std::span<const std::byte>(send), send_counts, send_displs, std::span<std::byte>(recv),
                                  recv_counts, recv_displs);
        !s)
      return s.errors();
    for (size_t i = plan.stage_begin[k]; i < plan.stage_begin[k + 1]; ++i) {
      const Transfer& t = plan.transfers[i];
      if (t.dst_gpu != me || t.src == me) continue;
      const int to = holder(want, t.piece);
      if (to < 0) return Error{"", "", "rank " + std::to_string(me) + ": the plan delivers a slice it does not hold"};
      copy_rect(want[to], target[to], t.piece, recv.data() + recv_at[t.src], false);
      recv_at[t.src] += static_cast<size_t>(t.bytes());
      run.plan_bytes_received += static_cast<uint64_t>(t.bytes());
    }
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.bytes_sent = comm.bytes_sent();
  run.bytes_received = comm.bytes_received();
  // The target state built directly under the target layout, bit for bit.
  const std::vector<std::vector<std::byte>> expected = generate_state(want);
  run.state_matches = true;
  for (size_t i = 0; i < want.size() && run.state_matches; ++i)
    if (expected[i] != target[i]) {
      run.state_matches = false;
      run.mismatch = "rank " + std::to_string(me) + ": " + plan.tensors[want[i].tensor].name +
                     (want[i].kind == StateKind::weights ? " (weights)" : " (optimizer)") + " differs from its state under " + q.to.str();
    }
  return run;
}

}  // namespace cpbench
