// attention_sim.cpp — attention_tile_s, lower_attention_plan, simulate_attention_plan.
// The lowering walks the plan in the executor's order (Rank::forward, Rank::backward) as a list
// of phases; each phase posts transfers, runs tiles, then waits for the rank's transfers.
#include "core/sim/attention_sim.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>

#include "core/sim/layer_cost.h"
#include "core/sim/streams.h"
#include "core/sim/trace.h"
#include "core/workload/mask.h"

namespace cpbench {
namespace {

std::string str(const AttnSlice& s) {
  return "seq" + std::to_string(s.seq) + "[" + std::to_string(s.tok_begin) + "," + std::to_string(s.tok_end) + ")";
}

// One wait point of a rank: the transfers it waits for (its sends and receives of the phase) and
// the last tile it ran before waiting (−1 when none).
struct WaitPoint {
  std::vector<int> transfers;
  int last_tile = -1;
};

struct Lowering {
  const AttentionPlan& plan;
  const CostModel& cost;
  std::vector<int> node_of;  // [rank] its node: a transfer inside a node is NVLink, across the network
  TaskGraph graph;
  // [rank] tasks whose latest end is the rank's last wait point: the next phase's posts and
  // first tile depend on them. Empty before the first phase (everything is posted at t = 0).
  std::vector<std::vector<int>> barrier;
  std::vector<std::vector<WaitPoint>> waits;  // [rank] in order
  std::vector<double> compute_s;              // [rank] summed tile durations
  std::vector<AttnBackwardPhase> lowered_backward;  // what lower(true) ran (empty for the forward)

  // [rank] the NIC link its network transfers leave through (ids after the ranks' own links), and
  // the factor its transfers' bytes weigh on that link. A group's m members on a node get their
  // GPUs' share of the node's NICs, s = nics_per_node · m / gpus_per_node — the node's other GPUs
  // carry the same pattern (a CP group's TP peers) or other groups' — pooled in ceil(s) links of
  // s / ceil(s) of a NIC's rate each, member j on link j mod ceil(s). One group on every GPU of a
  // node gets all its NICs; a rank alone on its node, a GPU's share.
  std::vector<int> nic_of;
  std::vector<double> nic_stretch;
  int next_collective = 0;  // the graph's collective ids (collective_exchange)

  Lowering(const AttentionPlan& p, const CostModel& c, std::vector<int> nodes)
      : plan(p), cost(c), node_of(std::move(nodes)), barrier(p.ranks), waits(p.ranks), compute_s(p.ranks, 0.0) {
    const double nics = std::max(1, c.cluster().nics_per_node), gpus = std::max(1, c.cluster().gpus_per_node);
    std::map<int, int> members, seen;  // node -> the group's ranks on it; so far
    for (int32_t r = 0; r < p.ranks; ++r) ++members[node_of[r]];
    const int max_links = static_cast<int>(std::ceil(nics));
    for (int32_t r = 0; r < p.ranks; ++r) {
      const double share = nics * std::min(1.0, members[node_of[r]] / gpus);
      const int links = std::max(1, static_cast<int>(std::ceil(share - 1e-9)));
      nic_of.push_back(p.ranks + node_of[r] * max_links + seen[node_of[r]]++ % links);
      nic_stretch.push_back(links / share);
    }
  }

