#include "core/runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

namespace cpbench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// One tag per phase: both sides walk the same transfer list in the same order, and MPI keeps
// messages between a pair of ranks with one tag in order, so no per-transfer tag is needed.
enum Tag : int { kTagForward = 11, kTagGather = 12, kTagBackwardIn = 13, kTagBackwardOut = 14 };
// Relays (forwarding what arrives in the same phase) leave in the order their inputs arrive, so
// they travel under a tag of their own: each tag's messages between a pair stay in list order.
constexpr int kRelayTagOffset = 100;
// collective_exchange: an all-to-all's tag also carries its element size (2 or 4 bytes).
constexpr int kElementTagStride = 1000;

// A held piece of data: `x` [tokens, heads_units, width] and, for K/V, O/LSE and dK/dV, a second
// array `y` (V [tokens, heads_units, width]; LSE [heads, tokens]).
struct Entry {
  AttnSlice slice;
  std::vector<float> x, y;
};

struct Shape {
  int32_t heads_div;  // 1 for query-head tensors, g for K/V
  int64_t width;      // d
  bool lse_second;    // y is an LSE [heads, tokens] instead of a second [tokens, heads, d]
};

Shape shape_of(const AttentionPlan& p, AttnTensor t) {
  switch (t) {
    case AttnTensor::kv:
    case AttnTensor::dkv: return {p.group(), p.head_dim, false};
    case AttnTensor::out: return {1, p.head_dim, true};
    default: return {1, p.head_dim, false};
  }
}
bool has_second(AttnTensor t) { return t == AttnTensor::kv || t == AttnTensor::dkv || t == AttnTensor::out; }

// bf16 of an fp32 value, rounded to nearest even (NaN kept a NaN): what a 16-bit training step
// puts on the wire. The CPU kernels compute in fp32; only transfers carry the plan's dtype.
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One transfer's message: x's values, then y's (values, or an fp32 LSE for `out`), each value
// at plan.wire_bytes(t). Its size is transfer_bytes(plan, transfer) exactly.
std::vector<std::byte> encode(const AttentionPlan& p, AttnTensor t, const std::vector<float>& x,
                              const std::vector<float>& y) {
  const bool lse = shape_of(p, t).lse_second;
  const size_t vb = static_cast<size_t>(p.wire_bytes(t));
  std::vector<std::byte> msg(x.size() * vb + y.size() * (lse ? 4 : vb));
  std::byte* at = msg.data();
  auto put = [&](const std::vector<float>& a, size_t bytes) {
    if (a.empty()) return;  // memcpy from an empty vector's null data() is undefined behaviour
    if (bytes == 4) {
      std::memcpy(at, a.data(), a.size() * 4);
    } else {
      for (size_t i = 0; i < a.size(); ++i) {
        const uint16_t h = to_bf16(a[i]);
        std::memcpy(at + 2 * i, &h, 2);
      }
    }
    at += a.size() * bytes;
  };
  put(x, vb);
  put(y, lse ? 4 : vb);
  return msg;
}

// A message's floats, decoded from encode's layout into x (`x_values` of them) and y (the rest).
void decode(const AttentionPlan& p, AttnTensor t, const std::vector<std::byte>& msg, size_t x_values,
            std::vector<float>& x, std::vector<float>& y) {
  const bool lse = shape_of(p, t).lse_second;
  const size_t vb = static_cast<size_t>(p.wire_bytes(t));
  const size_t y_bytes = msg.size() - x_values * vb;
  x.resize(x_values);
  y.resize(y_bytes / (lse ? 4 : vb));
  const std::byte* at = msg.data();
  auto get = [&](float* a, size_t n, size_t bytes) {
    if (n == 0) return;  // an empty part: no pointer to copy to or from
    if (bytes == 4) {
      std::memcpy(a, at, n * 4);
    } else {
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, at + 2 * i, 2);
        a[i] = from_bf16(h);
      }
    }
    at += n * bytes;
  };
  get(x.data(), x.size(), vb);
  get(y.data(), y.size(), lse ? 4 : vb);
}

// Copies the rows and heads of `sub` out of `e` (which contains it).
void extract(const Entry& e, const AttnSlice& sub, const Shape& s, std::vector<float>& x, std::vector<float>* y) {
  const int64_t eh = e.slice.heads() / s.heads_div, sh = sub.heads() / s.heads_div;
  const int64_t h0 = (sub.head_begin - e.slice.head_begin) / s.heads_div;
  const int64_t t0 = sub.tok_begin - e.slice.tok_begin;
  x.resize(static_cast<size_t>(sub.tokens() * sh * s.width));
  for (int64_t t = 0; t < sub.tokens(); ++t)
    std::copy_n(&e.x[((t0 + t) * eh + h0) * s.width], sh * s.width, &x[t * sh * s.width]);
  if (!y) return;
  if (s.lse_second) {
    y->resize(static_cast<size_t>(sh * sub.tokens()));
    for (int64_t h = 0; h < sh; ++h)
      std::copy_n(&e.y[(h0 + h) * e.slice.tokens() + t0], sub.tokens(), &(*y)[h * sub.tokens()]);
  } else {
    y->resize(x.size());
    for (int64_t t = 0; t < sub.tokens(); ++t)
      std::copy_n(&e.y[((t0 + t) * eh + h0) * s.width], sh * s.width, &(*y)[t * sh * s.width]);
  }
}

