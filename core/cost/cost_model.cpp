#include "core/cost/cost_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>

namespace cpbench {

namespace {

std::string label_for(const ClusterSpec& cluster, const std::string& file) {
  if (!file.empty()) return file;
  if (!cluster.stack_file.empty()) return cluster.stack_file;  // the efficiency constants' file
  return cluster.stack.empty() ? "hardware preset \"" + cluster.name + "\""
                               : "stack preset \"" + cluster.stack + "\" (on hardware \"" + cluster.name + "\")";
}

// Output tiles cuBLAS/CUTLASS choose from on sm80/sm90 (CUTLASS default GEMM configurations:
// 256×128 and 128×256 for large problems, down to 64×64 for small ones).
struct Tile {
  int64_t m, n;
};
constexpr Tile kGemmTiles[] = {{256, 128}, {128, 256}, {128, 128}, {128, 64}, {64, 128}, {64, 64}};

// Operand reuse of a tile: flops per byte loaded into shared memory per k step,
// 2·tm·tn / (2 bytes · (tm + tn)). gemm_peak_fraction is measured on large problems, i.e. on the
// largest tile; a smaller tile reuses operands less and is assumed bound by the same operand
// bandwidth, so its rate scales with its reuse relative to the largest tile.
double tile_reuse(const Tile& t) { return double(t.m) * t.n / double(t.m + t.n); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

CostModel::CostModel(const ClusterSpec& cluster, const std::string& file) : cluster_(cluster) {
  Diagnostics diag(label_for(cluster, file));
  JsonObject o(*cluster.efficiency, "/efficiency", diag);
  params_ = parse_efficiency(o);
  if (!diag.ok()) status_ = diag.errors();
}

CostModel::CostModel(const ClusterSpec& cluster, EfficiencyParams params)
    : cluster_(cluster), params_(std::move(params)) {}

Expected<CostModel> CostModel::create(const ClusterSpec& cluster, const std::string& file) {
  CostModel model(cluster, file);
  if (!model.status().ok()) return model.status().errors();
  return model;
}

double CostModel::gemm_s(int64_t m, int64_t n, int64_t k, int64_t batch) const {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
  const double sm_count = cluster_.gpu.sm_count;
  // One SM's tensor-core rate at the large-tile efficiency.
  const double sm_rate = cluster_.gpu.peak_flops() * params_.gemm_peak_fraction / sm_count;
  const double reuse_ref = tile_reuse(kGemmTiles[0]);
  double compute_s = std::numeric_limits<double>::infinity();
  const double hbm_Bps = cluster_.gpu.hbm_bandwidth_GBps * 1e9 * params_.hbm_efficiency;
  for (const Tile& t : kGemmTiles) {
    const double rate = sm_rate * std::min(1.0, tile_reuse(t) / reuse_ref);
    const int64_t tiles = ceil_div(m, t.m) * ceil_div(n, t.n) * batch;
    // Split-K (as cuBLAS does for few output tiles and long k): `split` CTAs share a tile's k
    // range, then a reduction pass reads and writes the fp32 partial tiles through HBM.
    for (int64_t split : {1, 2, 4, 8, 16}) {
      const double waves = std::ceil(double(tiles * split) / sm_count);
      const double k_per_cta = double(ceil_div(k, split)) + params_.gemm_tile_overhead_k;
      const double reduce_s = split == 1 ? 0 : 2.0 * split * batch * double(m) * n * 4 / hbm_Bps;
      compute_s = std::min(compute_s, waves * 2.0 * t.m * t.n * k_per_cta / rate + reduce_s);
    }
  }
  const double bytes = 2.0 * batch * (double(m) * k + double(k) * n + double(m) * n);
  return params_.kernel_overhead_us * 1e-6 + std::max(compute_s, bytes / hbm_Bps);
}

namespace {


struct AttentionShape {
  double pairs, heads, head_dim, mean_len;
};

// Seconds per (pair, head) on a full GPU: the matmuls on the tensor cores, then one exponential
// on the SFUs; FA2 does not overlap them, which is why small head dims reach a lower fraction of
// peak (Shah et al., FlashAttention-3, §1). FA3 / cuDNN on Hopper overlap the two (Shah et al.,
// §3.1-3.2): then the slower of the two units bounds the rate.
double pair_s(const ClusterSpec& c, const EfficiencyParams& p, double matmul_flops_per_pair, double peak_fraction) {
  const double matmul_s = matmul_flops_per_pair / (c.gpu.peak_flops() * peak_fraction);
  const double exp_s = 1 / (p.sfu_exp_rate_Tps * 1e12);
  return std::max(matmul_s + (1 - p.attention_exp_overlap) * exp_s, exp_s);
}

// A row's fixed cost (the masked half of its diagonal tile, loading Q, rescaling and writing O;
// in the backward also its own passes and the K/V tiles' loads and dK/dV writes) amortized over
// the keys it sees: the factor on its pairs.
double row_overhead(const EfficiencyParams& p, double keys_per_row, bool backward) {
  const double keys = backward ? p.attention_bwd_row_overhead_keys : p.attention_row_overhead_keys;
  return 1 + keys / std::max(1.0, keys_per_row);
}

// The launch overhead and the larger of compute and the HBM floor of `io_tensors`
// [row_heads, head_dim] bf16 tensors read and written.
double attention_call_s(const ClusterSpec& c, const EfficiencyParams& p, double compute_s, double row_heads,
                        double head_dim, double io_tensors) {
  const double memory_s = io_tensors * row_heads * head_dim * 2 / (c.gpu.hbm_bandwidth_GBps * 1e9 * p.hbm_efficiency);
  return p.kernel_overhead_us * 1e-6 + std::max(compute_s, memory_s);
}

// Seconds of one pass: `matmul_flops_per_pair` tensor-core flops and one exponential per pair,
// the per-row overhead and the SM underfill of small grids, and an HBM floor for the
// `io_tensors` [rows, heads, head_dim] tensors read and written.
double attention_s(const ClusterSpec& c, const EfficiencyParams& p, const AttentionShape& a,
                   double matmul_flops_per_pair, double peak_fraction, double io_tensors, bool backward) {
  if (a.pairs <= 0 || a.heads <= 0 || a.head_dim <= 0) return 0;
  const double per_pair_s = pair_s(c, p, matmul_flops_per_pair, peak_fraction);
  // A causal row sees L/2 keys on average.
  const double keys_per_row = std::max(1.0, a.mean_len / 2);
  // One CTA per (128-row query tile, head): a grid smaller than the GPU leaves SMs idle and
  // takes as long as one CTA's work, i.e. as a full GPU of such CTAs.
  const double rows = a.pairs / keys_per_row;
  const double full_gpu_pair_heads = c.gpu.sm_count * double(kFlashCtaRows) * keys_per_row;
  const double compute_s =
      per_pair_s * row_overhead(p, keys_per_row, backward) * std::max(a.pairs * a.heads, full_gpu_pair_heads);
  return attention_call_s(c, p, compute_s, rows * a.heads, a.head_dim, io_tensors);
}

// Greedy list scheduling of `work` (seconds each on one SM) in order onto `sms` identical SMs,
// each CTA to the SM that frees first — what the hardware's block scheduler does with a grid
// whose CTAs outnumber the SMs: the makespan. Exact for grids of up to kExactWaves waves; in a
// larger one the CTAs of its first whole waves are taken as spread evenly (each SM free at their
// work / sms, or at the longest of them: exact for equal CTAs) and only the last kExactWaves to
// kExactWaves + 1 waves are scheduled one by one: they decide the tail, and the grid of a packed
// batch (hundreds of thousands of CTAs) stays cheap.
constexpr int64_t kExactWaves = 4;
double list_schedule_s(const std::vector<double>& work, int sms) {
  if (work.empty()) return 0;
  const size_t n = work.size(), m = static_cast<size_t>(sms);
  if (n <= m) return *std::max_element(work.begin(), work.end());
  // Whole waves before the tail, so that a uniform grid is exact.
  const size_t tail = n <= kExactWaves * m ? n : n - (n - kExactWaves * m) / m * m;
  double before = 0, longest = 0;
  for (size_t i = 0; i < n - tail; ++i) {
    before += work[i];
    longest = std::max(longest, work[i]);
  }
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at(std::greater<>(),
                                                                           std::vector<double>(sms, before / sms));
  double end = longest;
  for (size_t i = n - tail; i < n; ++i) {
    const double t = free_at.top() + work[i];
    free_at.pop();
    free_at.push(t);
    end = std::max(end, t);
  }
  return end;
}

}  // namespace

namespace {

// One attention pass's constants. Forward: QKᵀ and P·V, 2 matmuls of 2·head_dim flops per pair;
// reads Q, K, V, writes O. Backward: 2.5× the forward matmul flops (P is recomputed, so one
// exponential per pair again); reads Q, K, V, O, dO, writes dQ, dK, dV.
struct AttentionPass {
  double matmul_flops_per_pair, peak_fraction, io_tensors;
};
AttentionPass attention_pass(const EfficiencyParams& p, int64_t head_dim, bool backward) {
  if (backward) return {kAttentionBwdFlopsPerFwd * 4.0 * head_dim, p.attention_bwd_peak_fraction, 8};
  return {4.0 * head_dim, p.attention_fwd_peak_fraction, 4};
}

}  // namespace

double CostModel::flash_attention_fwd_s(double pairs, int64_t heads, int64_t head_dim,
                                        double mean_len) const {
  const AttentionPass a = attention_pass(params_, head_dim, false);
  return attention_s(cluster_, params_, {pairs, double(heads), double(head_dim), mean_len}, a.matmul_flops_per_pair,
                     a.peak_fraction, a.io_tensors, false);
}

double CostModel::flash_attention_bwd_s(double pairs, int64_t heads, int64_t head_dim,
                                        double mean_len) const {
  const AttentionPass a = attention_pass(params_, head_dim, true);
  return attention_s(cluster_, params_, {pairs, double(heads), double(head_dim), mean_len}, a.matmul_flops_per_pair,
                     a.peak_fraction, a.io_tensors, true);
}

double CostModel::flash_attention_grid_s(const std::vector<double>& cta_pairs, double row_heads, int64_t head_dim,
                                         bool backward) const {
  double pairs = 0;
  for (double w : cta_pairs) pairs += w;
  if (pairs <= 0 || row_heads <= 0 || head_dim <= 0) return 0;
  const AttentionPass a = attention_pass(params_, head_dim, backward);
  // One SM's seconds per pair: the full GPU's rate shared by its SMs, with the call's per-row
  // overhead spread over its pairs (so a grid of many equal CTAs costs what flash_attention_*_s
  // prices for the same pairs).
  const int sms = std::max(1, cluster_.gpu.sm_count);
  const double sm_pair_s =
      pair_s(cluster_, params_, a.matmul_flops_per_pair, a.peak_fraction) * sms * row_overhead(params_, pairs / row_heads, backward);
  std::vector<double> work;
  work.reserve(cta_pairs.size());
  for (double w : cta_pairs)
    if (w > 0) work.push_back(w * sm_pair_s);
  return attention_call_s(cluster_, params_, list_schedule_s(work, sms), row_heads, double(head_dim), a.io_tensors);
}

double CostModel::memory_bound_s(double bytes) const {
  if (bytes <= 0) return 0;
  return params_.kernel_overhead_us * 1e-6 +
         bytes / (cluster_.gpu.hbm_bandwidth_GBps * 1e9 * params_.hbm_efficiency);
}

Expected<CostModel> load_cost_model(const std::filesystem::path& preset_file) {
  auto cluster = load_hardware(preset_file);
  if (!cluster) return cluster.errors();
  // The efficiency constants are the stack's: an error in them names the stack file.
  return CostModel::create(*cluster, cluster->stack_file.empty() ? preset_file.string() : cluster->stack_file);
}

LinkBytes collective_sent_bytes(Collective kind, double bytes, const GroupPlacement& group) {
  const double n = static_cast<double>(group.size);
  if (group.size <= 1 || bytes <= 0) return {};
  const double volume = (kind == Collective::all_reduce ? 2.0 : 1.0) * (n - 1) / n * bytes;
  const int64_t per_node = std::max<int64_t>(1, group.ranks_per_node);
  const double nodes = static_cast<double>((group.size + per_node - 1) / per_node);
  const double network_share = nodes > 1 ? nodes / n : 0;
  return {volume * (1 - network_share), volume * network_share};
}

}  // namespace cpbench
