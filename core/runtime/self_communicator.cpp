// self_communicator.cpp — size-1 Communicator: tag-matched self messages, identity collectives.
#include "core/runtime/self_communicator.h"

#include "core/runtime/copy_receive.h"

#include <algorithm>
#include <cstring>

namespace cpbench {

// MPI matching order (MPI 4.1, sec. 3.5): a send matches the oldest posted receive with its tag,
// a receive the oldest unexpected message with its tag.
struct SelfCommunicator::PendingRecv final : RequestState, CopyReceive {
  std::list<PendingRecv*>* posted = nullptr;  // where this is registered while unmatched
  int tag = 0;

  ~PendingRecv() override {
    if (posted && !done) posted->remove(this);
  }
};

namespace {
struct DoneSend final : RequestState {};
}  // namespace

Expected<std::unique_ptr<RequestState>> SelfCommunicator::do_isend(const void* data,
                                                                   std::size_t count,
                                                                   DataType type, int dest,
                                                                   int tag) {
  const auto* bytes = static_cast<const std::byte*>(data);
  const std::size_t n = count * element_size_bytes(type);
  auto match = std::find_if(posted_.begin(), posted_.end(),
                            [&](const PendingRecv* r) { return r->tag == tag; });
  if (match != posted_.end()) {
    (*match)->deliver(bytes, n);
    posted_.erase(match);
  } else {
    unexpected_.push_back({tag, std::vector<std::byte>(bytes, bytes + n)});  // buffered send
  }
  return std::unique_ptr<RequestState>(std::make_unique<DoneSend>());
}

Expected<std::unique_ptr<RequestState>> SelfCommunicator::do_irecv(void* data, std::size_t count,
                                                                   DataType type, int source,
                                                                   int tag) {
  auto state = std::make_unique<PendingRecv>();
  state->data = static_cast<std::byte*>(data);
  state->capacity_bytes = count * element_size_bytes(type);
  state->tag = tag;
  auto match = std::find_if(unexpected_.begin(), unexpected_.end(),
                            [&](const Message& m) { return m.tag == tag; });
  if (match != unexpected_.end()) {
    state->deliver(match->payload.data(), match->payload.size());
    unexpected_.erase(match);
  } else {
    state->posted = &posted_;
    posted_.push_back(state.get());
  }
  return std::unique_ptr<RequestState>(std::move(state));
}

Expected<bool> SelfCommunicator::do_test(RequestState& base, std::size_t& received_bytes) {
  auto* recv = dynamic_cast<PendingRecv*>(&base);
  if (!recv) return true;
  return recv->result(received_bytes);
}

Status SelfCommunicator::do_wait(RequestState& base, std::chrono::milliseconds, bool& withdrawn,
                                 std::size_t& received_bytes) {
  Expected<bool> done = do_test(base, received_bytes);
  if (!done) return done.errors();
  if (*done) return ok_status();
  withdrawn = true;  // the request's destructor unregisters it
  return runtime_error("no matching send was posted; one rank waits for itself forever");
}

Status SelfCommunicator::do_all_to_allv(const void* send, const std::size_t* send_counts,
                                        const std::size_t* send_displs, void* recv,
                                        const std::size_t* recv_counts,
                                        const std::size_t* recv_displs, DataType type) {
  if (send_counts[0] != recv_counts[0]) {
    return runtime_error("rank 0 sends itself " + std::to_string(send_counts[0]) +
                         " elements but expects " + std::to_string(recv_counts[0]));
  }
  const std::size_t es = element_size_bytes(type);
  if (send_counts[0]) {
    std::memmove(static_cast<std::byte*>(recv) + recv_displs[0] * es,
                 static_cast<const std::byte*>(send) + send_displs[0] * es, send_counts[0] * es);
  }
  return ok_status();
}

Status SelfCommunicator::do_all_gatherv(const void* send, std::size_t send_count, void* recv,
                                        const std::size_t*, const std::size_t* recv_displs,
                                        DataType type) {
  const std::size_t es = element_size_bytes(type);
  if (send_count) {
    std::memmove(static_cast<std::byte*>(recv) + recv_displs[0] * es, send, send_count * es);
  }
  return ok_status();
}

Status SelfCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t block_count,
                                           DataType type, ReduceOp) {
  if (block_count) std::memmove(recv, send, block_count * element_size_bytes(type));
  return ok_status();
}

Status SelfCommunicator::do_all_reduce(void*, std::size_t, DataType, ReduceOp) {
  return ok_status();  // the reduction of one buffer is itself
}

Status SelfCommunicator::do_barrier() { return ok_status(); }

Expected<std::unique_ptr<Communicator>> SelfCommunicator::do_split(int color, int) {
  if (color < 0) return std::unique_ptr<Communicator>();
  return std::unique_ptr<Communicator>(std::make_unique<SelfCommunicator>(world_rank_));
}

}  // namespace cpbench