// Adds `sub`'s rows (x, y packed like extract's output) into the entry that contains it.
void accumulate(Entry& e, const AttnSlice& sub, const Shape& s, const float* x, const float* y) {
  const int64_t eh = e.slice.heads() / s.heads_div, sh = sub.heads() / s.heads_div;
  const int64_t h0 = (sub.head_begin - e.slice.head_begin) / s.heads_div;
  const int64_t t0 = sub.tok_begin - e.slice.tok_begin;
  for (int64_t t = 0; t < sub.tokens(); ++t)
    for (int64_t i = 0; i < sh * s.width; ++i) {
      e.x[((t0 + t) * eh + h0) * s.width + i] += x[t * sh * s.width + i];
      if (y) e.y[((t0 + t) * eh + h0) * s.width + i] += y[t * sh * s.width + i];
    }
}

// LSE merge of a partial (o [tokens, heads, d], lse [heads, tokens]) into the rows of `e`.
void merge_out(Entry& e, const AttnSlice& sub, int64_t d, const float* o, const float* lse) {
  const int64_t eh = e.slice.heads(), sh = sub.heads();
  const int64_t h0 = sub.head_begin - e.slice.head_begin, t0 = sub.tok_begin - e.slice.tok_begin;
  for (int64_t h = 0; h < sh; ++h)
    for (int64_t t = 0; t < sub.tokens(); ++t) {
      const float lb = lse[h * sub.tokens() + t];
      if (lb == kNegInf) continue;
      float& la = e.y[(h0 + h) * e.slice.tokens() + t0 + t];
      float* oa = &e.x[((t0 + t) * eh + h0 + h) * d];
      const float* ob = &o[(t * sh + h) * d];
      if (la == kNegInf) {
        std::copy_n(ob, d, oa);
        la = lb;
        continue;
      }
      const float m = std::max(la, lb);
      const float wa = std::exp(la - m), wb = std::exp(lb - m), sum = wa + wb;
      for (int64_t i = 0; i < d; ++i) oa[i] = (wa * oa[i] + wb * ob[i]) / sum;
      la = m + std::log(sum);
    }
}

class Rank {
 public:
  Rank(const AttentionPlan& p, Communicator& c, AttentionKernels& k, const AttentionInputs& in)
      : p_(p), comm_(c), kernels_(k), in_(in), offsets_(packed_offsets(p)), me_(c.rank()) {}

  Status forward(ExecutionReport& rep);
  Status backward(ExecutionReport& rep);

 private:
  std::vector<Entry>& store(AttnTensor t) { return stores_[static_cast<int>(t)]; }
  Entry* find(AttnTensor t, const AttnSlice& s) {
    for (auto& e : store(t))
      if (e.slice.contains(s)) return &e;
    return nullptr;
  }
  Entry* find_exact(AttnTensor t, const AttnSlice& s) {
    for (auto& e : store(t))
      if (e.slice == s) return &e;
    return nullptr;
  }
  // Calls f(entry, part) for every held entry of `t` that holds part of `want` (same sequence,
  // its heads), `part` being the overlapping tokens.
  template <class F>
  void for_each_piece(AttnTensor t, const AttnSlice& want, F f) {
    for (auto& e : store(t)) {
      const AttnSlice& h = e.slice;
      if (h.seq != want.seq || h.head_begin > want.head_begin || h.head_end < want.head_end) continue;
      AttnSlice part = want;
      part.tok_begin = std::max(want.tok_begin, h.tok_begin);
      part.tok_end = std::min(want.tok_end, h.tok_end);
      if (part.tok_begin < part.tok_end) f(e, part);
    }
  }

  // Copies `want` out of the entries that hold it, which may be several contiguous pieces (a KV
  // range gathered from several ranks). False when some token of it is held nowhere.
  bool assemble(AttnTensor t, const AttnSlice& want, std::vector<float>& x, std::vector<float>* y) {
    const Shape sh = shape_of(p_, t);
    if (const Entry* e = find(t, want)) {
      extract(*e, want, sh, x, y);
      return true;
    }
    const int64_t row = (want.heads() / sh.heads_div) * sh.width;
    x.assign(static_cast<size_t>(want.tokens() * row), 0.f);
    if (y) y->assign(sh.lse_second ? static_cast<size_t>(want.heads() * want.tokens()) : x.size(), 0.f);
    std::vector<char> seen(static_cast<size_t>(want.tokens()), 0);
    for_each_piece(t, want, [&](const Entry& e, const AttnSlice& part) {
      std::vector<float> px, py;
      extract(e, part, sh, px, y ? &py : nullptr);
      const int64_t off = part.tok_begin - want.tok_begin;
      std::copy(px.begin(), px.end(), x.begin() + off * row);
      if (y && sh.lse_second) {
        for (int64_t hd = 0; hd < want.heads(); ++hd)
          std::copy_n(&py[hd * part.tokens()], part.tokens(), &(*y)[hd * want.tokens() + off]);
      } else if (y) {
        std::copy(py.begin(), py.end(), y->begin() + off * row);
      }
      std::fill_n(seen.begin() + off, part.tokens(), 1);
    });
    return std::count(seen.begin(), seen.end(), 1) == want.tokens();
  }