  // collective_exchange: one all-to-all of a phase — direct sends or relays (DCP's second phase),
  // of one element size — with what each pair of ranks moves in it and its latency tasks.
  struct AllToAll {
    bool relay;
    int element_bytes;
    std::map<std::pair<int32_t, int32_t>, double> bytes;  // (src, dst) -> what src sends dst in it
    std::vector<int> latency;                             // [rank] its latency task
  };
  // A rank's latency in an all-to-all: one send/recv step per peer, each at the protocol NCCL
  // picks for the larger of the two messages (CostModel::p2p_latency_s; zero bytes: LL).
  double all_to_all_latency_s(const AllToAll& a, int32_t r) const {
    double s = 0;
    for (int32_t p = 0; p < plan.ranks; ++p) {
      if (p == r) continue;
      const auto out = a.bytes.find({r, p}), in = a.bytes.find({p, r});
      const double bytes = std::max(out == a.bytes.end() ? 0.0 : out->second, in == a.bytes.end() ? 0.0 : in->second);
      s += cost.p2p_latency_s(bytes, node_of[r] == node_of[p] ? Link::nvlink : Link::network);
    }
    return s;
  }
  // The phase's all-to-alls in the order they are issued: direct sends, then relays, each by
  // element size ascending. A message of O carries its fp32 LSE, which travels in the 4-byte
  // all-to-all. of_message: per message, the all-to-all that carries it (O: its values').
  template <class Message>
  std::vector<AllToAll> all_to_alls(const std::vector<Message>& messages, std::vector<int>& of_message) const {
    std::map<std::pair<bool, int>, std::map<std::pair<int32_t, int32_t>, double>> sent;  // (relay, size) -> bytes
    of_message.clear();
    for (const Message& m : messages) {
      const AttnTransfer& t = *m.first;
      sent[{t.relay, plan.wire_bytes(t.tensor)}][{t.src, t.dst}] += m.bytes;
      if (t.tensor == AttnTensor::out) {  // its LSE: 4 of each row's head_dim · value + 4 bytes
        const double lse = m.bytes * 4.0 / (plan.head_dim * plan.wire_bytes(t.tensor) + 4.0);
        sent[{t.relay, 4}][{t.src, t.dst}] += lse;
        sent[{t.relay, plan.wire_bytes(t.tensor)}][{t.src, t.dst}] -= lse;
      }
    }
    std::vector<AllToAll> out;
    std::map<std::pair<bool, int>, int> index;
    for (const auto& [key, bytes] : sent) {  // map order: direct sends, then relays; sizes ascending
      index[key] = static_cast<int>(out.size());
      out.push_back({key.first, key.second, bytes, {}});
    }
    for (const Message& m : messages) of_message.push_back(index.at({m.first->relay, plan.wire_bytes(m.first->tensor)}));
    return out;
  }

