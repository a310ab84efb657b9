// nccl_communicator.cu — the Communicator over NCCL (nccl_communicator.h says what it promises).
#include "core/runtime/cuda/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

namespace cpbench {
namespace {

ncclComm_t as_comm(void* c) { return static_cast<ncclComm_t>(c); }
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::kByte: return ncclInt8;
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
  }
  return ncclInt8;
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

std::string cuda_error(cudaError_t e, const char* what) { return std::string(what) + ": " + cudaGetErrorString(e); }

// Whether the host may not read `p` directly: device (or managed) memory, as CudaTensorOps makes.
bool on_device(const void* p) {
  if (!p) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // a plain host pointer on older runtimes: clear the sticky-free error
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// A caller's buffer as the device sees it: the buffer itself when it is device memory, else a
// device copy made on the stream (filled from the host when `in`) that finish() writes back (when
// `out`) and frees, once the stream has run the operation.
class DeviceView {
 public:
  static Expected<DeviceView> of(const void* p, std::size_t bytes, bool in, cudaStream_t s) {
    DeviceView v;
    v.host_ = const_cast<void*>(p);
    v.bytes_ = bytes;
    if (bytes == 0 || on_device(p)) {
      v.device_ = v.host_;
      return v;
    }
    if (cudaError_t e = cudaMallocAsync(&v.device_, bytes, s); e != cudaSuccess)
      return runtime_error(cuda_error(e, "cudaMallocAsync (staging a host buffer)"));
    v.owned_ = true;
    if (in)
      if (cudaError_t e = cudaMemcpyAsync(v.device_, p, bytes, cudaMemcpyHostToDevice, s); e != cudaSuccess)
        return runtime_error(cuda_error(e, "cudaMemcpyAsync (host to device)"));
    return v;
  }
  void* device() const { return device_; }
  // After the stream ran the operation: the result back to the host buffer (when `out`), the copy freed.
  Status finish(bool out, cudaStream_t s) {
    if (!owned_) return ok_status();
    owned_ = false;
    if (out)
      if (cudaError_t e = cudaMemcpyAsync(host_, device_, bytes_, cudaMemcpyDeviceToHost, s); e != cudaSuccess)
        return runtime_error(cuda_error(e, "cudaMemcpyAsync (device to host)"));
    cudaFreeAsync(device_, s);
    if (cudaError_t e = cudaStreamSynchronize(s); e != cudaSuccess) return runtime_error(cuda_error(e, "cudaStreamSynchronize"));
    return ok_status();
  }

 private:
  void* host_ = nullptr;
  void* device_ = nullptr;
  std::size_t bytes_ = 0;
  bool owned_ = false;
};

// Waits for NCCL's non-blocking initialisation of `comm` (ncclInProgress until it is done).
Status await_init(ncclComm_t comm, std::chrono::milliseconds timeout, const char* what) {
  const auto deadline = deadline_after(timeout);
  ncclResult_t state = ncclInProgress;
  while (true) {
    if (ncclResult_t r = ncclCommGetAsyncError(comm, &state); r != ncclSuccess) state = r;
    if (state != ncclInProgress) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ncclCommAbort(comm);
      return runtime_error(std::string(what) + ": NCCL did not finish initialising within " +
                           std::to_string(timeout.count()) + " ms (is every rank of the group creating it?)");
    }
    std::this_thread::yield();
  }
  if (state != ncclSuccess) {
    ncclCommAbort(comm);
    return runtime_error(std::string(what) + ": " + ncclGetErrorString(state));
  }
  return ok_status();
}

}  // namespace

// The operations of one batch and the event after them on the stream: done when it is.
struct NcclCommunicator::Batch {
  cudaEvent_t done = nullptr;
  ~Batch() {
    if (done) cudaEventDestroy(done);
  }
};

namespace {

// One send or receive: its batch, and for a receive into host memory the device copy it lands in.
struct NcclRequest final : RequestState {
  std::shared_ptr<NcclCommunicator::Batch> batch;
  int peer = 0;
  bool receive = false;
  std::size_t bytes = 0;
  std::shared_ptr<DeviceView> staged;  // a host buffer's device copy (written back when done)
};

}  // namespace