  // Adds a tile's gradient (rows of `slice`, packed) into the disjoint slots that cover it.
  bool spread(AttnTensor t, const AttnSlice& slice, const Shape& sh, const float* x, const float* y) {
    const int64_t row = (slice.heads() / sh.heads_div) * sh.width;
    int64_t covered = 0;
    for_each_piece(t, slice, [&](Entry& e, const AttnSlice& part) {
      const int64_t off = (part.tok_begin - slice.tok_begin) * row;
      accumulate(e, part, sh, x + off, y ? y + off : nullptr);
      covered += part.tokens();
    });
    return covered == slice.tokens();
  }

  // An entry of zeros (or, for out, O = 0 and LSE = −inf) for slice s.
  Entry& fresh(AttnTensor t, const AttnSlice& s) {
    const Shape sh = shape_of(p_, t);
    Entry e{s, std::vector<float>(static_cast<size_t>(s.tokens() * (s.heads() / sh.heads_div) * sh.width), 0.f), {}};
    if (has_second(t))
      e.y = sh.lse_second ? std::vector<float>(static_cast<size_t>(s.heads() * s.tokens()), kNegInf)
                          : std::vector<float>(e.x.size(), 0.f);
    store(t).push_back(std::move(e));
    return store(t).back();
  }
  // Loads a home slice (its tokens and heads) of a global tensor of `heads` heads per token.
  void load_home(AttnTensor t, const AttnSlice& s, std::span<const float> a, std::span<const float> b, int32_t heads) {
    const Shape sh = shape_of(p_, t);
    Entry& e = fresh(t, s);
    const int64_t row = heads * sh.width, h0 = s.head_begin / sh.heads_div * sh.width;
    const int64_t n = s.heads() / sh.heads_div * sh.width;
    for (int64_t k = 0; k < s.tokens(); ++k) {
      const int64_t at = (offsets_[s.seq] + s.tok_begin + k) * row + h0;
      std::copy_n(&a[at], n, &e.x[k * n]);
      if (!b.empty()) std::copy_n(&b[at], n, &e.y[k * n]);
    }
  }

  // Posts one transfer; `data` keeps the message alive until wait_all.
  Status post(const AttnTransfer& tr, int tag, std::vector<Request>& reqs, std::vector<std::vector<std::byte>>& data,
              std::vector<const AttnTransfer*>& incoming) {
    const Shape sh = shape_of(p_, tr.tensor);
    if (tr.src == me_) {
      const Entry* e = find(tr.tensor, tr.slice);
      if (!e) return Error{"", "", std::string("rank ") + std::to_string(me_) + " does not hold the " +
                                       attn_tensor_name(tr.tensor) + " it must send"};
      std::vector<float> x, y;
      extract(*e, tr.slice, sh, x, has_second(tr.tensor) ? &y : nullptr);
      data.push_back(encode(p_, tr.tensor, x, y));
      auto r = comm_.isend(std::span<const std::byte>(data.back()), tr.dst, tag);
      if (!r) return r.errors();
      reqs.push_back(std::move(*r));
    }
    if (tr.dst == me_) {
      data.emplace_back(static_cast<size_t>(transfer_bytes(p_, tr)));
      auto r = comm_.irecv(std::span<std::byte>(data.back()), tr.src, tag);
      if (!r) return r.errors();
      reqs.push_back(std::move(*r));
      incoming.push_back(&tr);
    }
    return ok_status();
  }

  // A received message of `tr` as an entry of its slice.
  Entry unpack(const AttnTransfer& tr, const std::vector<std::byte>& msg) const {
    const Shape sh = shape_of(p_, tr.tensor);
    const size_t first = static_cast<size_t>(tr.slice.tokens() * (tr.slice.heads() / sh.heads_div) * sh.width);
    Entry e{tr.slice, {}, {}};
    decode(p_, tr.tensor, msg, first, e.x, e.y);
    return e;
  }