  // Posts `transfers`, runs tiles[r] on every rank r, then every rank waits for its transfers.
  void phase(const std::vector<AttnTransfer>& transfers, const std::vector<std::vector<const AttnTile*>>& tiles,
             bool backward, const std::string& label) {
    std::vector<std::vector<int>> posted(plan.ranks);
    // What one message carries: a transfer, or with fused_stages everything a rank sends one peer
    // of one tensor in the phase (TransformerEngine and ring-flash-attention send a CP step's
    // packed K/V as one buffer); the message costs one latency and its summed bytes.
    // A relay (two-phase communication) is its own message, after the messages that bring what it
    // forwards to its sender.
    struct Message {
      const AttnTransfer* first;
      double bytes;
      size_t count;
      std::vector<const AttnTransfer*> members;
    };
    std::vector<Message> messages;
    // Which message brings each slice: kept only in a phase with relays (a packed batch's static
    // layout has millions of transfers and none).
    const bool relays = std::any_of(transfers.begin(), transfers.end(), [](const AttnTransfer& t) { return t.relay; });
    std::map<std::tuple<int32_t, int32_t, AttnTensor, bool>, size_t> by_peer;
    for (const AttnTransfer& t : transfers) {
      if (plan.fused_stages) {
        auto [it, fresh] = by_peer.emplace(std::make_tuple(t.src, t.dst, t.tensor, t.relay), messages.size());
        if (!fresh) {
          messages[it->second].bytes += transfer_bytes(plan, t);
          ++messages[it->second].count;
          if (relays) messages[it->second].members.push_back(&t);
          continue;
        }
      }
      messages.push_back({&t, transfer_bytes(plan, t), 1, {}});
      if (relays) messages.back().members.push_back(&t);
    }
    // Relay messages last, so the tasks of the messages they wait for exist.
    if (relays) std::stable_partition(messages.begin(), messages.end(), [](const Message& m) { return !m.first->relay; });
    std::map<std::tuple<int32_t, AttnTensor, int32_t, int64_t, int32_t>, int> arrival;  // (dst, tensor, slice) -> task
    auto slice_key = [](int32_t rank, const AttnTransfer& t) {
      return std::make_tuple(rank, t.tensor, t.slice.seq, t.slice.tok_begin, t.slice.head_begin);
    };
    // collective_exchange: the all-to-alls in issue order, each a latency task per rank that
    // starts on every rank at once when all have posted it, after the rank's part (latency, sends
    // and receives) of the phase's earlier all-to-alls; its messages follow its latency.
    std::vector<int> a2a_of;
    std::vector<AllToAll> a2as;
    size_t a2as_posted = 0;
    auto post_all_to_alls_until = [&](size_t last) {
      for (; a2as_posted <= last && a2as_posted < a2as.size(); ++a2as_posted) {
        AllToAll& a = a2as[a2as_posted];
        const int id = next_collective++;
        for (int32_t r = 0; r < plan.ranks; ++r) {
          const double latency = all_to_all_latency_s(a, r);
          TaskSpec task;
          task.device = r;
          task.stream = attention_stream::all_to_all;
          task.kind = 'm';
          task.duration_s = latency;
          task.collective = id;
          task.deps = barrier[r];
          task.deps.insert(task.deps.end(), posted[r].begin(), posted[r].end());
          task.name = label + (a.relay ? " relay" : "") + " all-to-all (" + std::to_string(a.element_bytes) +
                      "-byte values) latency";
          a.latency.push_back(graph.add(std::move(task)));
        }
        for (int32_t r = 0; r < plan.ranks; ++r) posted[r].push_back(a.latency[r]);
      }
    };
    if (plan.collective_exchange && !messages.empty()) {
      a2as = all_to_alls(messages, a2a_of);
      // Messages in the order of their all-to-alls (relays stay after what they forward).
      std::vector<size_t> order(messages.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return a2a_of[a] < a2a_of[b]; });
      std::vector<Message> sorted;
      std::vector<int> sorted_of;
      for (size_t i : order) {
        sorted.push_back(std::move(messages[i]));
        sorted_of.push_back(a2a_of[i]);
      }
      messages = std::move(sorted);
      a2a_of = std::move(sorted_of);
    }
    for (const Message& m : messages) {
      const AttnTransfer& t = *m.first;
      if (!a2as.empty()) post_all_to_alls_until(static_cast<size_t>(a2a_of[&m - messages.data()]));
      TaskSpec task;
      // Inside a node the sender's NVLink ports; across nodes its NIC, which the node's other GPUs
      // on that NIC share: their transfers queue on it, each at the NIC's whole rate.
      const bool local = node_of[t.src] == node_of[t.dst];
      task.device = t.src;
      task.stream = attention_stream::transfers;
      task.link = local ? t.src : nic_of[t.src];
      task.kind = 'm';
      // In an all-to-all the latency task paid the message's protocol steps: the wire time alone.
      // Across nodes the task holds the NIC at the rate it carries over several flows; the flow
      // itself may be slower (flow_s, at one flow's rate): the rest of its time follows as a tail
      // off the NIC, so the NIC serves the node's other flows meanwhile.
      double flow_s = 0;
      if (a2as.empty()) {
        task.duration_s = local ? cost.p2p_s(m.bytes, Link::nvlink) : cost.nic_p2p_s(m.bytes * nic_stretch[t.src]);
        if (!local) flow_s = cost.nic_flow_p2p_s(m.bytes);
      } else {
        task.duration_s = local ? cost.p2p_wire_s(m.bytes, Link::nvlink) : cost.nic_wire_s(m.bytes * nic_stretch[t.src]);
        if (!local) flow_s = cost.nic_flow_wire_s(m.bytes);
      }
      // A rendezvous: both ends must have reached this phase's post point (collective_exchange:
      // the all-to-all's latency, which every rank reached).
      if (a2as.empty()) {
        task.deps = barrier[t.src];
        task.deps.insert(task.deps.end(), barrier[t.dst].begin(), barrier[t.dst].end());
      } else {
        const AllToAll& a = a2as[a2a_of[&m - messages.data()]];
        task.deps = {a.latency[t.src], a.latency[t.dst]};
      }
      if (t.relay)
        for (const AttnTransfer* r : m.members)
          if (auto in = arrival.find(slice_key(r->src, *r)); in != arrival.end()) task.deps.push_back(in->second);
      std::sort(task.deps.begin(), task.deps.end());
      task.deps.erase(std::unique(task.deps.begin(), task.deps.end()), task.deps.end());
      // The send kernel shares the sender's GPU with its tiles (its receive kernel the receiver's;
      // only the sender's side is modelled).
      set_contention(cost, task, local ? LinkBytes{m.bytes, 0} : LinkBytes{0, m.bytes});
      task.name = label + " " + attn_tensor_name(t.tensor) + " " + std::to_string(t.src) + "->" +
                  std::to_string(t.dst) + " " + str(t.slice) + (m.count > 1 ? " +" + std::to_string(m.count - 1) + " slices" : "");
      const double tail_s = flow_s - task.duration_s;
      TaskSpec tail;
      if (tail_s > 1e-15) {
        // On the sender's stream, so its next transfer waits for this flow to finish.
        tail.device = t.src;
        tail.stream = attention_stream::transfers;
        tail.kind = 'm';
        tail.duration_s = tail_s;
        tail.sm_share = task.sm_share;  // the send kernel still holds its CTAs; the bytes moved with the NIC part
        tail.name = task.name + " (one flow's rate)";
      }
      int id = graph.add(std::move(task));
      if (tail_s > 1e-15) {
        tail.deps = {id};
        id = graph.add(std::move(tail));
      }
      posted[t.src].push_back(id);
      posted[t.dst].push_back(id);
      if (!t.relay)
        for (const AttnTransfer* x : m.members) arrival[slice_key(x->dst, *x)] = id;
    }
    if (!a2as.empty()) post_all_to_alls_until(a2as.size() - 1);  // those carrying only LSE
    for (int32_t r = 0; r < plan.ranks; ++r) {
      int last = -1;
      if (plan.fused_stages && static_cast<size_t>(r) < tiles.size() && !tiles[r].empty()) {
        TaskSpec task;
        task.device = r;
        task.stream = attention_stream::kernels;
        task.kind = 'c';
        task.duration_s = attention_tiles_s(plan, tiles[r], cost, backward) +
                          attention_merge_s(plan, tiles[r], cost, backward);
        task.deps = barrier[r];
        task.name = label + (backward ? " bwd " : " fwd ") + std::to_string(tiles[r].size()) + " tiles";
        compute_s[r] += task.duration_s;
        last = graph.add(std::move(task));
      } else if (static_cast<size_t>(r) < tiles.size()) {
        for (const AttnTile* tile : tiles[r]) {
          TaskSpec task;
          task.device = r;
          task.stream = attention_stream::kernels;
          task.kind = 'c';
          task.duration_s = attention_tile_s(plan, *tile, cost, backward) + attention_merge_s(plan, {tile}, cost, backward);
          // Only the first tile waits for the previous wait point; the rest follow stream order.
          if (last < 0) task.deps = barrier[r];
          task.name = label + (backward ? " bwd q " : " fwd q ") + str(tile->q) + " kv " + str(tile->kv);
          compute_s[r] += task.duration_s;
          last = graph.add(std::move(task));
        }
      }
      waits[r].push_back({posted[r], last});
      // The new wait point ends when the tiles and the transfers are done; a transfer depends on
      // the previous barrier, so only with neither does the previous barrier stay the bound.
      std::vector<int> next = posted[r];
      if (last >= 0) next.push_back(last);
      if (next.size() > 1) {
        // One zero-length marker stands for the wait point, so the next phase's tasks depend on
        // it alone: without it every transfer would list all of both ends' previous transfers
        // (quadratic in the transfers of a packed batch).
        TaskSpec mark;
        mark.device = r;
        mark.stream = attention_stream::wait_point;
        mark.kind = 'o';
        mark.deps = std::move(next);
        mark.name = label + " wait point";
        next = {graph.add(std::move(mark))};
      }
      if (!next.empty()) barrier[r] = std::move(next);
    }
  }