Expected<NcclCommunicator::UniqueId> NcclCommunicator::new_unique_id() {
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
    return runtime_error(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
  UniqueId out;
  static_assert(sizeof(id.internal) == std::tuple_size_v<UniqueId>);
  std::memcpy(out.data(), id.internal, out.size());
  return out;
}

Expected<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(const UniqueId& id, int rank, int size,
                                                                     std::vector<int> world_ranks, void* stream,
                                                                     std::chrono::milliseconds timeout) {
  ncclUniqueId uid;
  std::memcpy(uid.internal, id.data(), id.size());
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // deadlines: every call returns, and a hung peer is found by polling
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, size, uid, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress)
    return runtime_error(std::string("ncclCommInitRankConfig: ") + ncclGetErrorString(r));
  if (Status s = await_init(comm, timeout, "ncclCommInitRankConfig"); !s) return s.errors();
  if (world_ranks.size() != static_cast<std::size_t>(size)) {
    world_ranks.resize(static_cast<std::size_t>(size));
    for (int i = 0; i < size; ++i) world_ranks[static_cast<std::size_t>(i)] = i;
  }
  auto out = std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, rank, size, std::move(world_ranks), stream));
  out->set_timeout(timeout);
  return Expected<std::unique_ptr<NcclCommunicator>>(std::move(out));
}

Expected<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(Communicator& bootstrap, void* stream) {
  UniqueId mine{};
  if (bootstrap.rank() == 0) {
    auto id = new_unique_id();
    if (!id) return id.errors();
    mine = *id;
  }
  std::vector<char> all(mine.size() * static_cast<std::size_t>(bootstrap.size()));
  if (Status s = bootstrap.all_gather(std::as_bytes(std::span<const char>(mine.data(), mine.size())),
                                      std::as_writable_bytes(std::span<char>(all)));
      !s)
    return s.errors();
  UniqueId id;
  std::copy_n(all.begin(), id.size(), id.begin());  // rank 0's
  std::vector<int> world(static_cast<std::size_t>(bootstrap.size()));
  for (int r = 0; r < bootstrap.size(); ++r) world[static_cast<std::size_t>(r)] = bootstrap.world_rank_of(r);
  return create(id, bootstrap.rank(), bootstrap.size(), std::move(world), stream, bootstrap.timeout());
}

NcclCommunicator::~NcclCommunicator() {
  if (!comm_) return;  // aborted after a failure
  // A non-blocking communicator is finalized (its outstanding operations flushed, polled within the
  // deadline), then destroyed; one that does not finish in time is aborted.
  cudaStreamSynchronize(as_stream(stream_));
  if (settle(ncclCommFinalize(as_comm(comm_)), "ncclCommFinalize")) ncclCommDestroy(as_comm(comm_));
}

int NcclCommunicator::world_rank_of(int rank) const {
  return rank >= 0 && rank < size_ ? world_ranks_[static_cast<std::size_t>(rank)] : -1;
}

Status NcclCommunicator::abort(const std::string& why) {
  if (comm_) {
    ncclCommAbort(as_comm(comm_));
    comm_ = nullptr;
  }
  return runtime_error(why + " (NCCL communicator aborted)");
}

Status NcclCommunicator::settle(int result, const char* what) {
  if (!comm_) return runtime_error(std::string(what) + ": the NCCL communicator was aborted after an earlier failure");
  ncclResult_t r = static_cast<ncclResult_t>(result);
  if (r == ncclSuccess) return ok_status();
  if (r != ncclInProgress) return abort(std::string(what) + ": " + ncclGetErrorString(r));
  const auto deadline = deadline_after(timeout());
  while (true) {
    ncclResult_t state = ncclInProgress;
    if (ncclResult_t q = ncclCommGetAsyncError(as_comm(comm_), &state); q != ncclSuccess) state = q;
    if (state == ncclSuccess) return ok_status();
    if (state != ncclInProgress) return abort(std::string(what) + ": " + ncclGetErrorString(state));
    if (std::chrono::steady_clock::now() > deadline)
      return abort(std::string(what) + ": not issued within " + std::to_string(timeout().count()) + " ms");
    std::this_thread::yield();
  }
}

Status NcclCommunicator::synchronize(const char* what) {
  const auto deadline = deadline_after(timeout());
  while (true) {
    const cudaError_t q = cudaStreamQuery(as_stream(stream_));
    if (q == cudaSuccess) return ok_status();
    if (q != cudaErrorNotReady) return abort(cuda_error(q, what));
    ncclResult_t state = ncclSuccess;
    if (comm_ && ncclCommGetAsyncError(as_comm(comm_), &state) == ncclSuccess && state != ncclSuccess &&
        state != ncclInProgress)
      return abort(std::string(what) + ": " + ncclGetErrorString(state));
    if (std::chrono::steady_clock::now() > deadline)
      return abort(std::string(what) + ": timed out after " + std::to_string(timeout().count()) + " ms waiting for " +
                   describe_group() + " to join");
    std::this_thread::yield();
  }
}

