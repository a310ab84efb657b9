#include "core/runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
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

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A held piece of data, in the kernels' memory: `x` [tokens, heads_units, width] and, for K/V,
// O/LSE and dK/dV, a second array `y` (V [tokens, heads_units, width]; LSE [heads, tokens]).
struct Entry {
  AttnSlice slice;
  FloatBuffer x, y;
};

struct Shape {
  int32_t heads_div;  // 1 for query-head tensors, g for K/V
  int64_t width;      // d
  bool lse_second;    // y is an LSE [heads, tokens] instead of a second [tokens, heads, d]
  bool second;        // y exists
};

Shape shape_of(const AttentionPlan& p, AttnTensor t) {
  switch (t) {
    case AttnTensor::kv:
    case AttnTensor::dkv: return {p.group(), p.head_dim, false, true};
    case AttnTensor::out: return {1, p.head_dim, true, true};
    default: return {1, p.head_dim, false, false};
  }
}

// Values of x per token of `s`, of x in all, and of y.
int64_t row_values(const AttnSlice& s, const Shape& sh) { return s.heads() / sh.heads_div * sh.width; }
int64_t x_values(const AttnSlice& s, const Shape& sh) { return s.tokens() * row_values(s, sh); }
int64_t y_values(const AttnSlice& s, const Shape& sh) {
  return !sh.second ? 0 : sh.lse_second ? int64_t{s.heads()} * s.tokens() : x_values(s, sh);
}

// Where `part` (inside e.slice) sits in e: the offset and pitch of its x rows, and of its y rows
// (LSE: one row of tokens per head).
struct Place {
  int64_t x_at, x_pitch, y_at, y_pitch;
};
Place place_of(const Entry& e, const AttnSlice& part, const Shape& sh) {
  const int64_t t0 = part.tok_begin - e.slice.tok_begin, pitch = row_values(e.slice, sh);
  const int64_t x_at = t0 * pitch + (part.head_begin - e.slice.head_begin) / sh.heads_div * sh.width;
  if (!sh.lse_second) return {x_at, pitch, x_at, pitch};
  return {x_at, pitch, (part.head_begin - e.slice.head_begin) * e.slice.tokens() + t0, e.slice.tokens()};
}

// The block operations of TensorOps on the part of one entry that lies in another.
class Blocks {
 public:
  explicit Blocks(TensorOps& ops) : ops_(ops) {}

  // An entry of zeros for slice s (for out: O = 0 and LSE = −inf).
  Entry make(const AttnSlice& s, const Shape& sh) {
    Entry e{s, ops_.floats(x_values(s, sh), 0.f), {}};
    if (sh.second) e.y = ops_.floats(y_values(s, sh), sh.lse_second ? kNegInf : 0.f);
    return e;
  }
  // to[part] = from[part], both arrays.
  void copy(const Entry& from, Entry& to, const AttnSlice& part, const Shape& sh) {
    const Place f = place_of(from, part, sh), t = place_of(to, part, sh);
    ops_.copy({to.x.data() + t.x_at, t.x_pitch}, {from.x.data() + f.x_at, f.x_pitch}, part.tokens(),
              row_values(part, sh));
    if (!sh.second) return;
    if (sh.lse_second)
      ops_.copy({to.y.data() + t.y_at, t.y_pitch}, {from.y.data() + f.y_at, f.y_pitch}, part.heads(), part.tokens());
    else
      ops_.copy({to.y.data() + t.y_at, t.y_pitch}, {from.y.data() + f.y_at, f.y_pitch}, part.tokens(),
                row_values(part, sh));
  }
  // to[part] += from[part] (gradients: no LSE).
  void add(const Entry& from, Entry& to, const AttnSlice& part, const Shape& sh) {
    const Place f = place_of(from, part, sh), t = place_of(to, part, sh);
    ops_.add({to.x.data() + t.x_at, t.x_pitch}, {from.x.data() + f.x_at, f.x_pitch}, part.tokens(), row_values(part, sh));
    if (sh.second)
      ops_.add({to.y.data() + t.y_at, t.y_pitch}, {from.y.data() + f.y_at, f.y_pitch}, part.tokens(),
               row_values(part, sh));
  }
  // LSE merge of a partial output (O and LSE of its whole slice) into the rows of `to` it covers.
  void merge(const Entry& part, Entry& to, int64_t head_dim) {
    const Shape sh{1, head_dim, true, true};
    const Place f = place_of(part, part.slice, sh), t = place_of(to, part.slice, sh);
    ops_.merge({{to.x.data() + t.x_at, t.x_pitch},
                {to.y.data() + t.y_at, t.y_pitch},
                {part.x.data() + f.x_at, f.x_pitch},
                {part.y.data() + f.y_at, f.y_pitch},
                part.slice.tokens(),
                part.slice.heads(),
                head_dim});
  }