  // One phase's messages. open() posts every transfer of the list this rank sends or receives,
  // except its relay sends: poll() and close() post those, in list order, once the receive each
  // forwards is done, that receive's bytes being the relay's message. close() waits for all.
  struct Phase {
    std::vector<Request> reqs;
    std::vector<std::vector<std::byte>> data;
    std::vector<const AttnTransfer*> incoming;
    std::vector<size_t> slot, recv_req;                          // per incoming: data and request index
    struct Relay {
      const AttnTransfer* tr;
      int tag;
      size_t from = 0;  // the incoming it forwards
    };
    std::vector<Relay> relays;
    size_t next_relay = 0;
    // collective_exchange: the phase's all-to-alls, each one message to and from every peer (an
    // empty one included), as NCCL runs PyTorch's all_to_all_single: grouped send/recv with every
    // rank. A received message holds the round's transfers from that peer in list order; it is cut
    // into them once it has arrived. Relay rounds go out once this rank's direct rounds are in.
    struct Merged {
      size_t req, data;
      std::vector<const AttnTransfer*> transfers;
    };
    std::vector<Merged> merged;
    size_t merged_cut = 0;  // merged[0, merged_cut) are cut into ph.incoming already
    std::vector<std::pair<int, std::vector<const AttnTransfer*>>> relay_rounds;  // (tag, list)
    bool relay_rounds_posted = true;
  };
  template <class TagOf>
  Status open(Phase& ph, const std::vector<AttnTransfer>& list, TagOf tag_of) {
    if (p_.collective_exchange) return open_all_to_alls(ph, list, tag_of);
    ph.data.reserve(2 * list.size());
    const Status posted = batch([&]() -> Status {
      for (const auto& tr : list) {
        if (tr.src != me_ && tr.dst != me_) continue;
        const int tag = tag_of(tr) + (tr.relay ? kRelayTagOffset : 0);
        if (tr.relay && tr.src == me_) {
          ph.relays.push_back({&tr, tag});
          continue;
        }
        if (auto st = post(tr, tag, ph.reqs, ph.data, ph.incoming); !st) return st;
        if (tr.dst == me_) {
          ph.slot.push_back(ph.data.size() - 1);
          ph.recv_req.push_back(ph.reqs.size() - 1);
        }
      }
      return ok_status();
    });
    if (!posted) return posted;
    for (Phase::Relay& r : ph.relays) {
      const auto it = std::find_if(ph.incoming.begin(), ph.incoming.end(), [&](const AttnTransfer* in) {
        return !in->relay && in->tensor == r.tr->tensor && in->slice == r.tr->slice;
      });
      if (it == ph.incoming.end())
        return Error{"", "", "rank " + std::to_string(me_) + " relays a " + attn_tensor_name(r.tr->tensor) +
                                 " it does not receive in the phase (a plan error)"};
      r.from = static_cast<size_t>(it - ph.incoming.begin());
    }
    return ok_status();
  }
  // collective_exchange: the all-to-alls of a transfer list, keyed by (relay, tag class, element
  // size) in first-appearance order: every rank sees the whole list, so all post the same rounds.
  // (The simulator runs the fp32 LSE of O in an all-to-all of its own, as DCP's executor does; here
  // it travels in its O's message: the same bytes.)
  template <class TagOf>
  std::vector<std::pair<int, std::vector<const AttnTransfer*>>> all_to_all_rounds(const std::vector<AttnTransfer>& list,
                                                                                   TagOf tag_of, bool relay) const {
    std::vector<std::pair<int, std::vector<const AttnTransfer*>>> rounds;
    for (const auto& tr : list) {
      if (tr.relay != relay) continue;
      const int tag = tag_of(tr) + (relay ? kRelayTagOffset : 0) + kElementTagStride * p_.wire_bytes(tr.tensor);
      auto it = std::find_if(rounds.begin(), rounds.end(), [&](const auto& r) { return r.first == tag; });
      if (it == rounds.end()) it = rounds.insert(rounds.end(), {tag, {}});
      it->second.push_back(&tr);
    }
    return rounds;
  }
  // Posts one all-to-all: to every peer the round's transfers this rank sends it, packed in list
  // order (payload(tr) gives each one's bytes), and from every peer what it sends this rank.
  // Runs `post` (which posts sends and receives) as one batch of the communicator (NCCL's group).
  template <class Post>
  Status batch(Post post) {
    if (auto st = comm_.group_start(); !st) return st;
    Status st = post();
    Status end = comm_.group_end();
    return !st ? st : end;
  }