  // The runtime's per-sequence host work of a pass (AttentionPlan::host_ops_per_sequence_*): one
  // task per rank on a host stream, from the rank's last wait point; returns their ids ([rank],
  // empty when there is none). join() makes the next phase wait for them.
  std::vector<int> host_work(int32_t ops_per_sequence, const std::string& label) {
    const double s = ops_per_sequence * static_cast<double>(plan.seq_lengths.size()) * cost.params().host_op_us * 1e-6;
    std::vector<int> ids;
    if (s <= 0) return ids;
    for (int32_t r = 0; r < plan.ranks; ++r) {
      TaskSpec task;
      task.device = r;
      task.stream = attention_stream::host;
      task.kind = 'o';
      task.duration_s = s;
      task.deps = barrier[r];
      task.name = label + " host: " + std::to_string(ops_per_sequence) + " torch calls x " +
                  std::to_string(plan.seq_lengths.size()) + " sequences";
      ids.push_back(graph.add(std::move(task)));
    }
    return ids;
  }
  void join(const std::vector<int>& ids) {
    for (size_t r = 0; r < ids.size(); ++r) barrier[r].push_back(ids[r]);
  }

  // The executor's order: stage i's transfers go out before stage i−1's tiles run.
  void lower(bool backward) {
    const size_t stages = plan.stages.size();
    const std::vector<AttnTransfer> none;
    // The forward's host work runs beside the first phase's transfers (TransformerEngine's
    // all-to-alls go out as its loop reorders what arrived); the first tiles wait for both.
    const std::vector<int> fwd_host = host_work(plan.host_ops_per_sequence_fwd, "fwd");
    for (size_t i = 0; i <= stages; ++i) {
      std::vector<std::vector<const AttnTile*>> tiles(plan.ranks);
      if (i > 0)
        for (size_t r = 0; r < plan.stages[i - 1].tiles.size(); ++r)
          for (const AttnTile& t : plan.stages[i - 1].tiles[r]) tiles[r].push_back(&t);
      std::string label = "s";  // built in two steps: GCC 12 warns falsely (-Wrestrict) on "s" + string
      label += std::to_string(i);
      phase(i < stages ? plan.stages[i].transfers : none, tiles, false, label);
      if (i == 0) join(fwd_host);
    }
    phase(plan.gather_out, {}, false, "gather");
    if (!backward) return;
    // The backward phases every backend runs (attention_plan.h backward_phases).
    lowered_backward = backward_phases(plan);
    // The backward's host work, before its first phase: the sum of what its synchronizations expose.
    join(host_work(plan.host_ops_per_sequence_bwd, "bwd"));
    const std::vector<AttnBackwardPhase>& phases = lowered_backward;
    for (size_t i = 0; i < phases.size(); ++i) {
      std::vector<std::vector<const AttnTile*>> tiles(plan.ranks);
      for (size_t r = 0; r < phases[i].tiles.size() && r < tiles.size(); ++r)
        for (const AttnTile& t : phases[i].tiles[r]) tiles[r].push_back(&t);
      std::string label = "bwd p";  // built by appends: GCC 12 warns falsely (-Wrestrict) on "s" + string
      label += std::to_string(i);
      phase(phases[i].transfers, tiles, true, label);
    }
  }
};

// Rejects what would index out of range in the lowering; the rest is check_attention_plan's job.
Status check_ranges(const AttentionPlan& p) {
  auto bad = [](const std::string& where, const std::string& what) {
    return Status(Error{"", "", "attention plan: " + where + ": " + what});
  };
  if (p.ranks < 1) return bad("ranks", std::to_string(p.ranks) + ", need at least 1");
  if (p.heads_q < 1 || p.heads_kv < 1 || p.heads_q % p.heads_kv != 0 || p.head_dim < 1)
    return bad("heads", "heads_q " + std::to_string(p.heads_q) + ", heads_kv " + std::to_string(p.heads_kv) +
                            ", head_dim " + std::to_string(p.head_dim) +
                            ": need heads_kv >= 1 dividing heads_q and head_dim >= 1");
  auto check_transfer = [&](const AttnTransfer& t, const std::string& where) {
    if (t.src < 0 || t.src >= p.ranks || t.dst < 0 || t.dst >= p.ranks)
      return bad(where, "transfer " + std::to_string(t.src) + " -> " + std::to_string(t.dst) +
                            " names a rank outside [0, " + std::to_string(p.ranks) + ")");
    return ok_status();
  };
  auto check_slice = [&](const AttnSlice& s, const std::string& where) {
    if (s.seq < 0 || static_cast<size_t>(s.seq) >= p.seq_lengths.size() || s.tok_begin < 0 ||
        s.tok_end > p.seq_lengths[s.seq] || s.tok_begin > s.tok_end)
      return bad(where, "slice " + str(s) + " is outside the plan's sequences");
    return ok_status();
  };
  // A forward stage or a backward phase: its transfers and its tiles.
  auto check_step = [&](const std::vector<AttnTransfer>& transfers, const std::vector<std::vector<AttnTile>>& tiles,
                        const std::string& at) {
    if (tiles.size() > static_cast<size_t>(p.ranks))
      return bad(at, "tiles for " + std::to_string(tiles.size()) + " ranks, the plan has " + std::to_string(p.ranks));
    for (const AttnTransfer& t : transfers)
      if (auto s = check_transfer(t, at); !s) return s;
    for (const auto& rank_tiles : tiles)
      for (const AttnTile& t : rank_tiles) {
        if (auto s = check_slice(t.q, at + " tile q"); !s) return s;
        if (auto s = check_slice(t.kv, at + " tile kv"); !s) return s;
      }
    return ok_status();
  };
  for (size_t i = 0; i < p.stages.size(); ++i)
    if (auto s = check_step(p.stages[i].transfers, p.stages[i].tiles, "stage " + std::to_string(i)); !s) return s;
  for (const AttnTransfer& t : p.gather_out)
    if (auto s = check_transfer(t, "gather_out"); !s) return s;
  for (size_t i = 0; i < p.backward.size(); ++i)
    if (auto s = check_step(p.backward[i].transfers, p.backward[i].tiles, "backward phase " + std::to_string(i)); !s)
      return s;
  return ok_status();
}

Expected<Lowering> build(const AttentionPlan& plan, const CostModel& cost, bool backward, std::vector<int> node_of) {
  if (auto s = check_ranges(plan); !s) return s.errors();
  if (static_cast<int32_t>(node_of.size()) != plan.ranks)
    return Error{"", "", "attention plan: a node map of " + std::to_string(node_of.size()) + " ranks for a plan of " +
                             std::to_string(plan.ranks)};
  Lowering low(plan, cost, std::move(node_of));
  low.lower(backward);
  return low;
}

}  // namespace