 private:
  TensorOps& ops_;
};

class Rank {
 public:
  Rank(const AttentionPlan& p, Communicator& c, AttentionKernels& k, const AttentionInputs& in)
      : p_(p), comm_(c), kernels_(k), ops_(k.memory()), blocks_(ops_), in_(in), offsets_(packed_offsets(p)),
        me_(c.rank()) {}

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

  // `want` as an entry of its own, copied out of the entries that hold it, which may be several
  // contiguous pieces (a KV range gathered from several ranks). False when some token of it is
  // held nowhere.
  bool assemble(AttnTensor t, const AttnSlice& want, Entry& out) {
    const Shape sh = shape_of(p_, t);
    out = blocks_.make(want, sh);
    if (const Entry* e = find(t, want)) {
      blocks_.copy(*e, out, want, sh);
      return true;
    }
    std::vector<char> seen(static_cast<size_t>(want.tokens()), 0);
    for_each_piece(t, want, [&](const Entry& e, const AttnSlice& part) {
      blocks_.copy(e, out, part, sh);
      std::fill_n(seen.begin() + (part.tok_begin - want.tok_begin), part.tokens(), 1);
    });
    return std::count(seen.begin(), seen.end(), 1) == want.tokens();
  }

  // Adds a tile's gradient (an entry of the tile's slice) into the disjoint slots that cover it.
  bool spread(AttnTensor t, const Entry& grad) {
    const Shape sh = shape_of(p_, t);
    int64_t covered = 0;
    for_each_piece(t, grad.slice, [&](Entry& e, const AttnSlice& part) {
      blocks_.add(grad, e, part, sh);
      covered += part.tokens();
    });
    return covered == grad.slice.tokens();
  }

  // A new held entry of zeros (or, for out, O = 0 and LSE = −inf) for slice s.
  Entry& fresh(AttnTensor t, const AttnSlice& s) {
    store(t).push_back(blocks_.make(s, shape_of(p_, t)));
    return store(t).back();
  }
  // Loads a home slice (its tokens and heads) of a global host tensor of `heads` heads per token.
  void load_home(AttnTensor t, const AttnSlice& s, std::span<const float> a, std::span<const float> b, int32_t heads) {
    const Shape sh = shape_of(p_, t);
    Entry& e = fresh(t, s);
    const int64_t pitch = heads * sh.width, n = row_values(s, sh);
    const int64_t at = (offsets_[s.seq] + s.tok_begin) * pitch + s.head_begin / sh.heads_div * sh.width;
    ops_.upload({e.x.data(), n}, {a.data() + at, pitch}, s.tokens(), n);
    if (!b.empty()) ops_.upload({e.y.data(), n}, {b.data() + at, pitch}, s.tokens(), n);
  }
  std::vector<float> to_host(const FloatBuffer& b) {
    std::vector<float> v(static_cast<size_t>(b.size()));
    ops_.download(v, b.data());
    return v;
  }

