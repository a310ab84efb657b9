// mpi_communicator.cpp — Communicator over MPI: non-blocking posts completed by deadline polls.
#include "core/runtime/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdio>

#include "core/runtime/watchdog.h"

namespace cpbench {

namespace {

Error mpi_error(const std::string& call, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  return runtime_error(call + " failed: " + (length ? std::string(text, length) : "MPI error " +
                                                                                    std::to_string(code)));
}

MPI_Datatype mpi_type(DataType type) {
  switch (type) {
    case DataType::kByte: return MPI_BYTE;
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

// MPI-3 counts are int; MPI-4's large-count calls are not in OpenMPI 4.1.
Expected<int> to_int(std::size_t value, const std::string& what) {
  if (value > static_cast<std::size_t>(INT_MAX)) {
    return runtime_error(what + " of " + std::to_string(value) +
                         " elements exceeds MPI's int range; split the message");
  }
  return static_cast<int>(value);
}

Expected<std::vector<int>> to_ints(const std::size_t* values, int n, const std::string& what) {
  std::vector<int> out(n);
  for (int r = 0; r < n; ++r) {
    auto v = to_int(values[r], what + " for rank " + std::to_string(r));
    if (!v) return v.errors();
    out[r] = *v;
  }
  return out;
}

struct MpiRequestState final : RequestState {
  MPI_Request request = MPI_REQUEST_NULL;
  bool is_recv = false;
};

std::size_t received_bytes_of(const MPI_Status& status) {
  int bytes = 0;
  MPI_Get_count(&status, MPI_BYTE, &bytes);
  return static_cast<std::size_t>(bytes);
}

constexpr const char* kWaitingForGroup = "waiting for the other ranks of the group to join";

// Probe messages of the timeout diagnosis, and how long a timed-out rank waits for answers: a
// rank that waits in an operation polls every few microseconds, so 500 ms is ample.
const int kAsk = 0;
const int kHere = 1;
constexpr auto kProbeGrace = std::chrono::milliseconds(500);

Status check_tag(int tag) {
  if (tag < MpiCommunicator::kProbeTag) return ok_status();
  return runtime_error("tag " + std::to_string(tag) + " is reserved (user tags are below " +
                       std::to_string(MpiCommunicator::kProbeTag) + ")");
}

}  // namespace

// ---- construction -------------------------------------------------------------------------------

Expected<std::unique_ptr<MpiCommunicator>> MpiCommunicator::adopt(MPI_Comm comm) {
  std::unique_ptr<MpiCommunicator> c(new MpiCommunicator(comm));
  if (int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN); rc != MPI_SUCCESS) {
    return mpi_error("MPI_Comm_set_errhandler", rc);
  }
  MPI_Comm_rank(comm, &c->rank_);
  MPI_Comm_size(comm, &c->size_);
  MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> ranks(c->size_);
  for (int r = 0; r < c->size_; ++r) ranks[r] = r;
  c->world_ranks_.assign(c->size_, -1);
  int rc = MPI_Group_translate_ranks(group, c->size_, ranks.data(), world_group,
                                     c->world_ranks_.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  if (rc != MPI_SUCCESS) return mpi_error("MPI_Group_translate_ranks", rc);
  return c;
}

Expected<std::unique_ptr<MpiCommunicator>> MpiCommunicator::world(
    std::chrono::milliseconds timeout) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return runtime_error("MpiCommunicator::world: MPI is not initialised");
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  if (int rc = MPI_Comm_idup(MPI_COMM_WORLD, &dup, &request); rc != MPI_SUCCESS) {
    return mpi_error("MPI_Comm_idup", rc);
  }
  Status s = run_with_timeout(
      [&]() -> Expected<bool> {
        int done = 0;
        if (int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS) {
          return mpi_error("MPI_Test", rc);
        }
        return done != 0;
      },
      timeout, kWaitingForGroup);
  if (!s) return runtime_error("duplicating MPI_COMM_WORLD: " + s.error_str());
  auto c = adopt(dup);
  if (c) (*c)->set_timeout(timeout);
  return c;
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || comm_ == MPI_COMM_NULL) return;
  // An abandoned collective may still finish (the late rank joined); give it a moment. One that
  // does not keeps the communicator: libnbc progresses it inside MPI_Finalize, and freeing the
  // communicator under it crashes there (OpenMPI 4.1).
  run_with_timeout(
      [&]() -> Expected<bool> {
        int done = 0;
        MPI_Testall(static_cast<int>(abandoned_.size()), abandoned_.data(), &done,
                    MPI_STATUSES_IGNORE);
        return done != 0;
      },
      kProbeGrace, "");
  for (MPI_Request r : abandoned_) {
    if (r != MPI_REQUEST_NULL) return;
  }
  MPI_Comm_free(&comm_);
}

int MpiCommunicator::world_rank_of(int rank) const {
  return rank >= 0 && rank < size_ ? world_ranks_[rank] : -1;
}

void MpiCommunicator::abort_job(const std::string& message, int exit_code) {
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::fprintf(stderr, "cpbench: world rank %d: %s\n", world_rank, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::abort();  // MPI_Abort does not return; this tells the compiler so
}

// ---- point to point -----------------------------------------------------------------------------

Expected<std::unique_ptr<RequestState>> MpiCommunicator::do_isend(const void* data,
                                                                  std::size_t count,
                                                                  DataType type, int dest,
                                                                  int tag) {
  auto n = to_int(count, "message");
  if (!n) return n.errors();
  if (Status s = check_tag(tag); !s) return s.errors();
  auto state = std::make_unique<MpiRequestState>();
  if (int rc = MPI_Isend(data, *n, mpi_type(type), dest, tag, comm_, &state->request);
      rc != MPI_SUCCESS) {
    return mpi_error("MPI_Isend", rc);
  }
  return std::unique_ptr<RequestState>(std::move(state));
}

Expected<std::unique_ptr<RequestState>> MpiCommunicator::do_irecv(void* data, std::size_t count,
                                                                  DataType type, int source,
                                                                  int tag) {
  auto n = to_int(count, "message");
  if (!n) return n.errors();
  if (Status s = check_tag(tag); !s) return s.errors();
  auto state = std::make_unique<MpiRequestState>();
  state->is_recv = true;
  if (int rc = MPI_Irecv(data, *n, mpi_type(type), source, tag, comm_, &state->request);
      rc != MPI_SUCCESS) {
    return mpi_error("MPI_Irecv", rc);
  }
  return std::unique_ptr<RequestState>(std::move(state));
}

Expected<bool> MpiCommunicator::do_test(RequestState& base, std::size_t& received_bytes) {
  auto& state = static_cast<MpiRequestState&>(base);
  int done = 0;
  MPI_Status status;
  if (int rc = MPI_Test(&state.request, &done, &status); rc != MPI_SUCCESS) {
    return mpi_error("MPI_Test", rc);
  }
  if (done && state.is_recv) received_bytes = received_bytes_of(status);
  return done != 0;
}

Status MpiCommunicator::do_wait(RequestState& base, std::chrono::milliseconds timeout,
                                bool& withdrawn, std::size_t& received_bytes) {
  auto& state = static_cast<MpiRequestState&>(base);
  Status s = run_with_timeout(
      [&]() -> Expected<bool> {
        Expected<bool> done = do_test(state, received_bytes);
        if (done && !*done) answer_probes(nullptr);
        return done;
      },
      timeout, "");
  if (s || state.request == MPI_REQUEST_NULL) return s;
  if (!state.is_recv) {
    abandoned_.push_back(state.request);  // a send cannot be withdrawn
    return s;
  }
  // A receive can be withdrawn locally (MPI 4.1, sec. 3.8.4), leaving the communicator usable.
  // If the message arrived meanwhile the cancel fails and the receive simply completed.
  MPI_Status status;
  MPI_Cancel(&state.request);
  MPI_Wait(&state.request, &status);
  int cancelled = 0;
  MPI_Test_cancelled(&status, &cancelled);
  if (!cancelled) {
    received_bytes = received_bytes_of(status);
    return ok_status();
  }
  withdrawn = true;
  return s;
}

// ---- collectives --------------------------------------------------------------------------------

Status MpiCommunicator::complete(MPI_Request& request) {
  Status s = run_with_timeout(
      [&]() -> Expected<bool> {
        int done = 0;
        if (int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS) {
          return mpi_error("MPI_Test", rc);
        }
        if (!done) answer_probes(nullptr);
        return done != 0;
      },
      timeout(), kWaitingForGroup);
  if (s) return s;
  if (request != MPI_REQUEST_NULL) abandoned_.push_back(request);
  return runtime_error(s.error_str() + "; " + find_absent_ranks());
}

void MpiCommunicator::answer_probes(std::vector<char>* heard) {
  for (;;) {
    int pending = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kProbeTag, comm_, &pending, &status) != MPI_SUCCESS ||
        !pending) {
      return;
    }
    int message = -1;
    MPI_Recv(&message, 1, MPI_INT, status.MPI_SOURCE, kProbeTag, comm_, MPI_STATUS_IGNORE);
    if (message == kAsk) {
      // One int goes eagerly: the send completes without the asker, so the request is freed.
      MPI_Request reply = MPI_REQUEST_NULL;
      if (MPI_Isend(&kHere, 1, MPI_INT, status.MPI_SOURCE, kProbeTag, comm_, &reply) ==
          MPI_SUCCESS) {
        MPI_Request_free(&reply);
      }
    } else if (heard) {
      (*heard)[status.MPI_SOURCE] = 1;
    }
  }
}

