// thread_communicator.cpp — ranks as threads: per-destination queues under one mutex, buffered
// sends, receives matched per (source, tag) in posting order, collectives over the same queues.
#include "core/runtime/thread_communicator.h"

#include "core/runtime/copy_receive.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <list>
#include <map>
#include <mutex>
#include <thread>

namespace cpbench {
namespace {

// User messages and collective messages never match each other, as MPI keeps a communicator's
// collectives apart from its point-to-point traffic.
enum Context : int { kUser = 0, kCollective = 1 };

struct Message {
  int source, context, tag;
  std::vector<std::byte> payload;
};

}  // namespace

class ThreadFabric {
 public:
  ThreadFabric(int n, MemoryCopy copy_fn) : boxes(static_cast<size_t>(n)), copy(std::move(copy_fn)) {}

  // What waits at one destination rank: sends nobody has posted a receive for yet, oldest first,
  // and receives no send has matched yet, oldest first.
  struct Box {
    std::deque<Message> unexpected;
    std::list<ThreadCommunicator::PendingRecv*> posted;
  };

  std::mutex mu;
  std::condition_variable arrived;  // notified on every delivery
  std::vector<Box> boxes;
  MemoryCopy copy;  // how the ranks' own buffers are read and written (empty: memcpy)
  // Groups made by split(): (split number, color) -> the new group's fabric and how many of its
  // ranks have yet to pick it up.
  std::map<std::pair<int, int>, std::pair<std::shared_ptr<ThreadFabric>, int>> children;
};

struct ThreadCommunicator::PendingRecv final : RequestState, CopyReceive {
  ThreadFabric* fabric = nullptr;
  int dest = 0, source = 0, tag = 0;
  bool posted = false;  // registered in fabric->boxes[dest].posted (under fabric->mu)

  // deliver() and result() run under fabric->mu.
  ~PendingRecv() override {
    std::lock_guard<std::mutex> lock(fabric->mu);
    if (posted) fabric->boxes[static_cast<size_t>(dest)].posted.remove(this);
  }
};

namespace {

struct DoneSend final : RequestState {};

template <class T>
void reduce_into(T* acc, const T* x, std::size_t count, ReduceOp op) {
  for (std::size_t i = 0; i < count; ++i) acc[i] = op == ReduceOp::kSum ? acc[i] + x[i] : std::max(acc[i], x[i]);
}

// acc op= x, elementwise, `count` values of `type`.
void reduce_bytes(void* acc, const void* x, std::size_t count, DataType type, ReduceOp op) {
  if (type == DataType::kFloat64)
    reduce_into(static_cast<double*>(acc), static_cast<const double*>(x), count, op);
  else
    reduce_into(static_cast<float*>(acc), static_cast<const float*>(x), count, op);
}

std::vector<std::byte> bytes_of(const void* p, std::size_t n) {
  const auto* b = static_cast<const std::byte*>(p);
  return std::vector<std::byte>(b, b + n);
}

// Puts a message at `dest`: into the oldest posted receive it matches, else the unexpected queue.
// A user message's `data` is the sender's own buffer (read through the fabric's copy), a
// collective's is host memory. Under fabric.mu.
Status deliver_locked(ThreadFabric& f, int source, int dest, int context, int tag, const std::byte* data,
                      std::size_t bytes) {
  ThreadFabric::Box& box = f.boxes[static_cast<size_t>(dest)];
  if (context == kUser) {
    auto match = std::find_if(box.posted.begin(), box.posted.end(), [&](const ThreadCommunicator::PendingRecv* r) {
      return r->source == source && r->tag == tag;
    });
    if (match != box.posted.end()) {
      (*match)->deliver(data, bytes, f.copy);
      (*match)->posted = false;
      box.posted.erase(match);
      f.arrived.notify_all();
      return ok_status();
    }
  }
  Message m{source, context, tag, std::vector<std::byte>(bytes)};
  if (Status s = copy_memory(context == kUser ? f.copy : MemoryCopy{}, m.payload.data(), data, bytes); !s) return s;
  box.unexpected.push_back(std::move(m));
  f.arrived.notify_all();
  return ok_status();
}

}  // namespace

std::vector<std::unique_ptr<ThreadCommunicator>> ThreadCommunicator::group(int n, MemoryCopy copy) {
  auto fabric = std::make_shared<ThreadFabric>(n, std::move(copy));
  std::vector<int> world(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) world[static_cast<size_t>(r)] = r;
  std::vector<std::unique_ptr<ThreadCommunicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::unique_ptr<ThreadCommunicator>(new ThreadCommunicator(fabric, r, world)));
  return out;
}