  // ---- messages: one transfer is x's values, then y's (values, or an fp32 LSE for `out`), each
  // value at plan.wire_bytes(t); transfer_bytes(plan, transfer) in all.
  Status encode_into(const AttnTransfer& tr, std::byte* at) {
    const Entry* e = find(tr.tensor, tr.slice);
    if (!e) return Error{"", "", std::string("rank ") + std::to_string(me_) + " does not hold the " +
                                     attn_tensor_name(tr.tensor) + " it must send"};
    const Shape sh = shape_of(p_, tr.tensor);
    Entry cut;
    if (!(e->slice == tr.slice)) {
      cut = blocks_.make(tr.slice, sh);
      blocks_.copy(*e, cut, tr.slice, sh);
      e = &cut;
    }
    const int vb = p_.wire_bytes(tr.tensor);
    const int64_t nx = x_values(tr.slice, sh);
    ops_.encode(at, e->x.data(), nx, vb);
    ops_.encode(at + nx * vb, e->y.data(), y_values(tr.slice, sh), sh.lse_second ? 4 : vb);
    return ok_status();
  }
  Entry decode_from(const AttnTransfer& tr, const std::byte* at) {
    const Shape sh = shape_of(p_, tr.tensor);
    Entry e = blocks_.make(tr.slice, sh);
    const int vb = p_.wire_bytes(tr.tensor);
    const int64_t nx = x_values(tr.slice, sh);
    ops_.decode(e.x.data(), at, nx, vb);
    ops_.decode(e.y.data(), at + nx * vb, y_values(tr.slice, sh), sh.lse_second ? 4 : vb);
    return e;
  }
  int64_t message_bytes(const AttnTransfer& tr) const { return static_cast<int64_t>(transfer_bytes(p_, tr)); }

  // One phase's messages. open() posts every transfer of the list this rank sends or receives,
  // except its relay sends: poll() and close() post those, in list order, once the receive each
  // forwards is done, that receive's bytes being the relay's message. close() waits for all.
  struct Phase {
    // A received transfer's message: `offset` bytes into buffer `data`.
    struct Slot {
      size_t data;
      int64_t offset;
    };
    std::vector<Request> reqs;
    std::vector<ByteBuffer> data;
    std::vector<const AttnTransfer*> incoming;
    std::vector<Slot> slot;        // per incoming
    std::vector<size_t> recv_req;  // per incoming (point-to-point): its request
    struct Relay {
      const AttnTransfer* tr;
      int tag;
      size_t from = 0;  // the incoming it forwards
    };
    std::vector<Relay> relays;
    size_t next_relay = 0;
    // collective_exchange: the phase's all-to-alls, each one message to and from every peer (an
    // empty one included), as NCCL runs PyTorch's all_to_all_single: grouped send/recv with every
    // rank. A received message holds the round's transfers from that peer in list order; each is
    // a slot in it once it has arrived. Relay rounds go out once this rank's direct rounds are in.
    struct Merged {
      size_t req, data;
      std::vector<const AttnTransfer*> transfers;
    };
    std::vector<Merged> merged;
    size_t merged_cut = 0;  // merged[0, merged_cut) are slots in ph.incoming already
    std::vector<std::pair<int, std::vector<const AttnTransfer*>>> relay_rounds;  // (tag, list)
    bool relay_rounds_posted = true;

    const std::byte* message(size_t i) const { return data[slot[i].data].data() + slot[i].offset; }
  };

  // Posts one transfer this rank sends or receives.
  Status post(Phase& ph, const AttnTransfer& tr, int tag) {
    if (tr.src == me_) {
      ByteBuffer msg = ops_.bytes(message_bytes(tr));
      if (auto st = encode_into(tr, msg.data()); !st) return st;
      ph.data.push_back(std::move(msg));
      auto r = comm_.isend(std::span<const std::byte>(ph.data.back().span()), tr.dst, tag);
      if (!r) return r.errors();
      ph.reqs.push_back(std::move(*r));
    }
    if (tr.dst == me_) {
      ph.data.push_back(ops_.bytes(message_bytes(tr)));
      auto r = comm_.irecv(ph.data.back().span(), tr.src, tag);
      if (!r) return r.errors();
      ph.reqs.push_back(std::move(*r));
      ph.incoming.push_back(&tr);
      ph.slot.push_back({ph.data.size() - 1, 0});
      ph.recv_req.push_back(ph.reqs.size() - 1);
    }
    return ok_status();
  }