std::string MpiCommunicator::find_absent_ranks() {
  std::vector<char> heard(size_, 0);
  heard[rank_] = 1;
  for (int p = 0; p < size_; ++p) {
    MPI_Request ask = MPI_REQUEST_NULL;
    if (p != rank_ && MPI_Isend(&kAsk, 1, MPI_INT, p, kProbeTag, comm_, &ask) == MPI_SUCCESS) {
      MPI_Request_free(&ask);
    }
  }
  run_with_timeout(
      [&]() -> Expected<bool> {
        answer_probes(&heard);
        return std::all_of(heard.begin(), heard.end(), [](char h) { return h != 0; });
      },
      std::min<std::chrono::milliseconds>(timeout(), kProbeGrace), "");
  std::string absent;
  for (int p = 0; p < size_; ++p) {
    if (!heard[p]) absent += (absent.empty() ? "" : ", ") + describe_peer(p);
  }
  if (absent.empty()) return "every rank answered a probe: the ranks wait in different operations";
  return "no answer from " + absent + " (busy outside communication, or dead)";
}

Status MpiCommunicator::do_all_to_allv(const void* send, const std::size_t* send_counts,
                                       const std::size_t* send_displs, void* recv,
                                       const std::size_t* recv_counts,
                                       const std::size_t* recv_displs, DataType type) {
  auto sc = to_ints(send_counts, size_, "send count");
  auto sd = to_ints(send_displs, size_, "send displacement");
  auto rcnt = to_ints(recv_counts, size_, "recv count");
  auto rd = to_ints(recv_displs, size_, "recv displacement");
  for (const auto* v : {&sc, &sd, &rcnt, &rd}) {
    if (!*v) return v->errors();
  }
  MPI_Request request = MPI_REQUEST_NULL;
  const MPI_Datatype t = mpi_type(type);
  if (int rc = MPI_Ialltoallv(send, sc->data(), sd->data(), t, recv, rcnt->data(), rd->data(), t,
                              comm_, &request);
      rc != MPI_SUCCESS) {
    return mpi_error("MPI_Ialltoallv", rc);
  }
  return complete(request);
}

