#include "core/experiment/compare.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "core/experiment/registry.h"
#include "core/model/formulas.h"
#include "core/model/hf_config.h"

namespace cpbench {

namespace fs = std::filesystem;

namespace {

constexpr double kStateShareOfMemory = 0.4;  // compare_base_layout's rule (header)

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

json model_json(const ModelShape& m) {
  return json{{"name", m.name},
              {"layers", m.layers},
              {"hidden", m.hidden},
              {"heads", m.heads},
              {"kv_heads", m.kv_heads},
              {"ffn_hidden", m.ffn_hidden},
              {"gated_mlp", m.gated_mlp},
              {"vocab", m.vocab},
              {"norm", m.norm},
              {"position_embedding", m.position_embedding},
              {"bias", m.bias},
              {"tied_embeddings", m.tied_embeddings},
              {"dropout", m.dropout},
              {"source", m.source}};
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

// A flag's error: the command line is the "file" a user edits.
Error flag_error(const std::string& flag, const std::string& message) { return Error{"command line", flag, message}; }

}  // namespace

BaseLayout compare_base_layout(const ModelShape& model, const ClusterSpec& cluster, int64_t num_gpus) {
  const double params = params_exact(model, 4096);
  const double limit = kStateShareOfMemory * cluster.gpu.hbm_bytes();
  BaseLayout best;
  double best_state = 0;
  bool found = false;
  for (int64_t size = 1; size <= num_gpus && !found; size *= 2) {
    // Of one model-parallel size, the layout with the most TP (TP inside a node, as Megatron's recipes).
    for (int64_t tp = std::min<int64_t>(size, cluster.gpus_per_node); tp >= 1 && !found; tp /= 2) {
      const int64_t pp = size / tp;
      if (tp * pp != size || num_gpus % size != 0) continue;
      if (model.heads % tp || model.kv_heads % tp || model.ffn_hidden % tp || model.layers % pp) continue;
      const double state = weight_and_optimizer_bytes(params / size, static_cast<int>(num_gpus / size), true, 4.0);
      best = {tp, pp, ""};
      best_state = state;
      found = state <= limit;
    }
  }
  const double gib = 1024.0 * 1024.0 * 1024.0;
  best.why = "TP " + std::to_string(best.tp) + ", PP " + std::to_string(best.pp) +
             ": the smallest model-parallel size (TP first, inside a node) whose weights, gradients and "
             "distributed-optimizer state (" + fixed(best_state / gib, 1) + " GiB per GPU) take at most " +
             fixed(100 * kStateShareOfMemory, 0) + " % of the GPU's " + fixed(cluster.gpu.hbm_gib, 0) + " GiB" +
             (found ? "" : " — none does; the largest model-parallel layout is used");
  return best;
}

Expected<CompareSpec> compare_spec(const CompareRequest& r, const fs::path& experiments_dir) {
  CompareSpec cs;
  // The inputs, each checked where the user wrote it.
  auto lengths = read_lengths_file(r.lengths, r.column);
  if (!lengths) return lengths.errors();
  cs.lengths = std::move(*lengths);
  const auto& L = cs.lengths.lengths;
  const int64_t longest = *std::max_element(L.begin(), L.end());
  cs.max_length = r.max_length > 0 ? r.max_length : longest;
  if (r.overlong == "error" && longest > cs.max_length) {
    Errors errors;
    size_t shown = 0, over = 0;
    for (size_t i = 0; i < L.size(); ++i)
      if (L[i] > cs.max_length && ++over && ++shown <= 5)
        errors.list.push_back({cs.lengths.where(i), "", std::to_string(L[i]) + " tokens, above --max-length " +
                                                         std::to_string(cs.max_length)});
    errors.list.push_back(flag_error("--max-length", std::to_string(over) + " of " + std::to_string(L.size()) +
                                                         " lengths are above " + std::to_string(cs.max_length) +
                                                         ": raise it, or pass --overlong clip (cut them) or drop"));
    return errors;
  }
  if ((r.global_batch_sequences > 0) == (r.global_batch_tokens > 0))
    return flag_error("--global-batch-sequences", "give exactly one of --global-batch-sequences and --global-batch-tokens");
  if (r.global_batch_tokens > 0 && r.global_batch_tokens < cs.max_length && r.overlong != "drop")
    return flag_error("--global-batch-tokens", "a batch of " + std::to_string(r.global_batch_tokens) +
                                                   " tokens cannot hold a sequence of --max-length " +
                                                   std::to_string(cs.max_length) + " tokens");
  if (r.num_gpus < 1) return flag_error("--gpus", "expected a GPU count ≥ 1");

  if (is_hf_config_path(r.model)) {
    auto m = load_hf_config(r.model);
    if (!m) return m.errors();
    cs.model = *m;
  } else {
    auto m = load_model(experiments_dir / "models" / (r.model + ".json"));
    if (!m) {
      std::string known;
      std::vector<std::string> names;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(experiments_dir / "models", ec))
        if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
      std::sort(names.begin(), names.end());
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      return flag_error("--model", "\"" + r.model + "\" is neither a config.json (or a folder holding one) nor a model "
                                   "preset (known: " + known + ")");
    }
    cs.model = *m;
  }
  auto cluster = load_hardware(hardware_preset_path(r.hardware, experiments_dir), r.stack);
  if (!cluster) return cluster.errors();