  // Runs `post` (which posts sends and receives) as one batch of the communicator (NCCL's group).
  template <class Post>
  Status batch(Post post) {
    if (auto st = comm_.group_start(); !st) return st;
    Status st = post();
    Status end = comm_.group_end();
    return !st ? st : end;
  }

  template <class TagOf>
  Status open(Phase& ph, const std::vector<AttnTransfer>& list, TagOf tag_of) {
    if (p_.collective_exchange) return open_all_to_alls(ph, list, tag_of);
    const Status posted = batch([&]() -> Status {
      for (const auto& tr : list) {
        if (tr.src != me_ && tr.dst != me_) continue;
        const int tag = tag_of(tr) + (tr.relay ? kRelayTagOffset : 0);
        if (tr.relay && tr.src == me_) {
          ph.relays.push_back({&tr, tag});
          continue;
        }
        if (auto st = post(ph, tr, tag); !st) return st;
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
  // order (payload(tr, at) writes each one's bytes at `at`), and from every peer what it sends
  // this rank; one batch of the communicator.
  template <class Payload>
  Status post_all_to_all(Phase& ph, int tag, const std::vector<const AttnTransfer*>& round, Payload payload) {
    return batch([&]() -> Status {
      for (int32_t peer = 0; peer < p_.ranks; ++peer) {
        if (peer == me_) continue;
        Phase::Merged in{0, 0, {}};
        int64_t out_bytes = 0, in_bytes = 0;
        for (const AttnTransfer* tr : round) {
          if (tr->src == me_ && tr->dst == peer) out_bytes += message_bytes(*tr);
          if (tr->dst == me_ && tr->src == peer) {
            in.transfers.push_back(tr);
            in_bytes += message_bytes(*tr);
          }
        }
        ByteBuffer out = ops_.bytes(out_bytes);
        int64_t at = 0;
        for (const AttnTransfer* tr : round)
          if (tr->src == me_ && tr->dst == peer) {
            if (auto st = payload(*tr, out.data() + at); !st) return st;
            at += message_bytes(*tr);
          }
        ph.data.push_back(std::move(out));
        auto r = comm_.isend(std::span<const std::byte>(ph.data.back().span()), peer, tag);
        if (!r) return r.errors();
        ph.reqs.push_back(std::move(*r));
        ph.data.push_back(ops_.bytes(in_bytes));
        in.data = ph.data.size() - 1;
        auto q = comm_.irecv(ph.data.back().span(), peer, tag);
        if (!q) return q.errors();
        ph.reqs.push_back(std::move(*q));
        in.req = ph.reqs.size() - 1;
        ph.merged.push_back(std::move(in));
      }
      return ok_status();
    });
  }
  template <class TagOf>
  Status open_all_to_alls(Phase& ph, const std::vector<AttnTransfer>& list, TagOf tag_of) {
    for (const auto& [tag, round] : all_to_all_rounds(list, tag_of, false)) {
      auto st = post_all_to_all(ph, tag, round, [&](const AttnTransfer& tr, std::byte* at) { return encode_into(tr, at); });
      if (!st) return st;
    }
    ph.relay_rounds = all_to_all_rounds(list, tag_of, true);
    ph.relay_rounds_posted = ph.relay_rounds.empty();
    return ok_status();
  }
  // Makes the merged messages not cut yet (all arrived) into slots of their transfers.
  void split_arrived(Phase& ph) {
    for (size_t m = ph.merged_cut; m < ph.merged.size(); ++m) {
      int64_t at = 0;
      for (const AttnTransfer* tr : ph.merged[m].transfers) {
        ph.incoming.push_back(tr);
        ph.slot.push_back({ph.merged[m].data, at});
        at += message_bytes(*tr);
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
      auto st = post_all_to_all(ph, tag, round, [&](const AttnTransfer& tr, std::byte* at) -> Status {
        for (size_t i = 0; i < ph.incoming.size(); ++i)
          if (!ph.incoming[i]->relay && ph.incoming[i]->tensor == tr.tensor && ph.incoming[i]->slice == tr.slice) {
            ops_.copy_bytes(at, ph.message(i), message_bytes(tr));
            return ok_status();
          }
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
      const std::span<const std::byte> msg(ph.message(relay.from), static_cast<size_t>(message_bytes(*relay.tr)));
      auto r = comm_.isend(msg, relay.tr->dst, relay.tag);
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
    rep.wait_s += seconds_since(t0);
    return ok_status();
  }

  // Posts a list of transfers, waits for them, and hands every received message to `take`.
  template <class Take>
  Status exchange(const std::vector<AttnTransfer>& list, int tag, ExecutionReport& rep, Take take) {
    Phase ph;
    if (auto st = open(ph, list, [tag](const AttnTransfer&) { return tag; }); !st) return st;
    if (auto st = close(ph, rep); !st) return st;
    for (size_t i = 0; i < ph.incoming.size(); ++i) take(*ph.incoming[i], decode_from(*ph.incoming[i], ph.message(i)));
    return ok_status();
  }

  // Rows of `want` for a kernel: pointers into the held entry when one entry holds all its tokens
  // with exactly its heads (rows [tokens, heads, d] are then contiguous; an LSE row is strided by
  // the entry's tokens), else into `held`, assembled from the entries. Most tiles read a whole
  // slice, so most need no copy, as a GPU kernel reads a THD pack in place.
  struct View {
    const float* x = nullptr;
    const float* y = nullptr;
    int64_t y_stride = 0;  // LSE: elements between heads
    Entry held;
  };
  bool view(AttnTensor t, const AttnSlice& want, View& v) {
    const Shape sh = shape_of(p_, t);
    if (const Entry* e = find(t, want); e && e->slice.head_begin == want.head_begin && e->slice.head_end == want.head_end) {
      const Place at = place_of(*e, want, sh);
      v.x = e->x.data() + at.x_at;
      if (sh.second) v.y = e->y.data() + at.y_at;
      v.y_stride = e->slice.tokens();
      return true;
    }
    if (!assemble(t, want, v.held)) return false;
    v.x = v.held.x.data();
    v.y = v.held.y.data();
    v.y_stride = want.tokens();
    return true;
  }

  // A tile's kernel input; the views hold what could not be read in place.
  struct TileBuffers {
    View q, kv;
    std::vector<kernels::KeyRanges> ranges;
  };
  kernels::TileInput tile_input(const AttnTile& tile, TileBuffers& b, Status& st) {
    kernels::TileInput in;
    const bool has_q = view(AttnTensor::q, tile.q, b.q);
    if (!has_q || !view(AttnTensor::kv, tile.kv, b.kv)) {
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
    in.q = b.q.x;
    in.rows_q = tile.q.tokens();
    in.ranges = b.ranges.data();
    in.k = b.kv.x;
    in.v = b.kv.y;
    in.rows_k = tile.kv.tokens();
    in.key_begin = tile.kv.tok_begin;
    return in;
  }

  // A stage's forward tiles. Without host progress, one stage_forward call; with it (MPI), each
  // tile kRowsPerCall query rows at a time, testing the stage's pending transfers between calls:
  // MPI moves a large (rendezvous) message only while one of its ranks is inside the library, so
  // without these tests a transfer posted before the tiles would only start when they end, and the
  // overlap the plan schedules (and the simulator prices) would not happen. Query rows are
  // independent in the forward pass, so the blocks merge into the tile's output as is.
  static constexpr int64_t kRowsPerCall = 256;

  Status run_tiles_forward(const std::vector<AttnTile>& tiles, ExecutionReport& rep, Phase& ph) {
    const bool progress = comm_.needs_host_progress();
    const Shape os = shape_of(p_, AttnTensor::out);
    std::vector<TileBuffers> inputs(tiles.size());
    std::vector<ForwardCall> calls;
    std::vector<Entry> partials;     // per call: its rows' O and LSE
    std::vector<size_t> tile_of;     // per call
    for (size_t i = 0; i < tiles.size(); ++i) {
      Status st = ok_status();
      const kernels::TileInput in = tile_input(tiles[i], inputs[i], st);
      if (!st) return st;
      if (!find_exact(AttnTensor::out, tiles[i].q)) fresh(AttnTensor::out, tiles[i].q);
      const int64_t rows_per_call = progress ? kRowsPerCall : std::max<int64_t>(in.rows_q, 1);
      for (int64_t r0 = 0; r0 < in.rows_q; r0 += rows_per_call) {
        ForwardCall c{in};
        c.tile.rows_q = std::min(rows_per_call, in.rows_q - r0);
        c.tile.q = in.q + r0 * in.dims.heads_q * p_.head_dim;
        c.tile.ranges = in.ranges + r0;
        AttnSlice rows = tiles[i].q;
        rows.tok_begin += r0;
        rows.tok_end = rows.tok_begin + c.tile.rows_q;
        partials.push_back(blocks_.make(rows, os));
        c.out = partials.back().x.data();
        c.lse = partials.back().y.data();
        calls.push_back(c);
        tile_of.push_back(i);
      }
    }
    return run_calls(calls, &AttentionKernels::stage_forward, &AttentionKernels::tile_forward, ph, rep, [&](size_t c) {
      blocks_.merge(partials[c], *find_exact(AttnTensor::out, tiles[tile_of[c]].q), p_.head_dim);
      return ok_status();
    });
  }

  // A phase's backward tiles, as the forward's (one stage_backward call, or tile by tile testing
  // the pending transfers between tiles). Each tile's dQ, dK, dV partials go into the home or
  // return slots that cover them.
  Status run_tiles_backward(const std::vector<AttnTile>& tiles, ExecutionReport& rep, Phase& ph) {
    const Shape qs = shape_of(p_, AttnTensor::q), kvs = shape_of(p_, AttnTensor::kv);
    std::vector<TileBuffers> inputs(tiles.size());
    std::vector<View> outs(tiles.size()), douts(tiles.size());
    std::vector<Entry> dqs, dkvs;
    std::vector<BackwardCall> calls;
    for (size_t i = 0; i < tiles.size(); ++i) {
      Status st = ok_status();
      const kernels::TileInput in = tile_input(tiles[i], inputs[i], st);
      if (!st) return st;
      if (!view(AttnTensor::out, tiles[i].q, outs[i]) || !view(AttnTensor::dout, tiles[i].q, douts[i]))
        return Error{"", "", "rank " + std::to_string(me_) + " lacks O or dO for a backward tile"};
      dqs.push_back(blocks_.make(tiles[i].q, qs));
      dkvs.push_back(blocks_.make(tiles[i].kv, kvs));
      calls.push_back({in, outs[i].x, outs[i].y, outs[i].y_stride, douts[i].x, dqs.back().x.data(),
                       dkvs.back().x.data(), dkvs.back().y.data()});
    }
    return run_calls(calls, &AttentionKernels::stage_backward, &AttentionKernels::tile_backward, ph, rep, [&](size_t i) {
      if (!spread(AttnTensor::dq, dqs[i]) || !spread(AttnTensor::dkv, dkvs[i]))
        return Status(Error{"", "", "rank " + std::to_string(me_) + ": a backward tile's gradient has no home or return slot"});
      return ok_status();
    });
  }

  // Runs a stage's kernel calls: all at once (`stage`) when the Communicator needs no host
  // progress, else one by one (`tile`), testing the phase's pending transfers after each.
  // `take(c)` takes call c's result, in call order either way.
  template <class Call, class Take>
  Status run_calls(const std::vector<Call>& calls, void (AttentionKernels::*stage)(std::span<const Call>),
                   void (AttentionKernels::*tile)(const Call&), Phase& ph, ExecutionReport& rep, Take take) {
    const bool progress = comm_.needs_host_progress();
    if (!progress) {
      const auto t0 = Clock::now();
      (kernels_.*stage)(calls);
      rep.compute_s += seconds_since(t0);
    }
    for (size_t c = 0; c < calls.size(); ++c) {
      if (progress) {
        const auto t0 = Clock::now();
        (kernels_.*tile)(calls[c]);
        rep.compute_s += seconds_since(t0);
      }
      if (auto st = take(c); !st) return st;
      if (progress)
        if (auto st = poll(ph); !st) return st;
    }
    return ok_status();
  }

  const AttentionPlan& p_;
  Communicator& comm_;
  AttentionKernels& kernels_;
  TensorOps& ops_;
  Blocks blocks_;
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
      store(ph.incoming[j]->tensor).push_back(decode_from(*ph.incoming[j], ph.message(j)));
  }
  // Partials computed away from home come home; home merges everything it has.
  std::vector<Entry> gathered;
  if (auto s = exchange(p_.gather_out, kTagGather, rep,
                        [&](const AttnTransfer&, Entry msg) { gathered.push_back(std::move(msg)); });
      !s)
    return s;
  const Shape os = shape_of(p_, AttnTensor::out);
  for (const auto& h : p_.home[me_]) {
    Entry e = blocks_.make(h, os);
    for (const auto& part : store(AttnTensor::out))
      if (h.contains(part.slice)) blocks_.merge(part, e, p_.head_dim);
    for (const auto& part : gathered)
      if (h.contains(part.slice)) blocks_.merge(part, e, p_.head_dim);
    home_out_.push_back(std::move(e));
  }
  rep.home.clear();
  for (const auto& e : home_out_) rep.home.push_back({e.slice, to_host(e.x), to_host(e.y), {}, {}, {}});
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
    Entry* e = find(tr.tensor, tr.slice);  // the home entries come first in the store
    if (e) blocks_.add(msg, *e, tr.slice, shape_of(p_, tr.tensor));
    else if (lost.ok())
      lost = Error{"", "", "rank " + std::to_string(me_) + " received a " + attn_tensor_name(tr.tensor) +
                               " partial from rank " + std::to_string(tr.src) + " that it has no slot for (a plan error)"};
  };
  // Each phase posts its transfers, runs the backward of its tiles, then waits.
  const auto backward_tag = [](const AttnTransfer& tr) {
    return int{tr.tensor == AttnTensor::dq || tr.tensor == AttnTensor::dkv ? kTagBackwardOut : kTagBackwardIn};
  };
  for (const AttnBackwardPhase& bp : phases) {
    Phase ph;
    if (auto s = open(ph, bp.transfers, backward_tag); !s) return s;
    if (static_cast<size_t>(me_) < bp.tiles.size())
      if (auto s = run_tiles_backward(bp.tiles[me_], rep, ph); !s) return s;
    if (auto s = close(ph, rep); !s) return s;
    for (size_t j = 0; j < ph.incoming.size(); ++j) take(*ph.incoming[j], decode_from(*ph.incoming[j], ph.message(j)));
    if (!lost) return lost;
  }
  for (size_t i = 0; i < p_.home[me_].size(); ++i) {
    const AttnSlice& h = p_.home[me_][i];
    // The home entries were created first, so they are the first entries of each store.
    const Entry& dqe = store(AttnTensor::dq)[i];
    const Entry& dkve = store(AttnTensor::dkv)[i];
    if (!(dqe.slice == h) || !(dkve.slice == h)) return Error{"", "", "executor: home gradient entries out of order"};
    rep.home[i].dq = to_host(dqe.x);
    rep.home[i].dk = to_host(dkve.x);
    rep.home[i].dv = to_host(dkve.y);
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
  kernels.take_kernel_seconds();  // what earlier runs left on the device's clock is not this run's
  Rank rank(plan, comm, kernels, in);
  if (auto s = rank.forward(rep); !s) return s.errors();
  if (backward)
    if (auto s = rank.backward(rep); !s) return s.errors();
  // A device's own timing of the kernels replaces the host's clock around their launches.
  if (const std::optional<double> device = kernels.take_kernel_seconds()) rep.compute_s = *device;
  rep.bytes_sent = static_cast<double>(comm.bytes_sent()) - sent0;
  rep.bytes_received = static_cast<double>(comm.bytes_received()) - recv0;
  return rep;
}

}  // namespace cpbench