Status MpiCommunicator::do_all_gatherv(const void* send, std::size_t send_count, void* recv,
                                       const std::size_t* recv_counts,
                                       const std::size_t* recv_displs, DataType type) {
  auto n = to_int(send_count, "send count");
  auto rcnt = to_ints(recv_counts, size_, "recv count");
  auto rd = to_ints(recv_displs, size_, "recv displacement");
  if (!n) return n.errors();
  if (!rcnt) return rcnt.errors();
  if (!rd) return rd.errors();
  MPI_Request request = MPI_REQUEST_NULL;
  const MPI_Datatype t = mpi_type(type);
  if (int rc = MPI_Iallgatherv(send, *n, t, recv, rcnt->data(), rd->data(), t, comm_, &request);
      rc != MPI_SUCCESS) {
    return mpi_error("MPI_Iallgatherv", rc);
  }
  return complete(request);
}

Status MpiCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t block_count,
                                          DataType type, ReduceOp op) {
  auto n = to_int(block_count, "block");
  if (!n) return n.errors();
  MPI_Request request = MPI_REQUEST_NULL;
  if (int rc = MPI_Ireduce_scatter_block(send, recv, *n, mpi_type(type), mpi_op(op), comm_,
                                         &request);
      rc != MPI_SUCCESS) {
    return mpi_error("MPI_Ireduce_scatter_block", rc);
  }
  return complete(request);
}