double attention_tile_s(const AttentionPlan& plan, const AttnTile& tile, const CostModel& cost, bool backward) {
  return attention_tiles_s(plan, {&tile}, cost, backward);
}

namespace {

// Tokens × heads of the distinct slices among the tiles' q (kv_side false) or kv sides: a fused
// stage's kernel reads every key one of its query rows attends to in one pass over that row
// (TransformerEngine's THD call takes a sequence's pieces as one entry; DCP's kernel walks a query
// block's key blocks from a block table), so the row is loaded, rescaled and written once, and
// its partial merged once.
double distinct_elements(const std::vector<const AttnTile*>& tiles, bool kv_side) {
  std::vector<std::tuple<int32_t, int64_t, int64_t, int32_t, int32_t>> seen;
  seen.reserve(tiles.size());
  for (const AttnTile* t : tiles) {
    const AttnSlice& s = kv_side ? t->kv : t->q;
    seen.emplace_back(s.seq, s.tok_begin, s.tok_end, s.head_begin, s.head_end);
  }
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  double n = 0;
  for (const auto& [seq, b, e, hb, he] : seen) {
    n += static_cast<double>(e - b) * (he - hb);
  }
  return n;
}

// The grid of one varlen call over `tiles`, in launch order: per CTA, the pairs of one head it
// computes. The call's sequences are the distinct query slices (a THD entry; a DCP query block
// with the key blocks its block table lists), each against the keys of its tiles. FA2 launches
// (CTA tiles of a sequence, sequences, heads), the first fastest; every head of a sequence has
// the same work.
std::vector<double> grid_pairs(const AttentionPlan& plan, const std::vector<const AttnTile*>& tiles, bool backward) {
  using Key = std::tuple<int32_t, int64_t, int64_t, int32_t, int32_t>;
  std::map<Key, std::vector<const AttnTile*>> entries;
  for (const AttnTile* t : tiles)
    entries[{t->q.seq, t->q.tok_begin, t->q.tok_end, t->q.head_begin, t->q.head_end}].push_back(t);
  std::vector<std::pair<int32_t, std::vector<double>>> per_entry;  // (heads, one head's CTAs)
  int32_t max_heads = 0;
  for (const auto& [key, list] : entries) {
    std::vector<double> ctas;
    const AttnSlice& q = list.front()->q;
    if (!backward) {
      for (int64_t r = q.tok_begin; r < q.tok_end; r += kFlashCtaRows) {
        double pairs = 0;
        for (const AttnTile* t : list) {
          AttnTile part = *t;
          part.q.tok_begin = r;
          part.q.tok_end = std::min(q.tok_end, r + kFlashCtaRows);
          pairs += static_cast<double>(tile_work_pairs(plan, part));
        }
        ctas.push_back(pairs);
      }
    } else {
      // The sequence's keys are its tiles' K/V slices one after another (the order the call
      // lists them, by position), cut into 128-key CTAs across slice boundaries; a CTA's work is
      // the rows that attend to each of its keys. Counted in integers (exact), each CTA's piece
      // of a tile in closed form for full and causal masks, key by key for the others.
      std::vector<const AttnTile*> by_key = list;
      std::stable_sort(by_key.begin(), by_key.end(),
                       [](const AttnTile* a, const AttnTile* b) { return a->kv.tok_begin < b->kv.tok_begin; });
      const MaskSpec mask = tile_work_mask(plan);
      const bool closed_form = mask_pairs_closed_form(mask);
      std::vector<int64_t> cta_pairs, rows;
      int64_t at = 0;  // the tile's first key in the concatenation
      for (const AttnTile* t : by_key) {
        const int64_t n = t->kv.tokens(), L = plan.seq_lengths[t->q.seq];
        cta_pairs.resize(static_cast<size_t>((at + n + kFlashCtaKeys - 1) / kFlashCtaKeys), 0);
        if (closed_form) {
          for (int64_t b = at; b < at + n;) {
            const int64_t e = std::min(at + n, (b / kFlashCtaKeys + 1) * kFlashCtaKeys);
            cta_pairs[b / kFlashCtaKeys] += mask_pairs_in_tile(mask, L, t->q.tok_begin, t->q.tok_end,
                                                               t->kv.tok_begin + (b - at), t->kv.tok_begin + (e - at));
            b = e;
          }
        } else {
          rows.assign(static_cast<size_t>(n), 0);
          mask_rows_per_key(mask, L, t->q.tok_begin, t->q.tok_end, t->kv.tok_begin, t->kv.tok_end, rows.data());
          for (int64_t k = 0; k < n; ++k) cta_pairs[(at + k) / kFlashCtaKeys] += rows[k];
        }
        at += n;
      }
      for (const int64_t pairs : cta_pairs) ctas.push_back(static_cast<double>(pairs));
    }
    max_heads = std::max(max_heads, q.heads());
    per_entry.emplace_back(q.heads(), std::move(ctas));
  }
  std::vector<double> grid;
  for (int32_t h = 0; h < max_heads; ++h)
    for (const auto& [heads, ctas] : per_entry)
      if (h < heads) grid.insert(grid.end(), ctas.begin(), ctas.end());
  return grid;
}

}  // namespace