  template <class Payload>
  Status post_all_to_all(Phase& ph, int tag, const std::vector<const AttnTransfer*>& round, Payload payload) {
    return batch([&] { return post_all_to_all_unbatched(ph, tag, round, payload); });
  }
  template <class Payload>
  Status post_all_to_all_unbatched(Phase& ph, int tag, const std::vector<const AttnTransfer*>& round, Payload payload) {
    for (int32_t peer = 0; peer < p_.ranks; ++peer) {
      if (peer == me_) continue;
      std::vector<std::byte> out;
      Phase::Merged in{0, 0, {}};
      size_t in_bytes = 0;
      for (const AttnTransfer* tr : round) {
        if (tr->src == me_ && tr->dst == peer) {
          auto bytes = payload(*tr);
          if (!bytes) return bytes.errors();
          out.insert(out.end(), bytes->begin(), bytes->end());
        }
        if (tr->dst == me_ && tr->src == peer) {
          in.transfers.push_back(tr);
          in_bytes += static_cast<size_t>(transfer_bytes(p_, *tr));
        }
      }
      ph.data.push_back(std::move(out));
      auto r = comm_.isend(std::span<const std::byte>(ph.data.back()), peer, tag);
      if (!r) return r.errors();
      ph.reqs.push_back(std::move(*r));
      ph.data.emplace_back(in_bytes);
      in.data = ph.data.size() - 1;
      auto q = comm_.irecv(std::span<std::byte>(ph.data.back()), peer, tag);
      if (!q) return q.errors();
      ph.reqs.push_back(std::move(*q));
      in.req = ph.reqs.size() - 1;
      ph.merged.push_back(std::move(in));
    }
    return ok_status();
  }
  template <class TagOf>
  Status open_all_to_alls(Phase& ph, const std::vector<AttnTransfer>& list, TagOf tag_of) {
    ph.data.reserve(4 * static_cast<size_t>(p_.ranks) + 2 * list.size());
    for (const auto& [tag, round] : all_to_all_rounds(list, tag_of, false)) {
      auto st = post_all_to_all(ph, tag, round, [&](const AttnTransfer& tr) -> Expected<std::vector<std::byte>> {
        const Entry* e = find(tr.tensor, tr.slice);
        if (!e) return Error{"", "", std::string("rank ") + std::to_string(me_) + " does not hold the " +
                                         attn_tensor_name(tr.tensor) + " it must send"};
        std::vector<float> x, y;
        extract(*e, tr.slice, shape_of(p_, tr.tensor), x, has_second(tr.tensor) ? &y : nullptr);
        return encode(p_, tr.tensor, x, y);
      });
      if (!st) return st;
    }
    ph.relay_rounds = all_to_all_rounds(list, tag_of, true);
    ph.relay_rounds_posted = ph.relay_rounds.empty();
    return ok_status();
  }
  // Cuts the merged messages not cut yet (all arrived) into their transfers (ph.incoming, ph.slot).
  void split_arrived(Phase& ph) {
    for (size_t m = ph.merged_cut; m < ph.merged.size(); ++m) {
      const Phase::Merged& in = ph.merged[m];
      size_t at = 0;
      for (const AttnTransfer* tr : in.transfers) {
        const size_t n = static_cast<size_t>(transfer_bytes(p_, *tr));
        const auto begin = ph.data[in.data].begin() + static_cast<std::ptrdiff_t>(at);
        ph.data.emplace_back(begin, begin + static_cast<std::ptrdiff_t>(n));
        at += n;
        ph.incoming.push_back(tr);
        ph.slot.push_back(ph.data.size() - 1);
      }
    }
    ph.merged_cut = ph.merged.size();
  }
  // The relay rounds, once every direct-round message to this rank is in (`wait`: waiting for them).
  Status post_relay_all_to_alls(Phase& ph, bool wait) {
    if (ph.relay_rounds_posted) return ok_status();
    const size_t direct = ph.merged.size();
    for (size_t m = 0; m < direct; ++m) {
      Request& r = ph.reqs[ph.merged[m].req];
      if (wait) {
        if (auto st = comm_.wait_all(std::span<Request>(&r, 1)); !st) return st;
      } else {
        auto done = comm_.test(r);
        if (!done) return done.errors();
        if (!*done) return ok_status();
      }
    }
    split_arrived(ph);
    ph.relay_rounds_posted = true;
    for (const auto& [tag, round] : ph.relay_rounds) {
      auto st = post_all_to_all(ph, tag, round, [&](const AttnTransfer& tr) -> Expected<std::vector<std::byte>> {
        for (size_t i = 0; i < ph.incoming.size(); ++i)
          if (!ph.incoming[i]->relay && ph.incoming[i]->tensor == tr.tensor && ph.incoming[i]->slice == tr.slice)
            return ph.data[ph.slot[i]];
        return Error{"", "", "rank " + std::to_string(me_) + " relays a " + attn_tensor_name(tr.tensor) +
                                 " it does not receive in the phase (a plan error)"};
      });
      if (!st) return st;
    }
    return ok_status();
  }

  // Posts the relays whose input has arrived, in list order; with `wait`, all of them.
  Status post_relays(Phase& ph, bool wait) {
    for (; ph.next_relay < ph.relays.size(); ++ph.next_relay) {
      const Phase::Relay& relay = ph.relays[ph.next_relay];
      Request& in = ph.reqs[ph.recv_req[relay.from]];
      if (wait) {
        if (auto st = comm_.wait_all(std::span<Request>(&in, 1)); !st) return st;
      } else {
        auto done = comm_.test(in);
        if (!done) return done.errors();
        if (!*done) break;
      }
      auto r = comm_.isend(std::span<const std::byte>(ph.data[ph.slot[relay.from]]), relay.tr->dst, relay.tag);
      if (!r) return r.errors();
      ph.reqs.push_back(std::move(*r));
    }
    return ok_status();
  }
  // Lets MPI progress the phase's messages (a rendezvous moves only inside the library) and posts
  // the relays that can go.
  Status poll(Phase& ph) {
    for (Request& r : ph.reqs)
      if (auto done = comm_.test(r); !done) return done.errors();
    if (auto st = post_relay_all_to_alls(ph, false); !st) return st;
    return post_relays(ph, false);
  }
  Status close(Phase& ph, ExecutionReport& rep) {
    auto t0 = Clock::now();
    if (auto st = post_relay_all_to_alls(ph, true); !st) return st;
    if (auto st = post_relays(ph, true); !st) return st;
    if (auto st = comm_.wait_all(ph.reqs); !st) return st;
    split_arrived(ph);  // collective_exchange: what the last rounds brought
    rep.wait_s += std::chrono::duration<double>(Clock::now() - t0).count();
    return ok_status();
  }

