#include "apps/compare.h"

#include <iostream>

#include "core/experiment/runner.h"

namespace cpbench {

namespace fs = std::filesystem;

namespace {

constexpr int kExitOk = 0, kExitFailed = 1, kExitBadInput = 2;

int bad_input(const Errors& errors) {
  std::cerr << "cpbench: error:\n" << errors.str() << "\n";
  return kExitBadInput;
}

}  // namespace

int cmd_compare(const CompareArgs& a, const fs::path& experiments_dir) {
  auto cs = compare_spec(a.request, experiments_dir);
  if (!cs) return bad_input(cs.errors());
  const fs::path out(a.out);
  std::error_code ec;
  fs::create_directories(out, ec);
  const fs::path spec_file = out / "compare.json";
  if (auto s = write_file_atomic(spec_file, cs->spec.dump(2) + "\n"); !s) {
    std::cerr << "cpbench: error:\n" << s.error_str() << "\n";
    return kExitFailed;
  }
  auto spec = load_spec(spec_file, "compare", SpecOptions{experiments_dir, {}, {}});
  if (!spec) return bad_input(spec.errors());  // a mask name, a stack the hardware lacks, …
  std::cerr << "cpbench compare: " << spec->points.size() << " strategy variants on " << cs->lengths.lengths.size()
            << " lengths; base layout " << cs->base.why << "\n";
  RunOptions run;
  run.out_dir = out;
  run.jobs = a.jobs;
  run.experiments_dir = experiments_dir;
  run.progress_every_s = 10;
  auto results = run_experiment(*spec, run);
  if (!results) {
    std::cerr << "cpbench: error:\n" << results.error_str() << "\n";
    return kExitFailed;
  }
  const CompareRanking ranking = rank_compare(*spec, *results);
  std::cout << compare_table(ranking) << std::flush;

  FrameworkArgs megatron, torchtitan;
  std::string winner_layout = "nothing ran";
  if (!ranking.rows.empty() && ranking.rows.front().status == "ok") {
    PointConfig point = spec->points[ranking.rows.front().point];
    if (point.strategy == "ptdp_search") {  // the layout the search ranked first, said as plain PTD-P
      PlannedPoint planned = plan_point(point);
      point.parallel = planned.plan.layout;
      point.strategy = point.parallel.zero3 ? "zero3" : "ptdp";
    }
    // The per-batch strategies run Megatron dev's Dynamic-CP in a framework (framework_args.h), whose
    // groups come from the DP×CP ranks: no static CP.
    if (point.strategy == "adaptive_oracle" || point.strategy == "adaptive_rule") point.parallel.cp = 1;
    const ParallelConfig& l = point.parallel;
    winner_layout = "TP " + std::to_string(l.tp) + ", PP " + std::to_string(l.pp) +
                    (l.vp > 1 ? " (" + std::to_string(l.vp) + " virtual stages)" : "") + ", CP " + std::to_string(l.cp) +
                    ", DP " + std::to_string(l.dp()) + ", recompute " + l.recompute;
    megatron = megatron_arguments(point);
    torchtitan = torchtitan_config(point);
  }
  std::string megatron_text, torchtitan_text;
  for (const auto& line : megatron.lines) megatron_text += line + "\n";
  for (const auto& n : megatron.notes) megatron_text += "# " + n + "\n";
  for (const auto& line : torchtitan.lines) torchtitan_text += line + "\n";
  for (const auto& n : torchtitan.notes) torchtitan_text += "# " + n + "\n";
  const std::pair<const char*, std::string> files[] = {
      {"report.md", compare_report(*cs, ranking, a.command_line, megatron, torchtitan, winner_layout)},
      {"speedup.svg", compare_svg(ranking)},
      {"megatron_args.txt", megatron_text},
      {"torchtitan.toml", torchtitan_text}};
  for (const auto& [name, text] : files)
    if (auto s = write_file_atomic(out / name, text); !s) {
      std::cerr << "cpbench: error:\n" << s.error_str() << "\n";
      return kExitFailed;
    }
  size_t failed = 0;
  for (const auto& r : *results) failed += r && r->status == "error";
  std::cerr << "cpbench compare: wrote " << (out / "report.md").string() << ", speedup.svg, megatron_args.txt, "
            << "torchtitan.toml, compare.json and compare/results.json in " << out.string() << "\n";
  if (failed) std::cerr << "cpbench compare: " << failed << " strategy variants failed (see the table)\n";
  return failed ? kExitFailed : kExitOk;
}

}  // namespace cpbench