double attention_tiles_s(const AttentionPlan& plan, const std::vector<const AttnTile*>& tiles, const CostModel& cost,
                         bool backward) {
  std::vector<const AttnTile*> working;
  for (const AttnTile* tile : tiles)
    if (tile->q.tokens() > 0 && tile_work_pairs(plan, *tile) > 0) working.push_back(tile);
  if (working.empty()) return 0;
  // One varlen call over the tiles' grid, each query row once however many of the call's tiles
  // it is in (distinct_elements).
  return cost.flash_attention_grid_s(grid_pairs(plan, working, backward), distinct_elements(working, false),
                                     plan.head_dim, backward);
}

double attention_merge_s(const AttentionPlan& plan, const std::vector<const AttnTile*>& tiles, const CostModel& cost,
                         bool backward) {
  // The partial read, the fp32 accumulator read and written.
  const double per_value = plan.wire_bytes(backward ? AttnTensor::dkv : AttnTensor::out) + 8.0;
  // Each distinct query slice's partial (and backward each distinct K/V slice's) once: the call
  // produces one partial per row (distinct_elements). A K/V slice names query heads; its dK and dV
  // rows are of its KV heads, 1/group as many (GQA).
  const double q = distinct_elements(tiles, false);
  const double kv = distinct_elements(tiles, true) / std::max(1, plan.group());
  const double bytes = backward ? (q + 2 * kv) * plan.head_dim * per_value
                                : q * plan.head_dim * per_value + q * 12.0;  // O; LSE in fp32
  return cost.memory_bound_s(bytes);
}