  // Posts a list of transfers, waits for them, and hands every received message to `take`.
  template <class Take>
  Status exchange(const std::vector<AttnTransfer>& list, int tag, ExecutionReport& rep, Take take) {
    Phase ph;
    if (auto st = open(ph, list, [tag](const AttnTransfer&) { return tag; }); !st) return st;
    if (auto st = close(ph, rep); !st) return st;
    for (size_t i = 0; i < ph.incoming.size(); ++i) take(*ph.incoming[i], unpack(*ph.incoming[i], ph.data[ph.slot[i]]));
    return ok_status();
  }

  // Rows of `want` for a kernel: pointers into the held entry when one entry holds all its tokens
  // with exactly its heads (rows [tokens, heads, d] are then contiguous; an LSE row is strided by
  // the entry's tokens), else copied out of the entries into `xb` / `yb`. Most tiles read a whole
  // slice, so most need no copy, as a GPU kernel reads a THD pack in place.
  struct View {
    const float* x = nullptr;
    const float* y = nullptr;
    int64_t y_stride = 0;  // LSE: elements between heads
  };
  bool view(AttnTensor t, const AttnSlice& want, View& v, std::vector<float>& xb, std::vector<float>* yb) {
    const Shape sh = shape_of(p_, t);
    if (const Entry* e = find(t, want); e && e->slice.head_begin == want.head_begin && e->slice.head_end == want.head_end) {
      const int64_t t0 = want.tok_begin - e->slice.tok_begin, row = (want.heads() / sh.heads_div) * sh.width;
      v.x = e->x.data() + t0 * row;
      if (yb) {
        v.y = sh.lse_second ? e->y.data() + t0 : e->y.data() + t0 * row;
        v.y_stride = e->slice.tokens();
      }
      return true;
    }
    if (!assemble(t, want, xb, yb)) return false;
    v.x = xb.data();
    if (yb) {
      v.y = yb->data();
      v.y_stride = want.tokens();
    }
    return true;
  }

  // A tile's kernel input; the buffers hold what could not be viewed in place.
  struct TileBuffers {
    std::vector<float> q, k, v;
    std::vector<kernels::KeyRanges> ranges;
  };
  kernels::TileInput tile_input(const AttnTile& tile, TileBuffers& b, Status& st) {
    kernels::TileInput in;
    View q, kv;
    const bool has_q = view(AttnTensor::q, tile.q, q, b.q, nullptr);
    if (!has_q || !view(AttnTensor::kv, tile.kv, kv, b.k, &b.v)) {
      st = Error{"", "", "rank " + std::to_string(me_) + " computes a tile whose " + (has_q ? "K/V" : "Q") +
                             " it does not hold (a plan error)"};
      return in;
    }
    const int64_t L = p_.seq_lengths[tile.q.seq];
    b.ranges.resize(static_cast<size_t>(tile.q.tokens()));
    for (int64_t t = 0; t < tile.q.tokens(); ++t) {
      KeyRanges r = mask_row(p_.mask, L, tile.q.tok_begin + t);
      b.ranges[t] = {r.begin0, r.end0, r.begin1, r.end1};
    }
    in.dims = {tile.q.heads(), tile.q.heads() / p_.group(), p_.head_dim, 1.0 / std::sqrt(double(p_.head_dim))};
    in.q = q.x;
    in.rows_q = tile.q.tokens();
    in.ranges = b.ranges.data();
    in.k = kv.x;
    in.v = kv.y;
    in.rows_k = tile.kv.tokens();
    in.key_begin = tile.kv.tok_begin;
    return in;
  }

  // One tile backward: its dQ, dK, dV partials go into the home or return slots that cover them.
  Status run_tile_backward(const AttnTile& tile, ExecutionReport& rep) {
    const Shape qs = shape_of(p_, AttnTensor::q), kvs = shape_of(p_, AttnTensor::kv);
    TileBuffers b;
    Status st = ok_status();
    auto in = tile_input(tile, b, st);
    if (!st) return st;
    std::vector<float> ob, lseb, doutb;
    View o, dout;
    if (!view(AttnTensor::out, tile.q, o, ob, &lseb) || !view(AttnTensor::dout, tile.q, dout, doutb, nullptr))
      return Error{"", "", "rank " + std::to_string(me_) + " lacks O or dO for a backward tile"};
    const size_t q_floats = static_cast<size_t>(tile.q.tokens() * tile.q.heads() * p_.head_dim);
    const size_t kv_floats = static_cast<size_t>(tile.kv.tokens() * (tile.kv.heads() / p_.group()) * p_.head_dim);
    std::vector<float> dq(q_floats, 0.f), dk(kv_floats, 0.f), dv(kv_floats, 0.f);
    auto t0 = Clock::now();
    kernels_.tile_backward(in, o.x, o.y, o.y_stride, dout.x, dq.data(), dk.data(), dv.data());
    rep.compute_s += std::chrono::duration<double>(Clock::now() - t0).count();
    if (!spread(AttnTensor::dq, tile.q, qs, dq.data(), nullptr) ||
        !spread(AttnTensor::dkv, tile.kv, kvs, dk.data(), dv.data()))
      return Error{"", "", "rank " + std::to_string(me_) + ": a backward tile's gradient has no home or return slot"};
    return ok_status();
  }

