#include "core/strategies/dcp.h"

#include "core/layouts/cp_layouts.h"
#include "core/strategies/packing.h"
#include "core/strategies/varlen.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <tuple>

#include "core/strategies/hypergraph.h"

namespace cpbench {
namespace {

// B tokens of one sequence and one head block: query heads [head_begin, head_end) and their
// K/V groups (DCP's data block; Q, KV, O and LSE of it live on one device).
struct TokenBlock {
  int32_t seq;
  int64_t begin, end;
  int32_t head_begin, head_end;
  int64_t tokens() const { return end - begin; }
};

struct ComputeBlock {
  int32_t q, kv;  // token block indices
  double seconds;
};

// Steps 1 and 2: the blocks and their hypergraph (vertices: token blocks [0, D), then
// computation blocks).
struct DcpGraph {
  std::vector<TokenBlock> blocks;
  std::vector<ComputeBlock> work;
  Hypergraph h;
};

// Two-level placement: nodes, then the GPUs of each node. part[v] = rank.
Expected<std::vector<int32_t>> place(const Hypergraph& h, const DcpRequest& r) {
  const int32_t gpn = std::max(1, std::min(r.gpus_per_node, r.ranks));
  const int32_t nodes = r.ranks % gpn == 0 ? r.ranks / gpn : 1;
  if (nodes <= 1) return partition_hypergraph(h, BalanceLimits{r.ranks, r.eps_mem, r.eps_comp});
  // DCP loosens the compute tolerance across nodes (×4 … ×16) and balances it inside each node.
  // Memory: half the tolerance across nodes; inside a node every GPU is held to the cap of a
  // one-level partition over all GPUs.
  double total_memory = 0, heaviest = 0;
  for (double m : h.memory) {
    total_memory += m;
    heaviest = std::max(heaviest, m);
  }
  const double gpu_memory_cap = std::max((1 + r.eps_mem) * total_memory / r.ranks, total_memory / r.ranks + heaviest);
  // A node may hold what its GPUs can balance under that cap: some GPU at or below the node's mean
  // must still have room for the heaviest block.
  const double node_memory_cap = std::max(gpn * (gpu_memory_cap - heaviest), total_memory / nodes + heaviest);
  auto node_of = partition_hypergraph(h, BalanceLimits{nodes, r.eps_mem / 2, r.eps_comp * 4, node_memory_cap});
  if (!node_of) return node_of.errors();
  std::vector<int32_t> part(h.vertices(), 0);
  for (int32_t n = 0; n < nodes; ++n) {
    std::vector<int32_t> local(h.vertices(), -1), members;
    for (int32_t v = 0; v < h.vertices(); ++v)
      if ((*node_of)[v] == n) {
        local[v] = static_cast<int32_t>(members.size());
        members.push_back(v);
      }
    Hypergraph sub;
    for (int32_t v : members) {
      sub.memory.push_back(h.memory[v]);
      sub.compute.push_back(h.compute[v]);
    }
    std::vector<int32_t> pins;
    for (int32_t e = 0; e < h.nets(); ++e) {
      pins.clear();
      for (int64_t j = h.net_begin[e]; j < h.net_begin[e + 1]; ++j)
        if (local[h.pins[j]] >= 0) pins.push_back(local[h.pins[j]]);
      if (pins.size() > 1) sub.add_net(pins, h.net_weight[e]);
    }
    auto sub_part = partition_hypergraph(sub, BalanceLimits{gpn, r.eps_mem, r.eps_comp, gpu_memory_cap});
    if (!sub_part) return sub_part.errors();
    for (size_t i = 0; i < members.size(); ++i) part[members[i]] = n * gpn + (*sub_part)[i];
  }
  return part;
}

}  // namespace

int64_t dcp_block_size(const std::vector<int64_t>& seq_lengths, int32_t ranks, double eps_mem) {
  int64_t longest = 1, total = 0;
  for (int64_t L : seq_lengths) {
    longest = std::max(longest, L);
    total += L;
  }
  int64_t b = 256;
  while (b < longest) b *= 2;
  for (; b > 256; b /= 2) {
    std::vector<int64_t> sizes;
    for (int64_t L : seq_lengths)
      for (int64_t t = 0; t < L; t += b) sizes.push_back(std::min(b, L - t));
    std::sort(sizes.rbegin(), sizes.rend());
    std::vector<int64_t> load(std::max(1, ranks), 0);
    for (int64_t x : sizes) *std::min_element(load.begin(), load.end()) += x;
    const double mean = static_cast<double>(total) / static_cast<double>(load.size());
    if (static_cast<double>(*std::max_element(load.begin(), load.end())) <= (1 + eps_mem) * mean) break;
  }
  return b;
}

namespace {

Expected<DcpGraph> build_graph(const DcpRequest& r, const CostModel& cost) {
  if (r.ranks < 1 || r.block_tokens < 1 || r.divisions < 1 || r.heads_q < 1 || r.heads_kv < 1 ||
      r.heads_q % r.heads_kv != 0)
    return Error{"", "", "dcp: needs ranks ≥ 1, block_tokens ≥ 1, divisions ≥ 1 and heads_q a multiple of heads_kv"};
  const int32_t head_blocks = r.head_blocks == 0 ? r.heads_kv : r.head_blocks;
  if (head_blocks < 1 || r.heads_kv % head_blocks != 0)
    return Error{"", "", "dcp: head_blocks = " + std::to_string(r.head_blocks) + " must divide heads_kv = " +
                             std::to_string(r.heads_kv) + " (0: one per KV group)"};
  const int32_t heads_per_block = r.heads_q / head_blocks;
  // 1. Token blocks and the computation blocks the mask leaves non-empty.
  DcpGraph out;
  std::vector<TokenBlock>& blocks = out.blocks;
  std::vector<int32_t> first_block;  // per sequence
  for (size_t s = 0; s < r.seq_lengths.size(); ++s) {
    first_block.push_back(static_cast<int32_t>(blocks.size()));
    for (int32_t hb = 0; hb < head_blocks; ++hb)
      for (int64_t b = 0; b < r.seq_lengths[s]; b += r.block_tokens)
        blocks.push_back({static_cast<int32_t>(s), b, std::min(b + r.block_tokens, r.seq_lengths[s]), hb * heads_per_block,
                          (hb + 1) * heads_per_block});
  }
  first_block.push_back(static_cast<int32_t>(blocks.size()));
  std::vector<ComputeBlock>& work = out.work;
  for (size_t s = 0; s < r.seq_lengths.size(); ++s)
    for (int32_t i = first_block[s]; i < first_block[s + 1]; ++i)
      for (int32_t j = first_block[s]; j < first_block[s + 1]; ++j) {
        const TokenBlock &q = blocks[i], &k = blocks[j];
        if (q.head_begin != k.head_begin) continue;  // a head block attends only its own K/V groups
        const double pairs = static_cast<double>(
            mask_pairs_in_tile(r.mask, r.seq_lengths[s], q.begin, q.end, k.begin, k.end));
        if (pairs <= 0) continue;
        const double mean_len = 2 * pairs / static_cast<double>(q.tokens());
        work.push_back({i, j,
                        cost.flash_attention_fwd_s(pairs, heads_per_block, r.head_dim, mean_len) +
                            cost.flash_attention_bwd_s(pairs, heads_per_block, r.head_dim, mean_len)});
      }
  // 2. The hypergraph: token blocks [0, D), computation blocks [D, D + C).
  const int32_t D = static_cast<int32_t>(blocks.size());
  // Heads of one data block: query heads and K/V groups.
  const double hq = heads_per_block, hkv = static_cast<double>(r.heads_kv) / head_blocks, d = r.head_dim,
               vb = r.value_bytes;
  Hypergraph& h = out.h;
  for (const TokenBlock& b : blocks) {
    h.memory.push_back(static_cast<double>(b.tokens()) * ((2 * hq + 2 * hkv) * d * vb + hq * 4));
    h.compute.push_back(0);
  }
  for (const ComputeBlock& c : work) {
    h.memory.push_back(0);
    h.compute.push_back(c.seconds);
  }
  std::vector<std::vector<int32_t>> readers_q(D), readers_kv(D);
  for (size_t c = 0; c < work.size(); ++c) {
    readers_q[work[c].q].push_back(D + static_cast<int32_t>(c));
    readers_kv[work[c].kv].push_back(D + static_cast<int32_t>(c));
  }
  for (int32_t i = 0; i < D; ++i) {
    const double t = static_cast<double>(blocks[i].tokens());
    // Per remote reader: Q in and the partial (O, LSE) back forward; Q, dO, O, LSE in and dQ back
    // in backward. KV in forward; KV in and dK, dV back in backward.
    std::vector<int32_t> pins{i};
    pins.insert(pins.end(), readers_q[i].begin(), readers_q[i].end());
    h.add_net(pins, t * hq * (6 * d * vb + 8));
    pins.assign(1, i);
    pins.insert(pins.end(), readers_kv[i].begin(), readers_kv[i].end());
    h.add_net(pins, t * hkv * 6 * d * vb);
  }
  return out;
}

}  // namespace

Expected<Hypergraph> dcp_hypergraph(const DcpRequest& r, const CostModel& cost) {
  auto g = build_graph(r, cost);
  if (!g) return g.errors();
  return std::move(g->h);
}

namespace {

// What the division scheduler reads of a placement: the blocks and part[v], the rank of vertex v
// (token blocks [0, D), then computation blocks).
struct Placement {
  const std::vector<TokenBlock>& blocks;
  const std::vector<ComputeBlock>& work;
  const std::vector<int32_t>& part;
  const DcpRequest& r;
  AttnSlice slice(int32_t b) const {
    return AttnSlice{blocks[b].seq, blocks[b].begin, blocks[b].end, blocks[b].head_begin, blocks[b].head_end};
  }
};

using Input = std::pair<int32_t, AttnTensor>;  // (token block, q or kv)

// The computation blocks scheduled into divisions: each stage's tiles per rank and the q and kv
// transfers that bring their inputs.
struct Divisions {
  std::vector<AttnStage> stages;
  std::vector<std::vector<std::vector<int32_t>>> work_of;  // [stage][rank] each tile's computation block
};

// (rank, input) -> the last stage in which the rank computes with that block away from its home:
// where its partial output (q) or gradient partials (q: dQ, kv: dK/dV) become final.
std::map<std::pair<int32_t, Input>, size_t> last_use_away_from_home(const Placement& pl, const Divisions& div) {
  std::map<std::pair<int32_t, Input>, size_t> last;
  for (size_t k = 0; k < div.work_of.size(); ++k)
    for (int32_t rank = 0; rank < static_cast<int32_t>(div.work_of[k].size()); ++rank)
      for (int32_t c : div.work_of[k][rank])
        for (const Input& in : {Input{pl.work[c].q, AttnTensor::q}, Input{pl.work[c].kv, AttnTensor::kv}})
          if (pl.part[in.first] != rank) last[{rank, in}] = k;
  return last;
}

// Step 4 for one pass, as DCP's public code builds it (pipeline.py generate_pipelines_n_stages,
// pipeline_generator.cpp greedy_selection_per_device). An input's bytes in the budgets are its
// tokens × query heads × q_row (the Q side) or kv_row (K/V): the forward moves Q and K/V; the
// backward's Q side is Q, O and dO (DCP counts O twice and not the LSE), so its budgets and
// choices differ from the forward's.
Divisions schedule_divisions(const Placement& pl, double q_row, double kv_row) {
  const DcpRequest& r = pl.r;
  const std::vector<ComputeBlock>& work = pl.work;
  const std::vector<int32_t>& part = pl.part;
  const int32_t D = static_cast<int32_t>(pl.blocks.size());
  auto slice = [&](int32_t b) { return pl.slice(b); };
  Divisions out;
  // A local stage 0, then `divisions` stages with communication (DCP's pipeline generator puts
  // the first compute stage in front of its DCP_N_STAGES stages).
  const int32_t divisions = std::max(1, r.divisions), stages = divisions + 1;
  out.stages.assign(stages, AttnStage{});
  for (AttnStage& st : out.stages) st.tiles.assign(r.ranks, {});
  out.work_of.assign(stages, std::vector<std::vector<int32_t>>(r.ranks));
  // Each rank's computation blocks whose inputs are all home run in stage 0; the others fill
  // stages 1 … divisions as DCP's pipeline generator fills them (below).
  std::vector<std::vector<int32_t>> pending(r.ranks);
  for (size_t c = 0; c < work.size(); ++c) {
    const int32_t at = part[D + c];
    if (part[work[c].q] == at && part[work[c].kv] == at) {
      out.stages[0].tiles[at].push_back({slice(work[c].q), slice(work[c].kv)});
      out.work_of[0][at].push_back(static_cast<int32_t>(c));
    } else {
      pending[at].push_back(static_cast<int32_t>(c));
    }
  }
  for (auto& list : pending)  // largest first, as DCP's selection takes them
    std::stable_sort(list.begin(), list.end(), [&](int32_t a, int32_t b) { return work[a].seconds > work[b].seconds; });
  auto input_bytes = [&](const Input& in) {
    const TokenBlock& k = pl.blocks[in.first];
    return static_cast<double>(k.tokens()) * (k.head_end - k.head_begin) * (in.second == AttnTensor::q ? q_row : kv_row);
  };
  auto inputs = [&](int32_t c) {
    return std::array<Input, 2>{Input{work[c].q, AttnTensor::q}, Input{work[c].kv, AttnTensor::kv}};
  };
  const int32_t gpn = std::max(1, std::min(r.gpus_per_node, r.ranks));
  auto node = [&](int32_t rank) { return rank / gpn; };
  // Who holds each input, and since which stage (−1: home): flat tables indexed by input (2 per
  // token block), which the selection below reads for every candidate block.
  auto index = [](const Input& in) { return 2 * static_cast<size_t>(in.first) + (in.second == AttnTensor::kv); };
  std::vector<std::vector<std::pair<int32_t, int32_t>>> holders(2 * static_cast<size_t>(D));
  std::vector<std::vector<bool>> held_by(r.ranks, std::vector<bool>(2 * static_cast<size_t>(D), false));
  auto holds = [&](int32_t rank, const Input& in) { return static_cast<bool>(held_by[rank][index(in)]); };
  auto hold = [&](int32_t rank, const Input& in, int32_t stage) {
    if (holds(rank, in)) return;
    held_by[rank][index(in)] = true;
    holders[index(in)].emplace_back(rank, stage);
  };
  for (int32_t b = 0; b < D; ++b)
    for (AttnTensor t : {AttnTensor::q, AttnTensor::kv}) hold(part[b], {b, t}, -1);
  // The per-stage inter-node send budget of every rank: 1.2 × the inter-node volume (each input
  // counted once per node that reads it) / ranks / divisions (DCP's generate_pipelines_n_stages).
  double inter_node = 0;
  {
    std::set<std::pair<Input, int32_t>> crossing;  // (input, node)
    for (int32_t rank = 0; rank < r.ranks; ++rank)
      for (int32_t c : pending[rank])
        for (const Input& in : inputs(c))
          if (node(part[in.first]) != node(rank) && crossing.insert({in, node(rank)}).second) inter_node += input_bytes(in);
  }
  const double send_budget = 1.2 * inter_node / r.ranks / divisions;
  // DCP's greedy_selection_per_device, one call: `stage`'s blocks and fetches under `budget`.
  // Loads and ready times are the call's own. An input a rank lacks comes from a GPU of its node
  // that held it before the stage (the least loaded inside the node) or else from one on another
  // node (the least loaded across nodes); only the senders' inter-node bytes are held to the
  // budget. The rank with the least work selected so far takes its largest block whose fetches
  // fit; the call ends when that rank can take none. Then every rank, largest block first,
  // fetches what fits of its remaining blocks' inputs (DCP's prefetch).
  struct Fetch {
    int32_t dst, src;
    Input in;
  };
  auto select = [&](int32_t stage, double budget, std::vector<Fetch>& fetches) {
    std::vector<double> ready(r.ranks, 0), cross_load(r.ranks, 0), intra_load(r.ranks, 0);
    // The fetches `c` (or one input) needs on `rank`, or false when an inter-node one breaks the budget.
    auto plan_fetches = [&](int32_t rank, std::span<const Input> ins, std::vector<Fetch>& need) {
      std::vector<std::pair<int32_t, double>> cross;  // (sender, bytes), at most one per input
      for (const Input& in : ins) {
        if (holds(rank, in)) continue;
        int32_t best_local = -1, best_remote = -1;
        for (const auto& [h, since] : holders[index(in)]) {
          if (since >= stage) continue;
          if (node(h) == node(rank)) {
            if (best_local < 0 || intra_load[h] < intra_load[best_local]) best_local = h;
          } else if (best_remote < 0 || cross_load[h] < cross_load[best_remote]) {
            best_remote = h;
          }
        }
        const int32_t src = best_local >= 0 ? best_local : best_remote;
        need.push_back({rank, src, in});
        if (best_local < 0) {
          auto same = std::find_if(cross.begin(), cross.end(), [&](const auto& c) { return c.first == src; });
          if (same == cross.end()) cross.emplace_back(src, input_bytes(in));
          else same->second += input_bytes(in);
        }
      }
      for (const auto& [src, bytes] : cross)
        if (cross_load[src] + bytes > budget) return false;
      return true;
    };
    auto commit = [&](const std::vector<Fetch>& need) {
      for (const Fetch& f : need) {
        (node(f.src) == node(f.dst) ? intra_load : cross_load)[f.src] += input_bytes(f.in);
        fetches.push_back(f);
      }
      for (const Fetch& f : need) hold(f.dst, f.in, stage);
    };
    std::vector<bool> done(r.ranks, false);
    for (;;) {
      int32_t rank = -1;
      for (int32_t k = 0; k < r.ranks; ++k)
        if (!done[k] && (rank < 0 || ready[k] < ready[rank])) rank = k;
      if (rank < 0) break;
      auto& list = pending[rank];
      if (list.empty()) {
        done[rank] = true;
        continue;
      }
      bool progress = false;
      for (size_t i = 0; i < list.size() && !progress; ++i) {
        const int32_t c = list[i];
        std::vector<Fetch> need;
        const auto ins = inputs(c);
        if (!plan_fetches(rank, ins, need)) continue;
        commit(need);
        out.stages[stage].tiles[rank].push_back({slice(work[c].q), slice(work[c].kv)});
        out.work_of[stage][rank].push_back(c);
        ready[rank] += work[c].seconds;
        list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
        progress = true;
      }
      if (!progress) break;
    }
    for (int32_t rank = 0; rank < r.ranks; ++rank)
      for (int32_t c : pending[rank])
        for (const Input& in : inputs(c)) {
          std::vector<Fetch> need;
          if (!holds(rank, in) && plan_fetches(rank, std::span<const Input>(&in, 1), need)) commit(need);
        }
  };
  for (int32_t stage = 1; stage < stages; ++stage) {
    std::vector<Fetch> fetches;
    select(stage, send_budget, fetches);
    if (stage == stages - 1) select(stage, std::numeric_limits<double>::infinity(), fetches);  // the rest
    // DCP's two-phase communication: an input several GPUs of one node fetch from the same sender
    // across nodes in this stage crosses once, to the one of them receiving least across nodes in
    // the stage, which relays it to the others (AttnTransfer::relay).
    std::vector<double> received(r.ranks, 0);
    std::map<std::tuple<int32_t, Input, int32_t>, std::vector<int32_t>> crossing;  // (src, input, dst node) -> dsts
    for (const Fetch& f : fetches)
      if (node(f.src) != node(f.dst)) {
        received[f.dst] += input_bytes(f.in);
        crossing[{f.src, f.in, node(f.dst)}].push_back(f.dst);
      }
    AttnStage& st = out.stages[stage];
    for (const Fetch& f : fetches) {
      if (node(f.src) == node(f.dst)) {
        st.transfers.push_back({f.src, f.dst, f.in.second, slice(f.in.first)});
        continue;
      }
      const auto& dsts = crossing.at({f.src, f.in, node(f.dst)});
      const int32_t receiver = *std::min_element(dsts.begin(), dsts.end(), [&](int32_t a, int32_t b) {
        return received[a] < received[b] || (received[a] == received[b] && a < b);
      });
      if (f.dst == receiver) st.transfers.push_back({f.src, f.dst, f.in.second, slice(f.in.first)});
      else st.transfers.push_back({receiver, f.dst, f.in.second, slice(f.in.first), true});
    }
  }
  return out;
}

// The backward on the forward's placement, scheduled again (references/dcp.md, step 6; DCP's
// compiler runs its stage scheduler a second time on the backward's workload): `div` is step 4 with
// the backward's inputs, run as the forward runs (phase i posts stage i's inputs, a Q block with its
// dO and final O and LSE, and runs stage i − 1's tiles). A rank's dQ and dK/dV partials of blocks
// away from home are summed on the rank across its stages and sent straight home once: after the
// last stage, as DCP's executor does (its scheduler issues the gradient sends after all stages,
// from every device to the block's home, and waits for them before the home sums), or with
// `early` in the phase after the rank's last tile on the block, under the next stage's kernels.
std::vector<AttnBackwardPhase> backward_of(const Placement& pl, const Divisions& div, bool early) {
  const size_t S = div.stages.size();
  std::vector<AttnBackwardPhase> phases(S + 2);
  for (size_t i = 0; i < S; ++i) {
    for (const AttnTransfer& t : div.stages[i].transfers) {
      phases[i].transfers.push_back(t);
      if (t.tensor == AttnTensor::q)
        for (AttnTensor x : {AttnTensor::dout, AttnTensor::out}) phases[i].transfers.push_back({t.src, t.dst, x, t.slice, t.relay});
    }
    phases[i + 1].tiles = div.stages[i].tiles;
  }
  for (const auto& [key, k] : last_use_away_from_home(pl, div)) {
    const auto& [rank, in] = key;
    phases[early ? k + 2 : S + 1].transfers.push_back(
        {rank, pl.part[in.first], in.second == AttnTensor::q ? AttnTensor::dq : AttnTensor::dkv, pl.slice(in.first)});
  }
  const auto idle = [](const AttnBackwardPhase& ph) {
    return ph.transfers.empty() &&
           std::all_of(ph.tiles.begin(), ph.tiles.end(), [](const std::vector<AttnTile>& t) { return t.empty(); });
  };
  phases.erase(std::remove_if(phases.begin(), phases.end(), idle), phases.end());
  return phases;
}

}  // namespace

Expected<DcpResult> plan_dcp(const DcpRequest& r, const CostModel& cost) {
  auto graph = build_graph(r, cost);
  if (!graph) return graph.errors();
  const std::vector<TokenBlock>& blocks = graph->blocks;
  const std::vector<ComputeBlock>& work = graph->work;
  const Hypergraph& h = graph->h;
  const int32_t D = static_cast<int32_t>(blocks.size());
  // 3. Placement.
  auto part = place(h, r);
  if (!part) return part.errors();
  DcpResult out;
  out.km1_bytes = km1(h, *part);
  {
    std::vector<double> mem(r.ranks, 0), comp(r.ranks, 0);
    double total_m = 0, total_c = 0;
    for (int32_t v = 0; v < h.vertices(); ++v) {
      mem[(*part)[v]] += h.memory[v];
      comp[(*part)[v]] += h.compute[v];
      total_m += h.memory[v];
      total_c += h.compute[v];
    }
    out.memory_over_mean = total_m > 0 ? *std::max_element(mem.begin(), mem.end()) * r.ranks / total_m : 0;
    out.compute_over_mean = total_c > 0 ? *std::max_element(comp.begin(), comp.end()) * r.ranks / total_c : 0;
  }
  out.data_blocks = D;
  out.compute_blocks = static_cast<int64_t>(work.size());
  // 4. The plan.
  AttentionPlan& p = out.plan;
  static_cast<AttentionShape&>(p) = r;
  p.layout = "dcp";
  p.ranks = r.ranks;
  p.value_bytes = r.value_bytes;
  p.fused_stages = r.fused_stages;  // one blockwise kernel call per stage and device
  p.collective_exchange = r.all_to_all;
  p.home.assign(r.ranks, {});
  const Placement placed{blocks, work, *part, r};
  for (int32_t b = 0; b < D; ++b) p.home[(*part)[b]].push_back(placed.slice(b));
  // Per token and query head: Q and K/V values, and the backward's Q side (Q, dO, O and the LSE).
  const double d = r.head_dim, vb = r.value_bytes;
  const double q_row = d * vb, kv_row = 2 * d * vb * r.heads_kv / r.heads_q, q_row_backward = 3 * d * vb;
  const Divisions fwd = schedule_divisions(placed, q_row, kv_row);
  p.stages = fwd.stages;
  p.backward = backward_of(placed, schedule_divisions(placed, q_row_backward, kv_row), r.early_outputs);
  // Partial outputs computed away from home go home once per (rank, Q block) and merge there: after
  // the last stage (gather_out), as DCP's executor sends them; with early_outputs as soon as they
  // are final, with the transfers of stage k + 2 when the rank's last tile on the block ran in
  // stage k (a reduction inside the divisions, hidden under stage k + 1's compute).
  for (const auto& [key, k] : last_use_away_from_home(placed, fwd)) {
    const auto& [at, in] = key;
    if (in.second != AttnTensor::q) continue;
    const AttnTransfer t{at, (*part)[in.first], AttnTensor::out, placed.slice(in.first)};
    if (r.early_outputs && k + 2 < p.stages.size()) p.stages[k + 2].transfers.push_back(t);
    else p.gather_out.push_back(t);
  }
  return out;
}

DcpRequest dcp_request(const std::vector<int64_t>& lengths, const MaskSpec& mask, const ModelShape& model,
                       const ParallelConfig& layout, int32_t ranks, int32_t ranks_per_node) {
  DcpRequest r;
  static_cast<AttentionShape&>(r) = tp_rank_attention(lengths, mask, model, layout);
  r.value_bytes = layout.attention_values();
  r.fused_stages = !layout.attention_per_tile;
  r.ranks = ranks;
  r.gpus_per_node = ranks_per_node;
  r.block_tokens = layout.dcp_block_tokens > 0 ? layout.dcp_block_tokens : dcp_block_size(lengths, ranks, layout.dcp_eps_mem);
  r.divisions = static_cast<int32_t>(layout.dcp_divisions);
  r.head_blocks = static_cast<int32_t>(layout.dcp_head_blocks);
  r.eps_mem = layout.dcp_eps_mem;
  r.eps_comp = layout.dcp_eps_comp;
  r.early_outputs = layout.dcp_early_outputs;
  r.all_to_all = layout.dcp_all_to_all;
  return r;
}

std::string dcp_note(const DcpRequest& r, const DcpResult& d) {
  char note[320];
  std::snprintf(note, sizeof note,
                "dcp: %lld data blocks (%lld tokens × a head block), %lld computation blocks, km1 %.4g MB, %d stages; "
                "fullest GPU %.2f× the mean memory, %.2f× the mean compute",
                static_cast<long long>(d.data_blocks), static_cast<long long>(r.block_tokens),
                static_cast<long long>(d.compute_blocks), d.km1_bytes / 1e6, r.divisions, d.memory_over_mean,
                d.compute_over_mean);
  return note;
}

PlanOutcome plan_dcp_training(const StrategyInput& in) {
  Plan plan;
  if (auto why = plan_static_cp(in, "dp_balanced", &plan); !why.empty()) return PlanOutcome::infeasible(why);
  if (auto why = check_decoder_mask(in.batch.mask); !why.empty()) return PlanOutcome::error(why);
  plan.mask = in.batch.mask;
  auto cost = CostModel::create(in.cluster);
  if (!cost) return PlanOutcome::error(cost.error_str());
  const ParallelConfig& L = plan.layout;
  std::string note;
  // One DCP plan per CP group's micro-batch (its copies on the group's ranks share it).
  std::map<std::pair<int64_t, int64_t>, std::shared_ptr<const AttentionPlan>> made;
  for (auto& rank : plan.micro_batches)
    for (size_t k = 0; k < rank.size(); ++k) {
      PlanMicroBatch& mb = rank[k];
      if (mb.cp <= 1 || mb.lengths.empty()) continue;
      mb.pad_to = 1;  // DCP cuts sequences into blocks; nothing is padded
      auto key = std::make_pair(static_cast<int64_t>(k), mb.first_rank);
      auto it = made.find(key);
      if (it == made.end()) {
        // The planner takes ranks filling nodes in order: the group's members must sit on their
        // nodes in equal consecutive runs (TP inside a node, CP across, as Megatron orders ranks).
        const std::vector<int> node = cp_group_nodes(mb, L, in.cluster.gpus_per_node);
        int64_t per_node = 1;
        while (per_node < mb.cp && node[per_node] == node[0]) ++per_node;
        for (int64_t i = 0; i < mb.cp; ++i)
          if (mb.cp % per_node != 0 || node[i] != i / per_node)
            return PlanOutcome::infeasible("dcp: the CP group's ranks do not fill nodes in equal consecutive runs");
        const DcpRequest r = dcp_request(mb.lengths, in.batch.mask, in.model, L, static_cast<int32_t>(mb.cp),
                                         static_cast<int32_t>(per_node));
        auto d = plan_dcp(r, *cost);
        if (!d) return PlanOutcome::error("dcp: " + d.error_str());
        if (note.empty()) note = dcp_note(r, *d);
        it = made.emplace(key, std::make_shared<const AttentionPlan>(std::move(d->plan))).first;
      }
      mb.attention = it->second;
    }
  PlanOutcome out = PlanOutcome::ok(std::move(plan));
  out.reason = note;
  return out;
}

}  // namespace cpbench