LinkBytes attention_link_bytes(const AttentionPlan& plan, const std::vector<AttnBackwardPhase>& backward,
                               const std::vector<int>& node_of) {
  LinkBytes b;
  auto add = [&](const AttnTransfer& t) {
    (node_of.at(t.src) == node_of.at(t.dst) ? b.nvlink : b.network) += transfer_bytes(plan, t);
  };
  for (const AttnTransfer& t : forward_transfers(plan)) add(t);
  for (const AttnBackwardPhase& ph : backward)
    for (const AttnTransfer& t : ph.transfers) add(t);
  return b;
}

std::vector<int> uniform_nodes(int32_t ranks, Link link) {
  std::vector<int> nodes(static_cast<size_t>(std::max(0, ranks)), 0);
  if (link != Link::nvlink)
    for (int32_t r = 0; r < ranks; ++r) nodes[r] = r;  // every rank on a node of its own
  return nodes;
}

Expected<TaskGraph> lower_attention_plan(const AttentionPlan& plan, const CostModel& cost, bool backward, Link link) {
  auto low = build(plan, cost, backward, uniform_nodes(plan.ranks, link));
  if (!low) return low.errors();
  return std::move(low->graph);
}

Expected<AttentionSimResult> simulate_attention_plan(const AttentionPlan& plan, const CostModel& cost, bool backward,
                                                     Link link, const std::filesystem::path& trace) {
  return simulate_attention_plan(plan, cost, backward, uniform_nodes(plan.ranks, link), trace);
}