ThreadCommunicator::~ThreadCommunicator() = default;

int ThreadCommunicator::world_rank_of(int rank) const {
  return rank >= 0 && rank < size() ? world_ranks_[static_cast<size_t>(rank)] : -1;
}

Expected<std::unique_ptr<RequestState>> ThreadCommunicator::do_isend(const void* data, std::size_t count,
                                                                     DataType type, int dest, int tag) {
  std::lock_guard<std::mutex> lock(fabric_->mu);
  if (Status s = deliver_locked(*fabric_, rank_, dest, kUser, tag, static_cast<const std::byte*>(data),
                                count * element_size_bytes(type));
      !s)
    return s.errors();
  return std::unique_ptr<RequestState>(std::make_unique<DoneSend>());
}

Expected<std::unique_ptr<RequestState>> ThreadCommunicator::do_irecv(void* data, std::size_t count, DataType type,
                                                                     int source, int tag) {
  auto state = std::make_unique<PendingRecv>();
  state->fabric = fabric_.get();
  state->dest = rank_;
  state->source = source;
  state->tag = tag;
  state->data = static_cast<std::byte*>(data);
  state->capacity_bytes = count * element_size_bytes(type);
  std::lock_guard<std::mutex> lock(fabric_->mu);
  ThreadFabric::Box& box = fabric_->boxes[static_cast<size_t>(rank_)];
  auto match = std::find_if(box.unexpected.begin(), box.unexpected.end(), [&](const Message& m) {
    return m.context == kUser && m.source == source && m.tag == tag;
  });
  if (match != box.unexpected.end()) {
    state->deliver(match->payload.data(), match->payload.size(), fabric_->copy);
    box.unexpected.erase(match);
  } else {
    state->posted = true;
    box.posted.push_back(state.get());
  }
  return std::unique_ptr<RequestState>(std::move(state));
}

Expected<bool> ThreadCommunicator::do_test(RequestState& base, std::size_t& received_bytes) {
  auto* recv = dynamic_cast<PendingRecv*>(&base);
  if (!recv) return true;
  std::lock_guard<std::mutex> lock(fabric_->mu);
  return recv->result(received_bytes);
}

Status ThreadCommunicator::do_wait(RequestState& base, std::chrono::milliseconds timeout, bool& withdrawn,
                                   std::size_t& received_bytes) {
  auto* recv = dynamic_cast<PendingRecv*>(&base);
  if (!recv) return ok_status();
  {
    std::unique_lock<std::mutex> lock(fabric_->mu);
    if (!fabric_->arrived.wait_until(lock, deadline_after(timeout), [&] { return recv->done; })) {
      fabric_->boxes[static_cast<size_t>(rank_)].posted.remove(recv);
      recv->posted = false;
      withdrawn = true;
      return runtime_error("timed out after " + std::to_string(timeout.count()) + " ms waiting for its message");
    }
  }
  auto done = do_test(base, received_bytes);
  return done ? ok_status() : Status(done.errors());
}

