#include "core/reshard/reshard_plan.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <tuple>

namespace cpbench {

LinkClass link_class(int64_t src, int64_t dst, int64_t gpus_per_node) {
  if (src == dst) return LinkClass::local;
  return src / gpus_per_node == dst / gpus_per_node ? LinkClass::nvlink : LinkClass::network;
}

Expected<std::vector<int64_t>> target_gpus(const ReshardRequest& q) {
  const std::set<int64_t> lost(q.lost.begin(), q.lost.end());
  std::vector<int64_t> gpus = q.to_gpus;
  if (gpus.empty())
    for (int64_t g = 0; static_cast<int64_t>(gpus.size()) < q.to.ranks(); ++g)
      if (!lost.count(g)) gpus.push_back(g);
  if (static_cast<int64_t>(gpus.size()) != q.to.ranks())
    return Error{"", "", std::to_string(gpus.size()) + " target GPUs given for the " + std::to_string(q.to.ranks()) + " ranks of " + q.to.str()};
  std::set<int64_t> seen;
  for (int64_t g : gpus) {
    if (g < 0 || lost.count(g) || !seen.insert(g).second)
      return Error{"", "", "target GPU " + std::to_string(g) + " is negative, lost or given twice"};
  }
  return gpus;
}

int64_t reshard_gpus(const ReshardRequest& q) {
  int64_t n = q.from.ranks();
  if (auto gpus = target_gpus(q))
    for (int64_t g : *gpus) n = std::max(n, g + 1);
  return n;
}

namespace {

using Key = std::pair<int, StateKind>;  // (tensor, kind)

struct Source {
  int64_t rank;
  Rect rect;
};

// A transfer larger than the cap split by rows into pieces that fit (a row is never split).
std::vector<Transfer> split_to_fit(const Transfer& t, double cap) {
  if (cap <= 0 || t.bytes() <= cap) return {t};
  const Rect& r = t.piece.rect;
  const double row_bytes = static_cast<double>(r.c1 - r.c0) * bytes_per_element(t.piece.kind);
  const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(cap / row_bytes));
  std::vector<Transfer> out;
  for (int64_t r0 = r.r0; r0 < r.r1; r0 += rows) {
    Transfer p = t;
    p.piece.rect = {r0, std::min(r.r1, r0 + rows), r.c0, r.c1};
    out.push_back(p);
  }
  return out;
}

}  // namespace

Expected<ReshardPlan> plan_reshard(const ModelShape& model, const ReshardRequest& q) {
  for (const StateLayout* L : {&q.from, &q.to})
    if (auto why = check_state_layout(model, *L); !why.empty()) return Error{"", "", "layout " + L->str() + ": " + why};
  const std::set<int64_t> lost(q.lost.begin(), q.lost.end());
  for (int64_t r : lost)
    if (r < 0 || r >= q.from.ranks()) return Error{"", "", "lost rank " + std::to_string(r) + " is not a rank of " + q.from.str()};
  auto gpus = target_gpus(q);
  if (!gpus) return gpus.errors();
  ReshardPlan plan;
  plan.tensors = model_tensors(model, q.max_seq);
  std::map<Key, std::vector<Source>> sources;
  for (int64_t r = 0; r < q.from.ranks(); ++r) {
    if (lost.count(r)) continue;
    for (const Piece& p : rank_state(model, plan.tensors, q.from, r)) sources[{p.tensor, p.kind}].push_back({r, p.rect});
  }
  std::vector<double> load(static_cast<size_t>(reshard_gpus(q)), 0);
  std::vector<Transfer> all;
  for (int64_t dst = 0; dst < q.to.ranks(); ++dst) {
    const int64_t gpu = (*gpus)[dst];
    for (const Piece& target : rank_state(model, plan.tensors, q.to, dst)) {
      std::vector<Source>& cands = sources[{target.tensor, target.kind}];
      // Cheapest link first, then the least loaded sender, then the lowest rank.
      std::vector<const Source*> order;
      for (const Source& s : cands)
        if (!intersect(s.rect, target.rect).empty()) order.push_back(&s);
      std::stable_sort(order.begin(), order.end(), [&](const Source* a, const Source* b) {
        return std::make_tuple(static_cast<int>(link_class(a->rank, gpu, q.gpus_per_node)), load[a->rank], a->rank) <
               std::make_tuple(static_cast<int>(link_class(b->rank, gpu, q.gpus_per_node)), load[b->rank], b->rank);
      });
      std::vector<Rect> left = {target.rect};
      for (const Source* s : order) {
        std::vector<Rect> next;
        for (const Rect& r : left) {
          const Rect x = intersect(r, s->rect);
          if (x.empty()) {
            next.push_back(r);
            continue;
          }
          Transfer t{s->rank, dst, gpu, {target.tensor, target.kind, x}};
          if (s->rank != gpu) load[s->rank] += t.bytes();
          all.push_back(t);
          for (const Rect& rest : subtract(r, x)) next.push_back(rest);
        }
        left = std::move(next);
        if (left.empty()) break;
      }
      for (const Rect& r : left) plan.unrecoverable.push_back({-1, dst, gpu, {target.tensor, target.kind, r}});
    }
  }
  // Stages: each transfer (split by rows to fit) in the first stage where its receiver's staged
  // bytes stay within the cap; local copies need no staging and go in the first stage.
  std::vector<std::vector<Transfer>> stages;
  std::vector<std::map<int64_t, double>> staged;
  for (const Transfer& whole : all) {
    for (const Transfer& t : split_to_fit(whole, q.staging_bytes)) {
      const bool copy = t.src == t.dst_gpu;
      size_t k = 0;
      for (; k < stages.size(); ++k)
        if (copy || q.staging_bytes <= 0 || staged[k][t.dst_gpu] + t.bytes() <= q.staging_bytes || staged[k][t.dst_gpu] == 0) break;
      if (k == stages.size()) {
        stages.emplace_back();
        staged.emplace_back();
      }
      stages[k].push_back(t);
      if (!copy) staged[k][t.dst_gpu] += t.bytes();
    }
  }
  plan.stage_begin.push_back(0);
  for (auto& s : stages) {
    plan.transfers.insert(plan.transfers.end(), s.begin(), s.end());
    plan.stage_begin.push_back(plan.transfers.size());
  }
  return plan;
}