  cs.base = r.tp > 0 || r.pp > 0 ? BaseLayout{std::max<int64_t>(1, r.tp), std::max<int64_t>(1, r.pp), ""}
                                 : compare_base_layout(cs.model, *cluster, r.num_gpus);
  if (cs.base.why.empty())
    cs.base.why = "TP " + std::to_string(cs.base.tp) + ", PP " + std::to_string(cs.base.pp) + ": given (--tp, --pp)";
  const int64_t tp = cs.base.tp, pp = cs.base.pp;
  if (r.num_gpus % (tp * pp) != 0)
    return flag_error("--gpus", std::to_string(r.num_gpus) + " GPUs do not divide into TP " + std::to_string(tp) +
                                    " × PP " + std::to_string(pp) + " model-parallel groups");
  const int64_t dpcp = r.num_gpus / (tp * pp);
  // Megatron's advice for max_seqlen_per_dp_cp_rank: the longest sequence over the CP size; the
  // largest CP cpbench tries is a node's GPUs (or every DP×CP rank when fewer).
  const int64_t widest_cp = std::max<int64_t>(1, std::min<int64_t>(cluster->gpus_per_node, dpcp));
  cs.cap = r.max_seqlen_per_rank > 0 ? r.max_seqlen_per_rank : round_up((cs.max_length + widest_cp - 1) / widest_cp, 256);

  json dataset = {{"name", "lengths"},
                  {"description", "the user's lengths, " + std::to_string(L.size()) + " sequences"},
                  {"provenance", "read from " + fs::absolute(r.lengths).string()},
                  {"kind", "empirical"},
                  {"lengths_file", fs::absolute(r.lengths).string()},
                  {"order", "shuffle"}};
  if (!r.column.empty()) dataset["column"] = r.column;
  json workload = {{"dataset", dataset}, {"max_length", cs.max_length}, {"seed", r.seed},
                   {"batches", r.quick ? std::min(r.batches, 2) : r.batches}, {"mask", r.mask}};
  if (r.overlong != "error") workload["overlong"] = r.overlong;
  if (r.global_batch_sequences > 0) workload["global_batch_sequences"] = r.global_batch_sequences;
  else workload["global_batch_tokens"] = r.global_batch_tokens;
  json parallel = {{"num_gpus", r.num_gpus}, {"tp", tp}, {"pp", pp}, {"cp", 1}, {"sequence_parallel", tp > 1},
                   {"dtype", "bf16"}, {"attention_kernel", "flash"}, {"distributed_optimizer", true},
                   {"overlap_grad_reduce", true}, {"overlap_p2p", pp > 1}, {"recompute", "full"},
                   {"max_seqlen_per_dp_cp_rank", cs.cap}};