std::shared_ptr<NcclCommunicator::Batch> NcclCommunicator::batch() { return open_ ? open_ : std::make_shared<Batch>(); }

Status NcclCommunicator::close_batch(const std::shared_ptr<Batch>& b) {
  if (Status s = settle(ncclGroupEnd(), "ncclGroupEnd"); !s) return s;
  if (cudaError_t e = cudaEventCreateWithFlags(&b->done, cudaEventDisableTiming); e != cudaSuccess)
    return abort(cuda_error(e, "cudaEventCreateWithFlags"));
  if (cudaError_t e = cudaEventRecord(b->done, as_stream(stream_)); e != cudaSuccess)
    return abort(cuda_error(e, "cudaEventRecord"));
  return ok_status();
}

Status NcclCommunicator::do_group_start() {
  open_ = std::make_shared<Batch>();
  return settle(ncclGroupStart(), "ncclGroupStart");
}

Status NcclCommunicator::do_group_end() {
  std::shared_ptr<Batch> b = std::move(open_);
  open_.reset();
  return close_batch(b);
}

Expected<std::unique_ptr<RequestState>> NcclCommunicator::post(bool receive, void* data, std::size_t bytes,
                                                               int peer) {
  const bool alone = !open_;
  std::shared_ptr<Batch> b = batch();
  if (alone)
    if (Status s = settle(ncclGroupStart(), "ncclGroupStart"); !s) return s.errors();
  // A host buffer goes through a device copy: a send's is filled first (the copy from pageable
  // memory is done when the call returns, so the caller may reuse it at once, as a buffered send
  // allows); a receive's is written back when it completes.
  auto view = DeviceView::of(data, bytes, !receive, as_stream(stream_));
  if (!view) return view.errors();
  const ncclResult_t r = receive ? ncclRecv(view->device(), bytes, ncclInt8, peer, as_comm(comm_), as_stream(stream_))
                                 : ncclSend(view->device(), bytes, ncclInt8, peer, as_comm(comm_), as_stream(stream_));
  if (Status s = settle(r, receive ? "ncclRecv" : "ncclSend"); !s) return s.errors();
  if (alone)
    if (Status s = close_batch(b); !s) return s.errors();
  auto req = std::make_unique<NcclRequest>();
  req->batch = std::move(b);
  req->peer = peer;
  req->receive = receive;
  req->bytes = bytes;
  req->staged = std::make_shared<DeviceView>(*view);
  return std::unique_ptr<RequestState>(std::move(req));
}

Expected<std::unique_ptr<RequestState>> NcclCommunicator::do_isend(const void* data, std::size_t count, DataType type,
                                                                   int dest, int /*tag*/) {
  return post(false, const_cast<void*>(data), count * element_size_bytes(type), dest);
}

Expected<std::unique_ptr<RequestState>> NcclCommunicator::do_irecv(void* data, std::size_t count, DataType type,
                                                                   int source, int /*tag*/) {
  return post(true, data, count * element_size_bytes(type), source);
}

Expected<bool> NcclCommunicator::do_test(RequestState& state, std::size_t& received_bytes) {
  auto& r = static_cast<NcclRequest&>(state);
  if (!r.batch->done) return runtime_error("test of an operation whose batch was not issued (group_end missing)");
  const cudaError_t q = cudaEventQuery(r.batch->done);
  if (q == cudaErrorNotReady) {
    ncclResult_t s = ncclSuccess;
    if (comm_ && ncclCommGetAsyncError(as_comm(comm_), &s) == ncclSuccess && s != ncclSuccess && s != ncclInProgress)
      return abort(std::string("NCCL failed with ") + describe_peer(r.peer) + ": " + ncclGetErrorString(s)).errors();
    return false;
  }
  if (q != cudaSuccess) return abort(cuda_error(q, "cudaEventQuery")).errors();
  if (r.staged)
    if (Status s = r.staged->finish(r.receive, as_stream(stream_)); !s) return s.errors();
  received_bytes = r.receive ? r.bytes : 0;  // NCCL delivers exactly what was posted
  return true;
}