  // Runs a stage's tiles kRowsPerCall query rows at a time and tests the stage's pending transfers
  // between calls. MPI moves a large (rendezvous) message only while one of its ranks is inside
  // the library; without these tests a transfer posted before the tiles would only start when they
  // end, and the overlap the plan schedules (and the simulator prices) would not happen. Query
  // rows are independent in the forward pass, so the blocks merge into the tile's output as is.
  static constexpr int64_t kRowsPerCall = 256;

  Status run_tiles_forward(const std::vector<AttnTile>& tiles, ExecutionReport& rep, Phase& ph) {
    for (const auto& tile : tiles) {
      TileBuffers b;
      Status st = ok_status();
      auto in = tile_input(tile, b, st);
      if (!st) return st;
      Entry* e = find_exact(AttnTensor::out, tile.q);
      if (!e) e = &fresh(AttnTensor::out, tile.q);
      const int64_t row_floats = in.dims.heads_q * p_.head_dim;
      for (int64_t r0 = 0; r0 < in.rows_q; r0 += kRowsPerCall) {
        kernels::TileInput block = in;
        block.rows_q = std::min(kRowsPerCall, in.rows_q - r0);
        block.q = in.q + r0 * row_floats;
        block.ranges = in.ranges + r0;
        auto t0 = Clock::now();
        kernels::PartialOutput part = kernels_.tile_forward(block);
        rep.compute_s += std::chrono::duration<double>(Clock::now() - t0).count();
        AttnSlice rows = tile.q;
        rows.tok_begin += r0;
        rows.tok_end = rows.tok_begin + block.rows_q;
        merge_out(*e, rows, p_.head_dim, part.out.data(), part.lse.data());
        if (auto st = poll(ph); !st) return st;
      }
    }
    return ok_status();
  }

  const AttentionPlan& p_;
  Communicator& comm_;
  AttentionKernels& kernels_;
  const AttentionInputs& in_;
  std::vector<int64_t> offsets_;
  int32_t me_;
  std::vector<Entry> stores_[6];
  std::vector<Entry> home_out_;  // final O/LSE per home slice
};

Status Rank::forward(ExecutionReport& rep) {
  for (const auto& s : p_.home[me_]) {
    load_home(AttnTensor::q, s, in_.q, {}, p_.heads_q);
    load_home(AttnTensor::kv, s, in_.k, in_.v, p_.heads_kv);
  }
  // Stage i's transfers go out before stage i−1's tiles run.
  const auto forward_tag = [](const AttnTransfer&) { return int{kTagForward}; };
  for (size_t i = 0; i <= p_.stages.size(); ++i) {
    Phase ph;
    if (i < p_.stages.size())
      if (auto s = open(ph, p_.stages[i].transfers, forward_tag); !s) return s;
    if (i > 0 && static_cast<size_t>(me_) < p_.stages[i - 1].tiles.size())
      if (auto s = run_tiles_forward(p_.stages[i - 1].tiles[me_], rep, ph); !s) return s;
    if (auto s = close(ph, rep); !s) return s;
    for (size_t j = 0; j < ph.incoming.size(); ++j)
      store(ph.incoming[j]->tensor).push_back(unpack(*ph.incoming[j], ph.data[ph.slot[j]]));
  }
  // Partials computed away from home come home; home merges everything it has.
  std::vector<Entry> gathered;
  if (auto s = exchange(p_.gather_out, kTagGather, rep,
                        [&](const AttnTransfer&, Entry msg) { gathered.push_back(std::move(msg)); });
      !s)
    return s;
  for (const auto& h : p_.home[me_]) {
    Entry e{h, std::vector<float>(static_cast<size_t>(h.tokens() * h.heads() * p_.head_dim), 0.f),
            std::vector<float>(static_cast<size_t>(h.heads() * h.tokens()), kNegInf)};
    for (const auto& part : store(AttnTensor::out))
      if (h.contains(part.slice)) merge_out(e, part.slice, p_.head_dim, part.x.data(), part.y.data());
    for (const auto& part : gathered)
      if (h.contains(part.slice)) merge_out(e, part.slice, p_.head_dim, part.x.data(), part.y.data());
    home_out_.push_back(std::move(e));
  }
  rep.home.clear();
  for (const auto& e : home_out_) rep.home.push_back({e.slice, e.x, e.y, {}, {}, {}});
  return ok_status();
}