std::string check_reshard_plan(const ModelShape& model, const ReshardRequest& q, const ReshardPlan& plan) {
  const std::set<int64_t> lost(q.lost.begin(), q.lost.end());
  auto inside = [](const Rect& in, const Rect& out) { return intersect(in, out) == in; };
  auto name = [&](const Transfer& t) {
    return plan.tensors[t.piece.tensor].name + (t.piece.kind == StateKind::weights ? " (weights)" : " (optimizer)") + " rank " +
           std::to_string(t.src) + " → " + std::to_string(t.dst);
  };
  std::map<std::pair<int64_t, Key>, std::vector<Rect>> arrived;  // (dst, tensor, kind) -> rects
  std::vector<std::map<Key, std::vector<Rect>>> held_by(static_cast<size_t>(q.from.ranks()));
  for (int64_t r = 0; r < q.from.ranks(); ++r)
    for (const Piece& p : rank_state(model, plan.tensors, q.from, r)) held_by[r][{p.tensor, p.kind}].push_back(p.rect);
  auto gpus = target_gpus(q);
  if (!gpus) return gpus.error_str();
  for (const Transfer& t : plan.transfers) {
    if (t.src < 0 || t.src >= q.from.ranks() || lost.count(t.src)) return name(t) + ": the sender holds no state";
    if (t.dst < 0 || t.dst >= q.to.ranks() || t.dst_gpu != (*gpus)[t.dst]) return name(t) + ": delivered to another GPU than the target rank's";
    bool held = false;
    for (const Rect& r : held_by[t.src][{t.piece.tensor, t.piece.kind}]) held |= inside(t.piece.rect, r);
    if (!held) return name(t) + ": the sender does not hold what it sends";
    arrived[{t.dst, {t.piece.tensor, t.piece.kind}}].push_back(t.piece.rect);
  }
  for (const Transfer& u : plan.unrecoverable) arrived[{u.dst, {u.piece.tensor, u.piece.kind}}].push_back(u.piece.rect);
  // Per receiver and tensor: the pieces tile its target pieces exactly (disjoint, same area, inside).
  for (int64_t dst = 0; dst < q.to.ranks(); ++dst) {
    std::map<Key, std::vector<Rect>> want;
    for (const Piece& p : rank_state(model, plan.tensors, q.to, dst)) want[{p.tensor, p.kind}].push_back(p.rect);
    for (auto& [key, rects] : want) {
      auto it = arrived.find({dst, key});
      const std::vector<Rect> got = it == arrived.end() ? std::vector<Rect>{} : it->second;
      int64_t want_area = 0, got_area = 0;
      for (const Rect& r : rects) want_area += r.area();
      for (size_t i = 0; i < got.size(); ++i) {
        got_area += got[i].area();
        if (std::none_of(rects.begin(), rects.end(), [&](const Rect& w) { return inside(got[i], w); }))
          return plan.tensors[key.first].name + ": rank " + std::to_string(dst) + " receives what it does not hold under " + q.to.str();
        for (size_t j = i + 1; j < got.size(); ++j)
          if (!intersect(got[i], got[j]).empty())
            return plan.tensors[key.first].name + ": an element reaches rank " + std::to_string(dst) + " twice";
      }
      if (got_area != want_area)
        return plan.tensors[key.first].name + ": rank " + std::to_string(dst) + " gets " + std::to_string(got_area) + " of " +
               std::to_string(want_area) + " elements";
      if (it != arrived.end()) arrived.erase(it);
    }
  }
  if (!arrived.empty()) return "rank " + std::to_string(arrived.begin()->first.first) + " receives a tensor it does not hold under " + q.to.str();
  return "";
}

GpuStateBytes rank_bytes(const ReshardPlan& plan, const ReshardRequest& q) {
  const size_t n = static_cast<size_t>(reshard_gpus(q));
  GpuStateBytes out{std::vector<std::array<double, 3>>(n, {0, 0, 0}), std::vector<std::array<double, 3>>(n, {0, 0, 0})};
  for (const Transfer& t : plan.transfers) {
    const int c = static_cast<int>(link_class(t.src, t.dst_gpu, q.gpus_per_node));
    out.sent[t.src][c] += t.bytes();
    out.received[t.dst_gpu][c] += t.bytes();
  }
  return out;
}

}  // namespace cpbench