Status NcclCommunicator::do_wait(RequestState& state, std::chrono::milliseconds timeout, bool& withdrawn,
                                 std::size_t& received_bytes) {
  withdrawn = false;  // NCCL cannot withdraw a posted operation: past the deadline it aborts
  auto& r = static_cast<NcclRequest&>(state);
  const auto deadline = deadline_after(timeout);
  while (true) {
    auto done = do_test(state, received_bytes);
    if (!done) return done.errors();
    if (*done) return ok_status();
    if (std::chrono::steady_clock::now() > deadline)
      return abort("timed out after " + std::to_string(timeout.count()) + " ms waiting for " + describe_peer(r.peer));
    std::this_thread::yield();
  }
}

Status NcclCommunicator::do_all_reduce(void* data, std::size_t count, DataType type, ReduceOp op) {
  const std::size_t bytes = count * element_size_bytes(type);
  auto view = DeviceView::of(data, bytes, true, as_stream(stream_));
  if (!view) return view.errors();
  if (Status s = settle(ncclAllReduce(view->device(), view->device(), count, nccl_type(type), nccl_op(op),
                                      as_comm(comm_), as_stream(stream_)),
                        "ncclAllReduce");
      !s)
    return s;
  if (Status s = synchronize("ncclAllReduce"); !s) return s;
  return view->finish(true, as_stream(stream_));
}

Status NcclCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t block_count, DataType type,
                                           ReduceOp op) {
  const std::size_t block = block_count * element_size_bytes(type);
  auto in = DeviceView::of(send, block * static_cast<std::size_t>(size_), true, as_stream(stream_));
  if (!in) return in.errors();
  auto out = DeviceView::of(recv, block, false, as_stream(stream_));
  if (!out) return out.errors();
  if (Status s = settle(ncclReduceScatter(in->device(), out->device(), block_count, nccl_type(type), nccl_op(op),
                                          as_comm(comm_), as_stream(stream_)),
                        "ncclReduceScatter");
      !s)
    return s;
  if (Status s = synchronize("ncclReduceScatter"); !s) return s;
  if (Status s = in->finish(false, as_stream(stream_)); !s) return s;
  return out->finish(true, as_stream(stream_));
}

// all-to-all(v) (and an irregular all-gather(v)) as one group of sends and receives, one pair per
// peer (what NCCL's own all-to-all is), the block to this rank itself copied on the stream.
Status NcclCommunicator::do_all_to_allv(const void* send, const std::size_t* send_counts, const std::size_t* send_displs,
                                        void* recv, const std::size_t* recv_counts, const std::size_t* recv_displs,
                                        DataType type) {
  const std::size_t es = element_size_bytes(type);
  std::size_t send_total = 0, recv_total = 0;
  for (int r = 0; r < size_; ++r) {
    send_total = std::max(send_total, (send_displs[r] + send_counts[r]) * es);
    recv_total = std::max(recv_total, (recv_displs[r] + recv_counts[r]) * es);
  }
  auto in = DeviceView::of(send, send_total, true, as_stream(stream_));
  if (!in) return in.errors();
  auto out = DeviceView::of(recv, recv_total, false, as_stream(stream_));
  if (!out) return out.errors();
  auto* s_dev = static_cast<const char*>(in->device());
  auto* r_dev = static_cast<char*>(out->device());
  if (Status s = settle(ncclGroupStart(), "ncclGroupStart"); !s) return s;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    if (Status s = settle(ncclSend(s_dev + send_displs[r] * es, send_counts[r] * es, ncclInt8, r, as_comm(comm_),
                                   as_stream(stream_)),
                          "ncclSend");
        !s)
      return s;
    if (Status s = settle(ncclRecv(r_dev + recv_displs[r] * es, recv_counts[r] * es, ncclInt8, r, as_comm(comm_),
                                   as_stream(stream_)),
                          "ncclRecv");
        !s)
      return s;
  }
  if (Status s = settle(ncclGroupEnd(), "ncclGroupEnd"); !s) return s;
  if (send_counts[rank_] > 0)
    if (cudaError_t e = cudaMemcpyAsync(r_dev + recv_displs[rank_] * es, s_dev + send_displs[rank_] * es,
                                        send_counts[rank_] * es, cudaMemcpyDeviceToDevice, as_stream(stream_));
        e != cudaSuccess)
      return abort(cuda_error(e, "cudaMemcpyAsync (the block to this rank)"));
  if (Status s = synchronize("all_to_allv"); !s) return s;
  if (Status s = in->finish(false, as_stream(stream_)); !s) return s;
  return out->finish(true, as_stream(stream_));
}

