// thread_communicator_test.cpp — ThreadCommunicator: the Communicator contract on 4 threads (the
// same bodies MpiCommunicator's test runs under mpirun), MPI's matching order per (source, tag),
// deadlines that name the peer or the absent rank, and run_thread_ranks's error reporting.
#include "core/runtime/thread_communicator.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/runtime/communicator_contract.h"

namespace cpbench {
namespace {

using ::testing::HasSubstr;
using V = std::vector<float>;

// Runs fn on n thread ranks with a 30 s deadline; every rank's Status must be ok.
void on_threads(int n, const std::function<Status(Communicator&)>& fn) {
  for (const Status& s : run_thread_ranks(n, fn, std::chrono::seconds(30))) EXPECT_TRUE(s) << s.error_str();
}

// A contract body on 4 thread ranks with counters fresh.
void on_four(void (*body)(Communicator&)) {
  on_threads(4, [&](Communicator& c) {
    body(c);
    return ok_status();
  });
}

TEST(ThreadCommunicator, Contract) {
  on_four(contract::ring_send_recv);
  on_four(contract::all_reduce_exact);
  on_four(contract::reduce_scatter_blocks);
  on_four(contract::all_gather_and_v);
  on_four(contract::all_to_all_blocks);
  on_four(contract::all_to_allv_uneven);
  on_four(contract::split_into_pairs);
}

// A ring exchange posted as one batch (as the executor posts a phase), completed after the bracket.
// Memory the host may not touch directly, as a GPU's: each byte is stored XOR kKey, and only copy()
// (the group's MemoryCopy, as the CUDA backend's cudaMemcpy) translates. A communicator that read
// or wrote a rank's buffer with memcpy instead of the group's copy would move the stored bytes and
// the values would come out wrong.
class FakeDevice {
 public:
  static constexpr unsigned char kKey = 0xA5;
  float* floats(std::size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& b = blocks_.emplace_back(std::make_unique<float[]>(n));
    ranges_[reinterpret_cast<const std::byte*>(b.get())] = n * sizeof(float);
    return b.get();
  }
  void upload(float* dev, const V& host) { translate(dev, host.data(), host.size() * sizeof(float)); }
  V download(const float* dev, std::size_t n) {
    V host(n);
    translate(host.data(), dev, n * sizeof(float));
    return host;
  }
  Status copy(void* dst, const void* src, std::size_t bytes) {
    ++copies_;
    translate(dst, src, bytes);
    return ok_status();
  }
  int copies() const { return copies_; }