Status Rank::backward(ExecutionReport& rep) {
  // Only home data survives the forward pass, as in a real step; the final O and LSE replace the
  // partials, and dO arrives.
  for (auto& s : stores_) s.clear();
  for (const auto& s : p_.home[me_]) {
    load_home(AttnTensor::q, s, in_.q, {}, p_.heads_q);
    load_home(AttnTensor::kv, s, in_.k, in_.v, p_.heads_kv);
    load_home(AttnTensor::dout, s, in_.dout, {}, p_.heads_q);
    fresh(AttnTensor::dq, s);
    fresh(AttnTensor::dkv, s);
  }
  for (const auto& e : home_out_) store(AttnTensor::out).push_back(e);
  const std::vector<AttnBackwardPhase> phases = backward_phases(p_);
  // One gradient slot per slice this rank returns, beside the home slots: the slots are disjoint
  // and cover every slice a tile touches.
  for (const AttnBackwardPhase& ph : phases)
    for (const AttnTransfer& tr : ph.transfers)
      if (tr.src == me_ && (tr.tensor == AttnTensor::dq || tr.tensor == AttnTensor::dkv)) fresh(tr.tensor, tr.slice);
  // Received inputs are kept; gradients of this rank's slices computed elsewhere are summed home.
  Status lost = ok_status();
  auto take = [&](const AttnTransfer& tr, Entry msg) {
    if (tr.tensor != AttnTensor::dq && tr.tensor != AttnTensor::dkv) return store(tr.tensor).push_back(std::move(msg));
    const Shape sh = shape_of(p_, tr.tensor);
    Entry* e = find(tr.tensor, tr.slice);  // the home entries come first in the store
    if (e) accumulate(*e, tr.slice, sh, msg.x.data(), has_second(tr.tensor) ? msg.y.data() : nullptr);
    else if (lost.ok())
      lost = Error{"", "", "rank " + std::to_string(me_) + " received a " + attn_tensor_name(tr.tensor) +
                               " partial from rank " + std::to_string(tr.src) + " that it has no slot for (a plan error)"};
  };
  // Each phase posts its transfers, runs the backward of its tiles (testing the pending
  // transfers between tiles, as the forward does), then waits.
  const auto backward_tag = [](const AttnTransfer& tr) {
    return int{tr.tensor == AttnTensor::dq || tr.tensor == AttnTensor::dkv ? kTagBackwardOut : kTagBackwardIn};
  };
  for (const AttnBackwardPhase& bp : phases) {
    Phase ph;
    if (auto s = open(ph, bp.transfers, backward_tag); !s) return s;
    if (static_cast<size_t>(me_) < bp.tiles.size())
      for (const auto& tile : bp.tiles[me_]) {
        if (auto s = run_tile_backward(tile, rep); !s) return s;
        if (auto s = poll(ph); !s) return s;
      }
    if (auto s = close(ph, rep); !s) return s;
    for (size_t j = 0; j < ph.incoming.size(); ++j) take(*ph.incoming[j], unpack(*ph.incoming[j], ph.data[ph.slot[j]]));
    if (!lost) return lost;
  }
  for (size_t i = 0; i < p_.home[me_].size(); ++i) {
    const AttnSlice& h = p_.home[me_][i];
    // The home entries were created first, so they are the first entries of each store.
    const Entry& dqe = store(AttnTensor::dq)[i];
    const Entry& dkve = store(AttnTensor::dkv)[i];
    if (!(dqe.slice == h) || !(dkve.slice == h)) return Error{"", "", "executor: home gradient entries out of order"};
    rep.home[i].dq = dqe.x;
    rep.home[i].dk = dkve.x;
    rep.home[i].dv = dkve.y;
  }
  return ok_status();
}

}  // namespace

std::vector<int64_t> packed_offsets(const AttentionPlan& plan) {
  std::vector<int64_t> off(plan.seq_lengths.size() + 1, 0);
  for (size_t i = 0; i < plan.seq_lengths.size(); ++i) off[i + 1] = off[i] + plan.seq_lengths[i];
  return off;
}

Expected<ExecutionReport> execute_attention(const AttentionPlan& plan, Communicator& comm, AttentionKernels& kernels,
                                            const AttentionInputs& in, bool backward) {
  if (comm.size() != plan.ranks)
    return Error{"", "", "the plan needs " + std::to_string(plan.ranks) + " ranks, the communicator has " +
                             std::to_string(comm.size()) + " (run under mpirun -np " + std::to_string(plan.ranks) + ")"};
  const double sent0 = static_cast<double>(comm.bytes_sent()), recv0 = static_cast<double>(comm.bytes_received());
  ExecutionReport rep;
  Rank rank(plan, comm, kernels, in);
  if (auto s = rank.forward(rep); !s) return s.errors();
  if (backward)
    if (auto s = rank.backward(rep); !s) return s.errors();
  rep.bytes_sent = static_cast<double>(comm.bytes_sent()) - sent0;
  rep.bytes_received = static_cast<double>(comm.bytes_received()) - recv0;
  return rep;
}

}  // namespace cpbench