Status NcclCommunicator::do_all_gatherv(const void* send, std::size_t send_count, void* recv,
                                        const std::size_t* recv_counts, const std::size_t* recv_displs, DataType type) {
  // Equal blocks back to back in rank order: NCCL's own all-gather (its ring algorithm, what a
  // training step's parameter gathers run). Anything else: a group of sends and receives.
  bool regular = true;
  for (int r = 0; r < size_; ++r)
    regular = regular && recv_counts[r] == send_count && recv_displs[r] == send_count * static_cast<std::size_t>(r);
  if (regular) {
    const std::size_t block = send_count * element_size_bytes(type);
    auto in = DeviceView::of(send, block, true, as_stream(stream_));
    if (!in) return in.errors();
    auto out = DeviceView::of(recv, block * static_cast<std::size_t>(size_), false, as_stream(stream_));
    if (!out) return out.errors();
    if (Status s = settle(ncclAllGather(in->device(), out->device(), block, ncclChar, as_comm(comm_), as_stream(stream_)),
                          "ncclAllGather");
        !s)
      return s;
    if (Status s = synchronize("ncclAllGather"); !s) return s;
    if (Status s = in->finish(false, as_stream(stream_)); !s) return s;
    return out->finish(true, as_stream(stream_));
  }
  std::vector<std::size_t> send_counts(static_cast<std::size_t>(size_), send_count), send_displs(static_cast<std::size_t>(size_), 0);
  return do_all_to_allv(send, send_counts.data(), send_displs.data(), recv, recv_counts, recv_displs, type);
}

Status NcclCommunicator::do_barrier() {
  float one = 1;
  return do_all_reduce(&one, 1, DataType::kFloat32, ReduceOp::kSum);
}

Expected<std::unique_ptr<Communicator>> NcclCommunicator::do_split(int color, int key) {
  // Every rank's (color, key) and, from each group's first member, a new unique id: each group
  // then creates its communicator as a new one (ordered by (key, rank), as MPI_Comm_split orders
  // it). Not ncclCommSplit: NCCL 2.28 refuses it on a one-rank communicator ("invalid argument"),
  // and a new communicator from an id is what create() already does.
  struct Entry {
    double color, key;
    UniqueId id;
  };
  std::vector<std::pair<int, int>> members;  // (key, rank) of this rank's color, filled below
  Entry mine{static_cast<double>(color), static_cast<double>(key), {}};
  // Who leads each color needs everyone's (color, key) first.
  std::vector<double> ck{mine.color, mine.key}, all_ck(2 * static_cast<std::size_t>(size_));
  std::vector<std::size_t> counts(static_cast<std::size_t>(size_), 2 * sizeof(double)), displs(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) displs[static_cast<std::size_t>(r)] = 2 * sizeof(double) * static_cast<std::size_t>(r);
  if (Status s = all_gatherv(std::as_bytes(std::span<const double>(ck)), std::as_writable_bytes(std::span<double>(all_ck)),
                             counts, displs);
      !s)
    return s.errors();
  for (int q = 0; q < size_; ++q)
    if (color >= 0 && static_cast<int>(all_ck[2 * static_cast<std::size_t>(q)]) == color)
      members.push_back({static_cast<int>(all_ck[2 * static_cast<std::size_t>(q) + 1]), q});
  std::sort(members.begin(), members.end());
  if (!members.empty() && members.front().second == rank_) {
    auto id = new_unique_id();
    if (!id) return id.errors();
    mine.id = *id;
  }
  std::vector<char> ids(mine.id.size() * static_cast<std::size_t>(size_));
  if (Status s = all_gather(std::as_bytes(std::span<const char>(mine.id.data(), mine.id.size())),
                            std::as_writable_bytes(std::span<char>(ids)));
      !s)
    return s.errors();
  if (color < 0) return std::unique_ptr<Communicator>();
  UniqueId id;
  const auto leader = static_cast<std::size_t>(members.front().second);
  std::copy_n(ids.begin() + static_cast<std::ptrdiff_t>(leader * id.size()), id.size(), id.begin());
  std::vector<int> world;
  int new_rank = 0;
  for (std::size_t i = 0; i < members.size(); ++i) {
    world.push_back(world_ranks_[static_cast<std::size_t>(members[i].second)]);
    if (members[i].second == rank_) new_rank = static_cast<int>(i);
  }
  auto child = create(id, new_rank, static_cast<int>(members.size()), std::move(world), stream_, timeout());
  if (!child) return child.errors();
  return std::unique_ptr<Communicator>(std::move(*child));
}

}  // namespace cpbench