Status ThreadCommunicator::exchange(const std::vector<std::vector<std::byte>>& out,
                                    std::vector<std::vector<std::byte>>& in) {
  const int n = size();
  in.assign(static_cast<size_t>(n), {});
  std::unique_lock<std::mutex> lock(fabric_->mu);
  for (int r = 0; r < n; ++r)
    if (r != rank_) {
      const auto& m = out[static_cast<size_t>(r)];
      if (Status s = deliver_locked(*fabric_, rank_, r, kCollective, 0, m.data(), m.size()); !s) return s;
    }
  in[static_cast<size_t>(rank_)] = out[static_cast<size_t>(rank_)];
  // Takes the oldest collective message from each peer: the messages of one pair stay in order,
  // so consecutive collectives cannot mix.
  ThreadFabric::Box& box = fabric_->boxes[static_cast<size_t>(rank_)];
  auto take = [&](int source) {
    auto m = std::find_if(box.unexpected.begin(), box.unexpected.end(),
                          [&](const Message& x) { return x.context == kCollective && x.source == source; });
    if (m == box.unexpected.end()) return false;
    in[static_cast<size_t>(source)] = std::move(m->payload);
    box.unexpected.erase(m);
    return true;
  };
  const auto deadline = deadline_after(timeout());
  std::string absent;
  for (int r = 0; r < n; ++r) {
    if (r == rank_) continue;
    if (fabric_->arrived.wait_until(lock, deadline, [&] { return take(r); })) continue;
    absent += (absent.empty() ? "" : ", ") + describe_peer(r);
  }
  if (!absent.empty())
    return runtime_error("timed out after " + std::to_string(timeout().count()) +
                         " ms waiting for the other ranks of the group to join; no answer from " + absent);
  return ok_status();
}

Status ThreadCommunicator::read_user(std::vector<std::byte>& into, const void* user, std::size_t bytes) const {
  into.resize(bytes);
  return copy_memory(fabric_->copy, into.data(), user, bytes);
}

Status ThreadCommunicator::write_user(void* user, const std::byte* host, std::size_t bytes) const {
  return copy_memory(fabric_->copy, user, host, bytes);
}

Status ThreadCommunicator::do_all_to_allv(const void* send, const std::size_t* send_counts,
                                          const std::size_t* send_displs, void* recv, const std::size_t* recv_counts,
                                          const std::size_t* recv_displs, DataType type) {
  const std::size_t es = element_size_bytes(type);
  const auto* s = static_cast<const std::byte*>(send);
  std::vector<std::vector<std::byte>> out(static_cast<size_t>(size())), in;
  for (int r = 0; r < size(); ++r)
    if (Status st = read_user(out[static_cast<size_t>(r)], s + send_displs[r] * es, send_counts[r] * es); !st) return st;
  if (Status st = exchange(out, in); !st) return st;
  for (int r = 0; r < size(); ++r) {
    const auto& m = in[static_cast<size_t>(r)];
    if (m.size() != recv_counts[r] * es)
      return runtime_error(describe_peer(r) + " sent " + std::to_string(m.size() / es) + " elements, recv_counts[" +
                           std::to_string(r) + "] is " + std::to_string(recv_counts[r]));
    if (Status st = write_user(static_cast<std::byte*>(recv) + recv_displs[r] * es, m.data(), m.size()); !st) return st;
  }
  return ok_status();
}

Status ThreadCommunicator::do_all_gatherv(const void* send, std::size_t send_count, void* recv,
                                          const std::size_t* recv_counts, const std::size_t* recv_displs,
                                          DataType type) {
  const std::size_t es = element_size_bytes(type);
  std::vector<std::byte> mine;
  if (Status st = read_user(mine, send, send_count * es); !st) return st;
  std::vector<std::vector<std::byte>> out(static_cast<size_t>(size()), mine), in;
  if (Status st = exchange(out, in); !st) return st;
  for (int r = 0; r < size(); ++r) {
    const auto& m = in[static_cast<size_t>(r)];
    if (m.size() != recv_counts[r] * es)
      return runtime_error(describe_peer(r) + " contributed " + std::to_string(m.size() / es) +
                           " elements, recv_counts[" + std::to_string(r) + "] is " + std::to_string(recv_counts[r]));
    if (Status st = write_user(static_cast<std::byte*>(recv) + recv_displs[r] * es, m.data(), m.size()); !st) return st;
  }
  return ok_status();
}

