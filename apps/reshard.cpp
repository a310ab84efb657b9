#include "apps/reshard.h"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "apps/exec.h"
#include "core/experiment/registry.h"
#include "core/reshard/reshard_exec.h"
#include "core/runtime/mpi_communicator.h"
#include "core/runtime/mpi_session.h"

namespace cpbench {
namespace {

// "t,p,d" or "t,p,d,dist-opt".
Expected<StateLayout> parse_layout(const std::string& text, const std::string& option) {
  std::stringstream in(text);
  std::vector<std::string> parts;
  for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
  StateLayout L;
  bool good = parts.size() == 3 || (parts.size() == 4 && parts[3] == "dist-opt");
  try {
    if (good) {
      L.tp = std::stoll(parts[0]);
      L.pp = std::stoll(parts[1]);
      L.dp = std::stoll(parts[2]);
      L.distributed_optimizer = parts.size() == 4;
      good = L.tp >= 1 && L.pp >= 1 && L.dp >= 1 && L.ranks() <= 4096;
    }
  } catch (const std::exception&) {
    good = false;
  }
  if (!good) return Error{option, "", "expected t,p,d (positive integers, t·p·d ≤ 4096) with an optional ,dist-opt; got \"" + text + "\""};
  return L;
}

std::string mb(double bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f", bytes / 1e6);
  return s;
}

}  // namespace

int cmd_reshard(const ReshardArgs& a, const std::filesystem::path& experiments_dir) {
  MpiSession session;  // a singleton job when not started by mpirun
  auto world = open_world("reshard", std::chrono::milliseconds(static_cast<int64_t>(std::ceil(a.timeout_s * 1000))));
  if (!world) return 2;
  Communicator& comm = *world;
  const int rank = comm.rank();
  // Every verdict before the transfers depends on the arguments only: all ranks return 2 alike.
  auto refuse = [rank](const std::string& why) { return refuse_input(rank, "reshard", why); };
  auto from = parse_layout(a.from, "--from");
  if (!from) return refuse(from.error_str());
  auto to = parse_layout(a.to, "--to");
  if (!to) return refuse(to.error_str());
  auto model = load_model(experiments_dir / "models" / (a.model + ".json"));
  if (!model) return refuse(model.error_str());
  ReshardRequest q;
  q.from = *from;
  q.to = *to;
  q.gpus_per_node = a.gpus_per_node;
  q.staging_bytes = a.staging_mib * 1024 * 1024;
  q.lost = a.lost;
  q.max_seq = a.max_seq;
  auto plan = plan_reshard(*model, q);
  if (!plan) return refuse(plan.error_str());
  if (auto why = check_reshard_plan(*model, q, *plan); !why.empty()) return refuse("the plan fails its check: " + why);
  const GpuStateBytes b = rank_bytes(*plan, q);
  const int64_t ranks = reshard_gpus(q);
  double total[3] = {0, 0, 0};
  for (const auto& r : b.received)
    for (int c = 0; c < 3; ++c) total[c] += r[c];
  if (rank == 0)
    std::printf("%s %s → %s on %lld GPUs (%lld per node): %zu transfers in %zu stage(s); in place %s MB, NVLink %s MB, network %s MB\n",
                model->name.c_str(), from->str().c_str(), to->str().c_str(), static_cast<long long>(ranks),
                static_cast<long long>(a.gpus_per_node), plan->transfers.size(), plan->stages(), mb(total[0]).c_str(),
                mb(total[1]).c_str(), mb(total[2]).c_str());
  if (!plan->unrecoverable.empty()) {
    double lost_bytes = 0;
    for (const Transfer& u : plan->unrecoverable) lost_bytes += u.bytes();
    return refuse("needs a checkpoint: " + mb(lost_bytes) + " MB of the target state (" +
                  std::to_string(plan->unrecoverable.size()) + " slices) have no surviving source: the lost ranks had no replica");
  }
  if (comm.size() != ranks) {
    if (comm.size() == 1) {  // plan only
      for (int64_t r = 0; r < ranks; ++r)
        std::printf("rank %lld: sends in place %s MB, NVLink %s MB, network %s MB; receives NVLink %s MB, network %s MB\n",
                    static_cast<long long>(r), mb(b.sent[r][0]).c_str(), mb(b.sent[r][1]).c_str(), mb(b.sent[r][2]).c_str(),
                    mb(b.received[r][1]).c_str(), mb(b.received[r][2]).c_str());
      std::printf("plan only: run under mpirun -np %lld to execute it\n", static_cast<long long>(ranks));
      return 0;
    }
    return refuse("this change runs on " + std::to_string(ranks) + " ranks (mpirun -np " + std::to_string(ranks) +
                  "), the job has " + std::to_string(comm.size()));
  }
  // Refused before anything is allocated when the hosts cannot hold it (a long --max-seq sizes the
  // position table; the state of a large model).
  auto peak = reshard_peak_bytes(*model, q, *plan, rank);
  if (!peak) return refuse(peak.error_str());
  if (auto why = host_memory_verdict(comm, *peak, "the source and target state of " + model->name); !why.empty())
    return refuse(why);
  auto run = execute_reshard(comm, *model, q, *plan);
  if (!run) fail("rank " + std::to_string(rank) + ": " + run.error_str());
  const bool bytes_ok = run->bytes_sent == run->plan_bytes_sent && run->bytes_received == run->plan_bytes_received;
  char line[400];
  std::snprintf(line, sizeof line,
                "rank %d: %.3f s, sent %llu B (plan %llu), received %llu B (plan %llu), in place %llu B; state %s%s\n", rank,
                run->seconds, static_cast<unsigned long long>(run->bytes_sent), static_cast<unsigned long long>(run->plan_bytes_sent),
                static_cast<unsigned long long>(run->bytes_received), static_cast<unsigned long long>(run->plan_bytes_received),
                static_cast<unsigned long long>(run->bytes_copied),
                run->state_matches ? "equals the target layout's, bit for bit" : ("DIFFERS: " + run->mismatch).c_str(),
                bytes_ok ? "" : "  BYTES DIFFER FROM PLAN");
  print_in_rank_order(comm, line);
  std::vector<double> ok{run->state_matches && bytes_ok ? 1.0 : 0.0};
  if (auto s = comm.all_reduce(std::span<double>(ok), ReduceOp::kSum); !s) fail(s.error_str());
  return ok[0] == comm.size() ? 0 : 1;
}

}  // namespace cpbench
