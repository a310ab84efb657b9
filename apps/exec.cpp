#include "apps/exec.h"

#include <cstdio>
#include <iostream>

#include "baselines/cp_layouts.h"
#include "core/runtime/attention_check.h"
#include "core/runtime/mpi_communicator.h"
#include "core/runtime/mpi_session.h"
#include "core/workload/batch.h"
#include "core/workload/length_profile.h"

namespace cpbench {

namespace {

constexpr int kTagResult = 900;

// Stops every rank: an error on one rank must not leave the others waiting for it.
[[noreturn]] void fail(const std::string& message) { MpiCommunicator::abort_job(message, 2); }

}  // namespace

int cmd_exec(const ExecArgs& a, const std::filesystem::path& experiments_dir) {
  MpiSession session;  // a singleton MPI job when not started by mpirun
  auto world = MpiCommunicator::world(std::chrono::milliseconds(static_cast<int64_t>(a.timeout_s * 1000)));
  if (!world) {
    std::cerr << "cpbench exec: " << world.error_str() << "\n";
    return 2;
  }
  Communicator& comm = **world;
  const int rank = comm.rank();

  CpLayoutRequest req;
  req.layout = a.layout;
  req.cp = comm.size();
  req.a2a_size = a.a2a_size;
  req.heads_q = a.heads;
  req.heads_kv = a.kv_heads;
  req.head_dim = a.head_dim;
  req.pad = a.pad;
  auto mask = mask_from_name(a.mask);
  if (!mask) {
    if (rank == 0) std::cerr << "cpbench exec: --mask: " << mask.error_str() << "\n";
    return 2;
  }
  req.mask = *mask;
  req.seq_lengths = a.lengths;
  if (req.seq_lengths.empty()) {
    auto profile = load_length_profile(experiments_dir / "datasets" / (a.dataset + ".json"));
    if (!profile) {
      if (rank == 0) std::cerr << "cpbench exec: --dataset: " << profile.error_str() << "\n";
      return 2;
    }
    req.seq_lengths = make_global_batch(*profile, {0, a.tokens, profile->min_length,
                                                   std::min(profile->max_length, a.tokens), a.seed}).lengths;
  }
  auto plan = plan_cp_layout(req);
  if (!plan) {
    if (rank == 0) std::cerr << "cpbench exec: " << plan.error_str() << "\n";
    return 2;  // every rank reaches the same verdict: nothing to abort
  }
  OwnedInputs in = make_attention_inputs(*plan, a.seed);
  auto rep = execute_attention(*plan, comm, in.view(), a.backward);
  if (!rep) fail("rank " + std::to_string(rank) + ": " + rep.error_str());
  const RankBytes predicted = plan_bytes(*plan, a.backward);

  // Every rank checks its own rows against the reference (each computes it: inputs are tiny
  // next to what the ranks hold, and no result has to travel).
  ReferenceAttention ref = reference_attention(*plan, in, a.backward);
  CheckResult worst;
  for (const auto& h : rep->home) {
    CheckResult c = check_home(*plan, h, ref, a.backward);
    if (c.worst >= worst.worst) worst = c;
  }
  const bool bytes_ok = rep->bytes_sent == predicted.sent[rank] && rep->bytes_received == predicted.received[rank];
  char line[512];
  std::snprintf(line, sizeof line,
                "rank %d: compute %.3f s, wait %.3f s, sent %.0f B (plan %.0f), received %.0f B (plan %.0f), "
                "max error %.3g (%.2f of tolerance%s)%s\n",
                rank, rep->compute_s, rep->wait_s, rep->bytes_sent, predicted.sent[rank], rep->bytes_received,
                predicted.received[rank], worst.max_abs_error, worst.worst,
                worst.worst > 1 ? (", worst at " + worst.where).c_str() : "", bytes_ok ? "" : "  BYTES DIFFER FROM PLAN");
  // Rank 0 prints every rank's line in order.
  std::string mine(line);
  if (rank == 0) {
    int64_t tokens = 0;
    for (int64_t L : plan->seq_lengths) tokens += L;
    std::printf("%s, mask %s, cp %d, %zu sequences, %lld tokens (padded), heads %d/%d, d %d, %s; reference: %s\n",
                a.layout.c_str(), a.mask.c_str(), comm.size(), plan->seq_lengths.size(), static_cast<long long>(tokens),
                a.heads, a.kv_heads, a.head_dim, a.backward ? "forward + backward" : "forward", ref.kind.c_str());
    std::fputs(line, stdout);
    for (int r = 1; r < comm.size(); ++r) {
      std::vector<std::byte> buf(512);
      if (auto s = comm.recv(std::span<std::byte>(buf), r, kTagResult); !s) fail(s.error_str());
      std::fputs(reinterpret_cast<const char*>(buf.data()), stdout);
    }
    std::fflush(stdout);
  } else {
    std::vector<std::byte> buf(512);
    std::copy_n(reinterpret_cast<const std::byte*>(mine.c_str()), std::min<size_t>(mine.size() + 1, 511), buf.begin());
    if (auto s = comm.send(std::span<const std::byte>(buf), 0, kTagResult); !s) fail(s.error_str());
  }
  double ok = (worst.worst <= 1 && bytes_ok) ? 1 : 0;
  std::vector<double> all{ok};
  if (auto s = comm.all_reduce(std::span<double>(all), ReduceOp::kSum); !s) fail(s.error_str());
  return all[0] == comm.size() ? 0 : 1;
}

}  // namespace cpbench