  // The strategies, each at the CP sizes that fit the cluster, under full and selective recompute.
  // The PTD-P search comes first: the slowest point, it runs beside the others. Its space is
  // narrowed from the search's default (TP, CP, PP up to a node, no layers-per-stage beyond 2, α 0
  // or 0.5): the full one takes about 19 s per batch of 512 sequences on 64 GPUs.
  json strategies = json::array();
  const json search = r.quick ? json{{"pp", {1, 2, 4, 8}}, {"layers_per_virtual_stage", {0}}, {"offload_ratio", {0}},
                                     {"recompute", {"selective", "full"}}}
                              : json{{"pp", {1, 2, 4, 8}}, {"layers_per_virtual_stage", {0, 2}}, {"offload_ratio", {0, 0.5}}};
  std::vector<int64_t> cps;
  for (int64_t c = 1; c <= widest_cp; c *= 2)
    if (dpcp % c == 0) cps.push_back(c);
  const std::vector<std::string> recomputes = r.quick ? std::vector<std::string>{"full"}
                                                      : std::vector<std::string>{"full", "selective"};
  const std::vector<std::string> comm_types = r.quick ? std::vector<std::string>{"p2p"}
                                                      : std::vector<std::string>{"p2p", "all_gather", "a2a", "a2a+p2p"};
  auto entry = [&](const std::string& name, const std::string& label, json set) {
    strategies.push_back({{"name", name}, {"label", label}, {"set", std::move(set)}});
  };
  entry("ptdp_search", "PTD-P searched",
        {{"parallel.tp", 1}, {"parallel.pp", 1}, {"parallel.cp", 1}, {"parallel.sequence_parallel", false},
         {"parallel.overlap_p2p", false}});
  auto cap_for = [&](int64_t c) { return std::max(cs.cap, round_up((cs.max_length + c - 1) / c, 256)); };
  for (const auto& rc : recomputes) {
    const std::string suffix = " (" + rc + " recompute)";
    for (int64_t c : cps)
      for (const auto& t : comm_types) {
        if (c == 1 && t != comm_types.front()) continue;
        entry("packing", "packing cp" + std::to_string(c) + (c > 1 ? " " + t : "") + suffix,
              {{"parallel.cp", c}, {"parallel.cp_comm_type", t}, {"parallel.max_seqlen_per_dp_cp_rank", cap_for(c)},
               {"parallel.recompute", rc}});
      }
    if (!r.quick)
      for (const auto& [packer, label] : {std::pair{"packing_ffd", "packing FFD"}, {"packing_flops", "packing FLOPs"}})
        for (int64_t c : cps)
          entry(packer, label + (" cp" + std::to_string(c)) + suffix,
                {{"parallel.cp", c}, {"parallel.max_seqlen_per_dp_cp_rank", cap_for(c)}, {"parallel.recompute", rc}});
    for (const auto& [scheduler, label] : {std::pair{"dynamic_cp", "Dynamic-CP main"}, {"dynamic_cp_dev", "Dynamic-CP dev"},
                                           {"dynamic_cp_solver", "Dynamic-CP solver"}})
      entry(scheduler, label + suffix, {{"parallel.recompute", rc}});
    // Per batch, the fastest of packing (at the widest CP) and the three schedulers, or the rule's pick.
    entry("adaptive_oracle", "adaptive oracle" + suffix,
          {{"parallel.cp", cps.back()}, {"parallel.max_seqlen_per_dp_cp_rank", cap_for(cps.back())}, {"parallel.recompute", rc}});
    entry("adaptive_rule", "adaptive rule" + suffix,
          {{"parallel.cp", cps.back()}, {"parallel.max_seqlen_per_dp_cp_rank", cap_for(cps.back())}, {"parallel.recompute", rc}});
    for (int64_t c : cps)
      if (c > 1 && (!r.quick || c == cps.back()))
        entry("dcp", "DCP cp" + std::to_string(c) + suffix,
              {{"parallel.cp", c}, {"parallel.max_seqlen_per_dp_cp_rank", cap_for(c)}, {"parallel.recompute", rc}});
    for (int64_t c : cps)
      if (!r.quick || c == cps.front() || c == cps.back())
        entry("zero3", "FSDP cp" + std::to_string(c) + suffix,
              {{"parallel.tp", 1}, {"parallel.pp", 1}, {"parallel.sequence_parallel", false}, {"parallel.cp", c},
               {"parallel.overlap_p2p", false}, {"parallel.distributed_optimizer", false}, {"parallel.recompute", rc}});
  }
  json spec = {
      {"description", "cpbench compare: every strategy on " + std::to_string(L.size()) + " lengths of " +
                          r.lengths.string() + ", model " + cs.model.name + ", " + std::to_string(r.num_gpus) + " × " +
                          r.hardware},
      {"source", "the user's inputs; base layout " + cs.base.why},
      {"hardware", r.hardware},
      {"model", model_json(cs.model)},
      {"flops_definition", "megatron"},
      {"workload", workload},
      {"parallel", parallel},
      {"strategies", strategies},
      {"metrics", {"step_time_s", "tokens_per_s_per_gpu", "mfu", "peak_memory_gib", "exposed_comm_s", "bubble_fraction",
                   "padding_fraction", "micro_batches"}}};
  if (!r.stack.empty()) spec["stack"] = r.stack;
  spec["search"] = search;
  cs.spec = std::move(spec);
  return cs;
}

CompareRanking rank_compare(const Spec& spec, const PointResults& results) {
  CompareRanking out;
  std::vector<CompareRow> ok, other;
  for (size_t i = 0; i < spec.points.size() && i < results.size(); ++i) {
    CompareRow row;
    row.point = i;
    row.label = spec.points[i].label;
    row.strategy = spec.points[i].strategy;
    if (!results[i]) {
      row.status = "not run";
      other.push_back(row);
      continue;
    }
    const PointResult& p = *results[i];
    row.status = p.status;
    row.reason = p.reason;
    auto metric = [&](const char* k) {
      auto it = p.metrics.find(k);
      return it == p.metrics.end() ? 0.0 : it->second;
    };
    row.step_time_s = metric("step_time_s");
    row.tokens_per_s_per_gpu = metric("tokens_per_s_per_gpu");
    row.mfu = metric("mfu");
    row.peak_memory_gib = metric("peak_memory_gib");
    row.exposed_comm_s = metric("exposed_comm_s");
    row.bubble_fraction = metric("bubble_fraction");
    if (auto t = p.timings.find("plan_time_ms"); t != p.timings.end()) row.plan_time_ms = t->second;
    (p.status == "ok" && row.step_time_s > 0 ? ok : other).push_back(row);
  }
  std::stable_sort(ok.begin(), ok.end(), [](const CompareRow& a, const CompareRow& b) { return a.step_time_s < b.step_time_s; });
  double baseline = 0;
  for (const auto& row : ok)
    if (row.strategy == "packing") {  // the fastest static-CP packing: what a team runs without cpbench
      baseline = row.step_time_s;
      out.baseline = row.label;
      break;
    }
  for (auto& row : ok) row.speedup = baseline > 0 ? baseline / row.step_time_s : 0;
  out.rows = std::move(ok);
  out.rows.insert(out.rows.end(), other.begin(), other.end());
  return out;
}

std::string compare_table(const CompareRanking& ranking) {
  std::ostringstream s;
  size_t width = 8;
  for (const auto& r : ranking.rows) width = std::max(width, r.label.size());
  s << std::left << std::setw(4) << "#" << std::setw(static_cast<int>(width) + 2) << "strategy" << std::right
    << std::setw(10) << "step s" << std::setw(13) << "tokens/s/GPU" << std::setw(7) << "MFU" << std::setw(10)
    << "peak GiB" << std::setw(10) << "comm s" << std::setw(8) << "bubble" << std::setw(9) << "speedup" << "\n";
  size_t rank = 0;
  for (const auto& r : ranking.rows) {
    if (r.status != "ok") continue;
    s << std::left << std::setw(4) << ++rank << std::setw(static_cast<int>(width) + 2) << r.label << std::right
      << std::setw(10) << fixed(r.step_time_s, 3) << std::setw(13) << fixed(r.tokens_per_s_per_gpu, 0) << std::setw(7)
      << fixed(100 * r.mfu, 1) << std::setw(10) << fixed(r.peak_memory_gib, 1) << std::setw(10)
      << fixed(r.exposed_comm_s, 3) << std::setw(8) << fixed(r.bubble_fraction, 3) << std::setw(9)
      << (r.speedup > 0 ? fixed(r.speedup, 2) + "×" : "-") << "\n";
  }
  size_t other = ranking.rows.size() - rank;
  if (other) {
    s << "\n" << other << " could not run:\n";
    for (const auto& r : ranking.rows)
      if (r.status != "ok") s << "  " << r.label << " (" << r.status << "): " << r.reason << "\n";
  }
  if (!ranking.baseline.empty()) s << "\nspeedup: over " << ranking.baseline << ", the fastest static-CP packing\n";
  return s.str();
}

std::string compare_report(const CompareSpec& cs, const CompareRanking& ranking, const std::string& command,
                           const FrameworkArgs& megatron, const FrameworkArgs& torchtitan, const std::string& winner_layout) {
  std::ostringstream s;
  const auto& L = cs.lengths.lengths;
  std::vector<int64_t> sorted = L;
  std::sort(sorted.begin(), sorted.end());
  auto pct = [&](double q) { return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * double(sorted.size())))]; };
  const double total = std::accumulate(L.begin(), L.end(), 0.0);
  double long_tokens = 0;
  for (int64_t v : L) long_tokens += v > 8192 ? double(v) : 0.0;
  s << "# cpbench compare\n\n`" << command << "`\n\n";
  s << "## Inputs\n\n- lengths: " << L.size() << " sequences from " << cs.lengths.files.front()
    << (cs.lengths.files.size() > 1 ? " and " + std::to_string(cs.lengths.files.size() - 1) + " more files" : "")
    << (cs.lengths.column.empty() ? "" : " (column `" + cs.lengths.column + "`)") << "; mean " << fixed(total / double(L.size()), 0)
    << ", median " << pct(0.5) << ", p99 " << pct(0.99) << ", longest " << sorted.back() << " tokens; "
    << fixed(100 * long_tokens / total, 1) << " % of the tokens in sequences over 8,192\n";
  s << "- model: " << cs.model.name << " (" << cs.model.layers << " layers, hidden " << cs.model.hidden << ", "
    << cs.model.heads << " heads, " << cs.model.kv_heads << " KV heads; " << cs.model.source << ")\n";
  s << "- base layout: " << cs.base.why << "; max_seqlen_per_dp_cp_rank " << cs.cap << " (packing at CP c: at least the "
    << "longest sequence over c)\n- the batches: the file's lengths shuffled once per pass (as a data loader's epoch), "
    << "maximum length " << cs.max_length << "\n\n";
  s << "## Ranking\n\n| # | strategy | step (s) | tokens/s/GPU | MFU % | peak GiB | exposed comm (s) | bubble | speedup |\n"
    << "|---|---|---|---|---|---|---|---|---|\n";
  size_t rank = 0;
  for (const auto& r : ranking.rows)
    if (r.status == "ok")
      s << "| " << ++rank << " | " << r.label << " | " << fixed(r.step_time_s, 3) << " | " << fixed(r.tokens_per_s_per_gpu, 0)
        << " | " << fixed(100 * r.mfu, 1) << " | " << fixed(r.peak_memory_gib, 1) << " | " << fixed(r.exposed_comm_s, 3)
        << " | " << fixed(r.bubble_fraction, 3) << " | " << (r.speedup > 0 ? fixed(r.speedup, 2) + "×" : "–") << " |\n";
  if (!ranking.baseline.empty()) s << "\nSpeedup over " << ranking.baseline << ", the fastest static-CP packing. ";
  s << "Figure: speedup.svg.\n\n";
  if (rank < ranking.rows.size()) {
    s << "## Could not run\n\n";
    for (const auto& r : ranking.rows)
      if (r.status != "ok") s << "- **" << r.label << "** (" << r.status << "): " << r.reason << "\n";
    s << "\n";
  }
  if (rank > 0) {
    s << "## What to run\n\nThe fastest: **" << ranking.rows.front().label << "** (" << winner_layout << ").\n\n"
      << "Megatron-LM (megatron_args.txt):\n\n```\n";
    for (size_t i = 0; i < megatron.lines.size(); ++i)
      s << megatron.lines[i] << (i + 1 < megatron.lines.size() ? " \\\n" : "\n");
    s << "```\n\n";
    for (const auto& n : megatron.notes) s << "- " << n << "\n";
    s << "\ntorchtitan (torchtitan.toml):\n\n```toml\n";
    for (const auto& line : torchtitan.lines) s << line << "\n";
    s << "```\n\n";
    for (const auto& n : torchtitan.notes) s << "- " << n << "\n";
  }
  s << "\nThe spec `compare.json` reruns this comparison (`cpbench run compare.json`); results in compare/results.json. "
       "Every time is the simulator's, on the hardware preset's calibrated stack: read docs/your-data.md for what that "
       "model has and has not been checked against.\n";
  return s.str();
}