Status ThreadCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t block_count, DataType type,
                                             ReduceOp op) {
  const std::size_t block = block_count * element_size_bytes(type);
  std::vector<std::vector<std::byte>> out(static_cast<size_t>(size())), in;
  for (int r = 0; r < size(); ++r)
    if (Status st = read_user(out[static_cast<size_t>(r)], static_cast<const std::byte*>(send) + r * block, block); !st)
      return st;
  if (Status st = exchange(out, in); !st) return st;
  // Rank order, on every rank: the same sum whichever rank computes it.
  std::vector<std::byte> acc = std::move(in[0]);
  for (int r = 1; r < size(); ++r) reduce_bytes(acc.data(), in[static_cast<size_t>(r)].data(), block_count, type, op);
  return write_user(recv, acc.data(), block);
}

Status ThreadCommunicator::do_all_reduce(void* data, std::size_t count, DataType type, ReduceOp op) {
  const std::size_t bytes = count * element_size_bytes(type);
  std::vector<std::byte> mine;
  if (Status st = read_user(mine, data, bytes); !st) return st;
  std::vector<std::vector<std::byte>> out(static_cast<size_t>(size()), mine), in;
  if (Status st = exchange(out, in); !st) return st;
  std::vector<std::byte> acc = std::move(in[0]);
  for (int r = 1; r < size(); ++r) reduce_bytes(acc.data(), in[static_cast<size_t>(r)].data(), count, type, op);
  return write_user(data, acc.data(), bytes);
}

Status ThreadCommunicator::do_barrier() {
  std::vector<std::vector<std::byte>> out(static_cast<size_t>(size())), in;
  return exchange(out, in);
}

Expected<std::unique_ptr<Communicator>> ThreadCommunicator::do_split(int color, int key) {
  const int mine[2] = {color, key};
  std::vector<std::vector<std::byte>> out(static_cast<size_t>(size()), bytes_of(mine, sizeof mine)), in;
  if (Status st = exchange(out, in); !st) return st.errors();
  const int split = splits_++;
  if (color < 0) return std::unique_ptr<Communicator>();
  // Members of this color ordered by (key, rank), as MPI_Comm_split orders them.
  std::vector<std::pair<int, int>> members;  // (key, rank)
  for (int r = 0; r < size(); ++r) {
    int theirs[2];
    std::memcpy(theirs, in[static_cast<size_t>(r)].data(), sizeof theirs);
    if (theirs[0] == color) members.push_back({theirs[1], r});
  }
  std::sort(members.begin(), members.end());
  std::vector<int> world;
  int new_rank = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    world.push_back(world_ranks_[static_cast<size_t>(members[i].second)]);
    if (members[i].second == rank_) new_rank = static_cast<int>(i);
  }
  std::shared_ptr<ThreadFabric> child;
  {
    std::lock_guard<std::mutex> lock(fabric_->mu);
    auto [it, fresh] = fabric_->children.try_emplace({split, color});
    if (fresh) it->second = {std::make_shared<ThreadFabric>(static_cast<int>(members.size()), fabric_->copy),
                             static_cast<int>(members.size())};
    child = it->second.first;
    if (--it->second.second == 0) fabric_->children.erase(it);
  }
  return std::unique_ptr<Communicator>(new ThreadCommunicator(std::move(child), new_rank, std::move(world)));
}

std::vector<Status> run_thread_ranks(int n, const std::function<Status(Communicator&)>& fn,
                                     std::chrono::milliseconds timeout, MemoryCopy copy) {
  auto comms = ThreadCommunicator::group(n, std::move(copy));
  std::vector<Status> result(static_cast<size_t>(n), ok_status());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    comms[static_cast<size_t>(r)]->set_timeout(timeout);
    threads.emplace_back([&, r] {
      try {
        result[static_cast<size_t>(r)] = fn(*comms[static_cast<size_t>(r)]);
      } catch (const std::exception& e) {
        result[static_cast<size_t>(r)] = runtime_error("rank " + std::to_string(r) + " threw: " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  return result;
}

}  // namespace cpbench