Expected<AttentionSimResult> simulate_attention_plan(const AttentionPlan& plan, const CostModel& cost, bool backward,
                                                     const std::vector<int>& node_of,
                                                     const std::filesystem::path& trace) {
  auto low = build(plan, cost, backward, node_of);
  if (!low) return low.errors();
  auto sim = simulate_checked(low->graph);
  if (!sim) return sim.errors();
  AttentionSimResult out;
  out.step_time_s = sim->makespan_s;
  // Kernel time as it ran: the tiles' durations, stretched where send kernels shared the GPU.
  out.compute_s = low->compute_s;
  for (int32_t r = 0; r < plan.ranks && r < static_cast<int32_t>(sim->compute_busy_s.size()); ++r)
    out.compute_s[r] = sim->compute_busy_s[r];
  for (size_t i = 0; i < low->graph.size(); ++i)
    if (low->graph.task(static_cast<int>(i)).stream == attention_stream::kernels) out.last_kernel_end_s = std::max(out.last_kernel_end_s, sim->end_s[i]);
  out.wait_s.assign(plan.ranks, 0.0);
  // Replays each rank's timeline: it reaches a wait point when its tiles of the phase are done
  // (or at the previous wait point's end) and leaves it when its transfers are done.
  for (int32_t r = 0; r < plan.ranks; ++r) {
    double t = 0;
    for (const WaitPoint& w : low->waits[r]) {
      const double arrive = w.last_tile >= 0 ? sim->end_s[w.last_tile] : t;
      double leave = arrive;
      for (int id : w.transfers) leave = std::max(leave, sim->end_s[id]);
      out.wait_s[r] += leave - arrive;
      t = leave;
    }
  }
  out.bytes_sent = plan_bytes(plan, low->lowered_backward).sent;  // the phases it lowered, not derived again
  out.link_bytes = attention_link_bytes(plan, low->lowered_backward, node_of);
  if (!trace.empty()) {
    std::vector<std::string> names;
    for (int32_t r = 0; r < plan.ranks; ++r) names.push_back("rank " + std::to_string(r));
    if (auto s = write_chrome_trace(low->graph, *sim, names, trace, kAttentionStreamNames); !s) return s.errors();
  }
  return out;
}

}  // namespace cpbench