std::string compare_svg(const CompareRanking& ranking) {
  std::vector<const CompareRow*> rows;
  for (const auto& r : ranking.rows)
    if (r.status == "ok" && r.speedup > 0) rows.push_back(&r);
  const int bar_h = 18, label_w = 330, plot_w = 420, top = 40;
  const int height = top + bar_h * static_cast<int>(rows.size()) + 40;
  double most = 1;
  for (const auto* r : rows) most = std::max(most, r->speedup);
  auto x_of = [&](double v) { return label_w + v / (most * 1.1) * plot_w; };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << label_w + plot_w + 60 << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<text x=\"10\" y=\"20\" font-size=\"14\">Speedup over " << ranking.baseline << " (simulated step time)</text>\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const int y = top + bar_h * static_cast<int>(i);
    s << "<text x=\"" << label_w - 6 << "\" y=\"" << y + 13 << "\" text-anchor=\"end\">" << rows[i]->label << "</text>\n";
    s << "<rect x=\"" << label_w << "\" y=\"" << y + 2 << "\" width=\"" << fixed(x_of(rows[i]->speedup) - label_w, 1)
      << "\" height=\"" << bar_h - 4 << "\" fill=\"" << (rows[i]->label == ranking.baseline ? "#888888" : "#3b6ea8")
      << "\"/>\n";
    s << "<text x=\"" << fixed(x_of(rows[i]->speedup) + 4, 1) << "\" y=\"" << y + 13 << "\">" << fixed(rows[i]->speedup, 2)
      << "×</text>\n";
  }
  const double one = x_of(1.0);
  s << "<line x1=\"" << fixed(one, 1) << "\" y1=\"" << top << "\" x2=\"" << fixed(one, 1) << "\" y2=\"" << height - 30
    << "\" stroke=\"black\" stroke-dasharray=\"3,3\"/>\n</svg>\n";
  return s.str();
}

}  // namespace cpbench