 private:
  bool on_device(const void* p) {
    const auto* at = static_cast<const std::byte*>(p);
    auto it = ranges_.upper_bound(at);
    return it != ranges_.begin() && at < std::prev(it)->first + std::prev(it)->second;
  }
  void translate(void* dst, const void* src, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    for (std::size_t i = 0; i < bytes; ++i) {
      unsigned char v = s[i];
      if (on_device(s + i)) v ^= kKey;
      d[i] = on_device(d + i) ? static_cast<unsigned char>(v ^ kKey) : v;
    }
  }
  std::mutex mu_;
  std::vector<std::unique_ptr<float[]>> blocks_;
  std::map<const std::byte*, std::size_t> ranges_;
  std::atomic<int> copies_{0};
};

// Every path a rank's buffer takes — a send into a receive already posted, a send that waits in
// the queue for its receive, each collective — goes through the group's MemoryCopy: on FakeDevice
// memory the values arrive exact.
TEST(ThreadCommunicator, RanksBuffersMoveOnlyThroughTheGroupsCopy) {
  FakeDevice dev;
  auto check = [](bool ok, const std::string& what) { return ok ? ok_status() : Status(runtime_error(what)); };
  const auto st = run_thread_ranks(
      4,
      [&](Communicator& c) -> Status {
        const int r = c.rank(), next = (r + 1) % 4, prev = (r + 3) % 4;
        const float me = static_cast<float>(r + 1);
        float* out = dev.floats(3);
        float* in = dev.floats(3);
        dev.upload(out, {me, 10 * me, 100 * me});
        // A receive posted before its send arrives ...
        auto q = c.irecv(std::span<float>(in, 3), prev, 7);
        if (!q) return q.errors();
        if (auto s = c.barrier(); !s) return s;
        if (auto s = c.send(std::span<const float>(out, 3), next, 7); !s) return s;
        if (auto s = c.wait(*q); !s) return s;
        const float p = static_cast<float>(prev + 1);
        if (auto s = check(dev.download(in, 3) == V{p, 10 * p, 100 * p}, "posted receive"); !s) return s;
        // ... and a send queued before its receive is posted.
        if (auto s = c.send(std::span<const float>(out, 3), next, 8); !s) return s;
        if (auto s = c.barrier(); !s) return s;
        if (auto s = c.recv(std::span<float>(in, 3), prev, 8); !s) return s;
        if (auto s = check(dev.download(in, 3) == V{p, 10 * p, 100 * p}, "queued send"); !s) return s;
        // Collectives: 1+2+3+4 = 10.
        float* sum = dev.floats(1);
        dev.upload(sum, {me});
        if (auto s = c.all_reduce(std::span<float>(sum, 1)); !s) return s;
        if (auto s = check(dev.download(sum, 1) == V{10}, "all_reduce"); !s) return s;
        float* blocks = dev.floats(4);
        dev.upload(blocks, {me, 2 * me, 3 * me, 4 * me});
        float* mine = dev.floats(1);
        if (auto s = c.reduce_scatter(std::span<const float>(blocks, 4), std::span<float>(mine, 1)); !s) return s;
        if (auto s = check(dev.download(mine, 1) == V{10.0f * static_cast<float>(r + 1)}, "reduce_scatter"); !s) return s;
        float* all = dev.floats(4);
        if (auto s = c.all_gather(std::span<const float>(out, 1), std::span<float>(all, 4)); !s) return s;
        if (auto s = check(dev.download(all, 4) == V{1, 2, 3, 4}, "all_gather"); !s) return s;
        float* got = dev.floats(4);
        if (auto s = c.all_to_all(std::span<const float>(blocks, 4), std::span<float>(got, 4)); !s) return s;
        const float col = static_cast<float>(r + 1);
        if (auto s = check(dev.download(got, 4) == V{col, 2 * col, 3 * col, 4 * col}, "all_to_all"); !s) return s;
        return ok_status();
      },
      std::chrono::seconds(30), [&](void* dst, const void* src, std::size_t n) { return dev.copy(dst, src, n); });
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(st[static_cast<size_t>(r)]) << "rank " << r << ": " << st[static_cast<size_t>(r)].error_str();
  EXPECT_GT(dev.copies(), 0);
}

// A failed copy is the error of the operation that made it: the send whose message waits in the
// queue (its receive posted later), the receive already posted when its message arrived.
TEST(ThreadCommunicator, AFailedCopyIsTheOperationsError) {
  const MemoryCopy lost = [](void*, const void*, std::size_t) -> Status { return runtime_error("device lost"); };
  for (bool posted_first : {false, true}) {
    const auto st = run_thread_ranks(
        2,
        [&](Communicator& c) -> Status {
          V x{1};
          if (c.rank() == 0) {
            Status sent = posted_first ? ok_status() : c.send(std::span<const float>(x), 1, 0);
            if (auto s = c.barrier(); !s) return s;
            return posted_first ? c.send(std::span<const float>(x), 1, 0) : sent;
          }
          Expected<Request> q = posted_first ? c.irecv(std::span<float>(x), 0, 0) : Expected<Request>(Request{});
          if (auto s = c.barrier(); !s) return s;
          if (!posted_first) q = c.irecv(std::span<float>(x), 0, 0);
          if (!q) return q.errors();
          return c.wait(*q);
        },
        std::chrono::seconds(1), lost);
    const Status& failed = st[posted_first ? 1 : 0];
    ASSERT_FALSE(failed) << "posted first: " << posted_first;
    EXPECT_THAT(failed.error_str(), HasSubstr("device lost"));
  }
}

TEST(ThreadCommunicator, ARingPostedAsOneBatch) {
  on_threads(
      4,
      [](Communicator& c) -> Status {
        const int next = (c.rank() + 1) % 4, prev = (c.rank() + 3) % 4;
        V out{static_cast<float>(c.rank())}, in{-1};
        std::vector<Request> reqs;
        if (auto s = c.group_start(); !s) return s;
        auto r = c.irecv(std::span<float>(in), prev, 1);
        auto q = c.isend(std::span<const float>(out), next, 1);
        if (!r || !q) return runtime_error("post failed");
        reqs.push_back(std::move(*r));
        reqs.push_back(std::move(*q));
        if (auto s = c.group_end(); !s) return s;
        if (auto s = c.wait_all(reqs); !s) return s;
        EXPECT_EQ(in[0], static_cast<float>(prev));
        return ok_status();
      });
}

TEST(ThreadCommunicator, RanksAndWorldRanks) {
  auto comms = ThreadCommunicator::group(3);
  ASSERT_EQ(comms.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(comms[r]->rank(), r);
    EXPECT_EQ(comms[r]->size(), 3);
    EXPECT_EQ(comms[r]->world_rank_of(2), 2);
    EXPECT_EQ(comms[r]->world_rank_of(3), -1);
  }
}

// MPI's non-overtaking rule: between one pair, messages with one tag arrive in the order they were
// sent, whatever the other tags do and whether the receive was posted before or after the send.
TEST(ThreadCommunicator, MessagesMatchPerSourceAndTagInOrder) {
  on_threads(
      3,
      [](Communicator& c) -> Status {
        const int r = c.rank();
        if (r == 1 || r == 2) {
          for (int i = 0; i < 50; ++i) {
            V m{static_cast<float>(r * 1000 + i)};
            if (auto s = c.send(std::span<const float>(m), 0, i % 2); !s) return s;
          }
          return ok_status();
        }
        // Rank 0 posts half its receives early, then the rest, alternating tags and sources.
        std::vector<V> got(100, V(1, -1));
        std::vector<Request> reqs;
        for (int k = 0; k < 100; ++k) {
          if (k == 50) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the rest arrive first
          const int src = 1 + k % 2, i = k / 2;
          auto q = c.irecv(std::span<float>(got[k]), src, i % 2);
          if (!q) return q.errors();
          reqs.push_back(std::move(*q));
        }
        if (auto s = c.wait_all(reqs); !s) return s;
        for (int k = 0; k < 100; ++k) {
          const int src = 1 + k % 2, i = k / 2;
          EXPECT_EQ(got[k][0], static_cast<float>(src * 1000 + i)) << "receive " << k;
        }
        EXPECT_EQ(c.bytes_received(), 100u * 4);
        return ok_status();
      });
}

TEST(ThreadCommunicator, ALongerMessageThanTheBufferIsAnError) {
  on_threads(
      2,
      [](Communicator& c) -> Status {
        V big(8, 1), small(4);
        if (c.rank() == 0) return c.send(std::span<const float>(big), 1, 5);
        Status s = c.recv(std::span<float>(small), 0, 5);
        EXPECT_FALSE(s);
        EXPECT_THAT(s.error_str(), HasSubstr("recv of 16 bytes from rank 0 (world rank 0), tag 5: message longer"));
        return ok_status();
      });
}

TEST(ThreadCommunicator, RecvFromASilentPeerTimesOutNamingItAndIsWithdrawn) {
  on_threads(
      2,
      [](Communicator& c) -> Status {
        V got(4, -1), sent{1, 2, 3, 4};
        if (c.rank() == 0) {
          c.set_timeout(std::chrono::milliseconds(200));
          const auto start = std::chrono::steady_clock::now();
          Status s = c.recv(std::span<float>(got), 1, 99);
          EXPECT_FALSE(s);
          EXPECT_THAT(s.error_str(), HasSubstr("recv of 16 bytes from rank 1 (world rank 1), tag 99: timed out after 200 ms"));
          EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
          EXPECT_TRUE(c.healthy());  // a withdrawn receive leaves the communicator usable
          c.set_timeout(std::chrono::seconds(30));
        }
        if (auto s = c.barrier(); !s) return s;
        // The withdrawn receive must not swallow the later message with the same tag.
        if (c.rank() == 1) return c.send(std::span<const float>(sent), 0, 99);
        if (auto s = c.recv(std::span<float>(got), 1, 99); !s) return s;
        EXPECT_EQ(got, sent);
        EXPECT_EQ(c.bytes_received(), 16u);
        return ok_status();
      });
}

TEST(ThreadCommunicator, CollectiveTimeoutNamesTheAbsentRankAndBreaksOnlyThatCommunicator) {
  on_threads(
      4,
      [](Communicator& c) -> Status {
        auto sub = c.split(0, c.rank());
        if (!sub) return sub.errors();
        Communicator& all = **sub;
        std::vector<double> v{1};
        if (c.rank() == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(600));  // "in a long kernel"
        } else {
          all.set_timeout(std::chrono::milliseconds(200));
          Status s = all.all_reduce(std::span<double>(v));
          EXPECT_FALSE(s);
          EXPECT_THAT(s.error_str(), HasSubstr("all_reduce(sum) over 4 ranks (world ranks 0,1,2,3): timed out"));
          EXPECT_THAT(s.error_str(), HasSubstr("no answer from rank 2 (world rank 2)"));
          EXPECT_THAT(s.error_str(), ::testing::Not(HasSubstr("rank 1 (")));
          EXPECT_FALSE(all.healthy());
          EXPECT_THAT(all.barrier().error_str(), HasSubstr("communicator unusable after an earlier failure"));
        }
        EXPECT_TRUE(c.healthy());
        return c.barrier();  // the parent is untouched
      });
}

TEST(ThreadCommunicator, EveryRanksErrorIsReportedAndAThrowIsAnError) {
  std::atomic<int> ran{0};
  auto st = run_thread_ranks(
      3,
      [&](Communicator& c) -> Status {
        ++ran;
        if (c.rank() == 1) throw std::runtime_error("kernel exploded");
        if (c.rank() == 2) return runtime_error("rank 2's own error");
        return ok_status();
      },
      std::chrono::seconds(5));
  EXPECT_EQ(ran, 3);
  ASSERT_EQ(st.size(), 3u);
  EXPECT_TRUE(st[0]);
  EXPECT_THAT(st[1].error_str(), HasSubstr("rank 1 threw: kernel exploded"));
  EXPECT_THAT(st[2].error_str(), HasSubstr("rank 2's own error"));
}

// Eight ranks, nested splits and many concurrent messages: every all-to-all round and every
// reduction gives the same bits on every rank.
TEST(ThreadCommunicator, EightRanksNestedSplitsAgree) {
  on_threads(
      8,
      [](Communicator& c) -> Status {
        auto half = c.split(c.rank() % 2, c.rank());
        if (!half) return half.errors();
        auto quarter = (*half)->split((*half)->rank() / 2, 0);
        if (!quarter) return quarter.errors();
        EXPECT_EQ((*quarter)->size(), 2);
        EXPECT_EQ((*quarter)->world_rank_of(0) % 2, c.rank() % 2);
        for (int round = 0; round < 20; ++round) {
          V send(8), recv(8);
          for (int d = 0; d < 8; ++d) send[d] = static_cast<float>(round * 100 + c.rank() * 10 + d);
          if (auto s = c.all_to_all(std::span<const float>(send), std::span<float>(recv)); !s) return s;
          for (int s = 0; s < 8; ++s) EXPECT_EQ(recv[s], static_cast<float>(round * 100 + s * 10 + c.rank()));
          V x{0.1f * static_cast<float>(c.rank() + round)};
          if (auto s = (*half)->all_reduce(std::span<float>(x)); !s) return s;
          V all(4);
          if (auto s = (*half)->all_gather(std::span<const float>(x), std::span<float>(all)); !s) return s;
          for (float y : all) EXPECT_EQ(y, x[0]);  // bit-identical on every rank
        }
        return ok_status();
      });
}

}  // namespace
}  // namespace cpbench