Status MpiCommunicator::do_all_reduce(void* data, std::size_t count, DataType type, ReduceOp op) {
  auto n = to_int(count, "buffer");
  if (!n) return n.errors();
  MPI_Request request = MPI_REQUEST_NULL;
  if (int rc = MPI_Iallreduce(MPI_IN_PLACE, data, *n, mpi_type(type), mpi_op(op), comm_,
                              &request);
      rc != MPI_SUCCESS) {
    return mpi_error("MPI_Iallreduce", rc);
  }
  return complete(request);
}

Status MpiCommunicator::do_barrier() {
  MPI_Request request = MPI_REQUEST_NULL;
  if (int rc = MPI_Ibarrier(comm_, &request); rc != MPI_SUCCESS) {
    return mpi_error("MPI_Ibarrier", rc);
  }
  return complete(request);
}

Expected<std::unique_ptr<Communicator>> MpiCommunicator::do_split(int color, int key) {
  // MPI_Comm_split has no non-blocking form: a polled barrier first makes sure every rank has
  // arrived, so a dead peer times out here instead of hanging inside MPI_Comm_split.
  if (Status s = do_barrier(); !s) return s.errors();
  MPI_Comm sub = MPI_COMM_NULL;
  if (int rc = MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub);
      rc != MPI_SUCCESS) {
    return mpi_error("MPI_Comm_split", rc);
  }
  if (sub == MPI_COMM_NULL) return std::unique_ptr<Communicator>();
  auto c = adopt(sub);
  if (!c) return c.errors();
  return std::unique_ptr<Communicator>(std::move(*c));
}

Expected<NodePlacement> node_placement(MpiCommunicator& world) {
  MPI_Comm local = MPI_COMM_NULL;
  if (MPI_Comm_split_type(world.comm(), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &local) != MPI_SUCCESS)
    return runtime_error("MPI_Comm_split_type (the ranks of each host) failed");
  NodePlacement p;
  int local_size = 1;
  MPI_Comm_rank(local, &p.local_rank);
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  double most = local_size, firsts = p.local_rank == 0 ? 1 : 0;
  if (Status s = world.all_reduce(std::span<double>(&most, 1), ReduceOp::kMax); !s) return s.errors();
  if (Status s = world.all_reduce(std::span<double>(&firsts, 1), ReduceOp::kSum); !s) return s.errors();
  p.ranks_per_node = static_cast<int>(most);
  p.hosts = static_cast<int>(firsts);
  return p;
}

}  // namespace cpbench
