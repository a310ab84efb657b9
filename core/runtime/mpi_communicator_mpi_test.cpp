// mpi_communicator_mpi_test.cpp — MpiCommunicator on 4 ranks (mpirun -np 4): every collective
// checked exactly with crafted inputs (small integers, so float sums are exact, as nccl-tests
// does), byte counters against the payload formulas, sub-communicators from split, uneven
// all_to_allv with zeros, and timeouts that name the peer and leave the job able to continue.
#include "core/runtime/mpi_communicator.h"
#include "core/runtime/mpi_test_environment.h"

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cpbench {
namespace {

using ::testing::HasSubstr;
using V = std::vector<float>;
using Counts = std::vector<std::size_t>;

[[maybe_unused]] auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

class Mpi : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(c.size(), 4) << "run under mpirun -np 4";
    c.reset_counters();
    c.set_timeout(std::chrono::seconds(30));  // a bug fails the test instead of hanging it
  }
  void TearDown() override { ASSERT_TRUE(c.barrier()); }  // keep tests in lockstep
  MpiCommunicator& c = MpiEnvironment::world();
  const int r = c.rank();
  const int n = c.size();
};

TEST_F(Mpi, RanksAndWorldRanks) {
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  EXPECT_EQ(r, world_rank);
  for (int p = 0; p < n; ++p) EXPECT_EQ(c.world_rank_of(p), p);
  EXPECT_TRUE(c.healthy());
}

TEST_F(Mpi, RingSendRecvBlockingAndNonBlocking) {
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  V out(5), in(5, -1);
  for (int i = 0; i < 5; ++i) out[i] = static_cast<float>(r * 100 + i);
  auto rs = c.irecv(std::span<float>(in), prev, 3);
  ASSERT_TRUE(rs);
  auto ss = c.isend(std::span<const float>(out), next, 3);
  ASSERT_TRUE(ss);
  std::vector<Request> requests;
  requests.push_back(std::move(*rs));
  requests.push_back(std::move(*ss));
  ASSERT_TRUE(c.wait_all(requests));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(in[i], prev * 100 + i);

  // Blocking, bytes: even ranks send first, odd ranks receive first.
  std::vector<std::byte> b_out(7, std::byte(r)), b_in(7);
  if (r % 2 == 0) {
    ASSERT_TRUE(c.send(std::span<const std::byte>(b_out), next, 4));
    ASSERT_TRUE(c.recv(std::span<std::byte>(b_in), prev, 4));
  } else {
    ASSERT_TRUE(c.recv(std::span<std::byte>(b_in), prev, 4));
    ASSERT_TRUE(c.send(std::span<const std::byte>(b_out), next, 4));
  }
  EXPECT_EQ(b_in, std::vector<std::byte>(7, std::byte(prev)));
  EXPECT_EQ(c.bytes_sent(), 5 * 4 + 7u);
  EXPECT_EQ(c.bytes_received(), 5 * 4 + 7u);
}

TEST_F(Mpi, AllReduceSumAndMaxAreExact) {
  const int count = 10;  // not a multiple of 4: uneven ring blocks
  V f(count);
  std::vector<double> d(count);
  for (int i = 0; i < count; ++i) {
    f[i] = static_cast<float>((r + 1) * (i + 1));
    d[i] = (r + 1) * 0.25 + i;  // quarters: exact in binary
  }
  ASSERT_TRUE(c.all_reduce(std::span<float>(f)));
  ASSERT_TRUE(c.all_reduce(std::span<double>(d)));
  for (int i = 0; i < count; ++i) {
    EXPECT_EQ(f[i], static_cast<float>((i + 1) * n * (n + 1) / 2));  // sum of 1..n, times i+1
    EXPECT_EQ(d[i], 0.25 * n * (n + 1) / 2 + n * i);
  }
  // Ring volume per all_reduce: (count - mine) + (n-1)*mine elements, mine = 3,3,2,2.
  const std::uint64_t mine = count / n + (r < count % n ? 1 : 0);
  const std::uint64_t elements = count - mine + (n - 1) * mine;
  EXPECT_EQ(c.bytes_sent(), elements * 4 + elements * 8);
  EXPECT_EQ(c.bytes_received(), c.bytes_sent());

  // Summed over the ranks: exactly 2(n-1) buffers, the ring's total (core/cost/comm.cpp).
  std::vector<double> total{static_cast<double>(c.bytes_sent())};
  ASSERT_TRUE(c.all_reduce(std::span<double>(total)));
  EXPECT_EQ(total[0], 2.0 * (n - 1) * count * (4 + 8));

  V m(3);
  for (int i = 0; i < 3; ++i) m[i] = static_cast<float>(i % 2 ? -r * 10 - i : r * 10 + i);
  ASSERT_TRUE(c.all_reduce(std::span<float>(m), ReduceOp::kMax));
  EXPECT_EQ(m, (V{static_cast<float>((n - 1) * 10), -1, static_cast<float>((n - 1) * 10 + 2)}));
}

TEST_F(Mpi, ReduceScatterSumsEachBlockOnItsRank) {
  const int block = 3;
  V send(n * block), recv(block, -1);
  for (int b = 0; b < n; ++b)
    for (int i = 0; i < block; ++i) send[b * block + i] = static_cast<float>(r + 10 * b + i);
  ASSERT_TRUE(c.reduce_scatter(send, recv));
  for (int i = 0; i < block; ++i) {
    EXPECT_EQ(recv[i], static_cast<float>(n * (n - 1) / 2 + n * (10 * r + i)));
  }
  EXPECT_EQ(c.bytes_sent(), static_cast<std::uint64_t>(block * (n - 1) * 4));
  EXPECT_EQ(c.bytes_received(), static_cast<std::uint64_t>(block * (n - 1) * 4));
}

TEST_F(Mpi, AllGatherAndAllGatherV) {
  V mine{static_cast<float>(r * 10), static_cast<float>(r * 10 + 1)}, all(2 * n, -1);
  ASSERT_TRUE(c.all_gather(std::span<const float>(mine), std::span<float>(all)));
  for (int p = 0; p < n; ++p) {
    EXPECT_EQ(all[2 * p], p * 10);
    EXPECT_EQ(all[2 * p + 1], p * 10 + 1);
  }
  EXPECT_EQ(c.bytes_sent(), 2u * 4 * (n - 1));
  c.reset_counters();

  // Rank p contributes p elements (rank 0 none), placed in reverse rank order.
  Counts counts(n), displs(n);
  std::size_t total = 0;
  for (int p = n - 1; p >= 0; --p) {
    counts[p] = p;
    displs[p] = total;
    total += p;
  }
  V part(r);
  for (int i = 0; i < r; ++i) part[i] = static_cast<float>(r * 100 + i);
  V gathered(total, -1);
  ASSERT_TRUE(c.all_gatherv(std::span<const float>(part), std::span<float>(gathered), counts,
                            displs));
  for (int p = 0; p < n; ++p)
    for (int i = 0; i < p; ++i) EXPECT_EQ(gathered[displs[p] + i], p * 100 + i);
  EXPECT_EQ(c.bytes_sent(), static_cast<std::uint64_t>(r * (n - 1) * 4));
  EXPECT_EQ(c.bytes_received(), static_cast<std::uint64_t>((total - r) * 4));
}

TEST_F(Mpi, AllToAllDeliversBlockRToRankR) {
  const int block = 2;
  V send(n * block), recv(n * block, -1);
  for (int d = 0; d < n; ++d)
    for (int i = 0; i < block; ++i) send[d * block + i] = static_cast<float>(r * 100 + d * 10 + i);
  ASSERT_TRUE(c.all_to_all(std::span<const float>(send), std::span<float>(recv)));
  for (int s = 0; s < n; ++s)
    for (int i = 0; i < block; ++i) EXPECT_EQ(recv[s * block + i], s * 100 + r * 10 + i);
  EXPECT_EQ(c.bytes_sent(), static_cast<std::uint64_t>(block * (n - 1) * 4));
  EXPECT_EQ(c.bytes_received(), static_cast<std::uint64_t>(block * (n - 1) * 4));
}

TEST_F(Mpi, AllToAllvUnevenCountsWithZeros) {
  // Rank s sends (s + d) % 3 elements to rank d: zeros on (0,0), (1,2), (2,1), (3,3), ...
  auto count = [](int s, int d) { return static_cast<std::size_t>((s + d) % 3); };
  Counts sc(n), sd(n), rc(n), rd(n);
  std::size_t send_total = 0, recv_total = 0;
  for (int p = 0; p < n; ++p) {
    sc[p] = count(r, p);
    sd[p] = send_total;
    send_total += sc[p];
  }
  for (int p = n - 1; p >= 0; --p) {  // received blocks stored in reverse rank order
    rc[p] = count(p, r);
    rd[p] = recv_total;
    recv_total += rc[p];
  }
  V send(send_total), recv(recv_total, -1);
  for (int d = 0; d < n; ++d)
    for (std::size_t i = 0; i < sc[d]; ++i) send[sd[d] + i] = static_cast<float>(r * 1000 + d * 100 + i);
  ASSERT_TRUE(c.all_to_allv(std::span<const float>(send), sc, sd, std::span<float>(recv), rc, rd));
  for (int s = 0; s < n; ++s)
    for (std::size_t i = 0; i < rc[s]; ++i) EXPECT_EQ(recv[rd[s] + i], s * 1000 + r * 100 + i);
  std::uint64_t sent = 0, received = 0;
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    sent += count(r, p) * 4;
    received += count(p, r) * 4;
  }
  EXPECT_EQ(c.bytes_sent(), sent);
  EXPECT_EQ(c.bytes_received(), received);
}

TEST_F(Mpi, SplitIntoPairsRunsCollectivesInsideEachPair) {
  // Pairs {0,1} and {2,3}; key -rank reverses the order inside each pair.
  auto sub = c.split(r / 2, -r);
  ASSERT_TRUE(sub) << sub.error_str();
  Communicator& pair = **sub;
  ASSERT_EQ(pair.size(), 2);
  EXPECT_EQ(pair.rank(), 1 - r % 2);
  EXPECT_EQ(pair.world_rank_of(pair.rank()), r);
  EXPECT_EQ(pair.world_rank_of(0), (r / 2) * 2 + 1);
  EXPECT_EQ(pair.timeout(), c.timeout());

  V v{static_cast<float>(r + 1)};
  ASSERT_TRUE(pair.all_reduce(std::span<float>(v)));
  EXPECT_EQ(v[0], static_cast<float>(r / 2 == 0 ? 1 + 2 : 3 + 4));

  V mine{static_cast<float>(r)}, both(2);
  ASSERT_TRUE(pair.all_gather(std::span<const float>(mine), std::span<float>(both)));
  EXPECT_EQ(both, (V{static_cast<float>(pair.world_rank_of(0)),
                     static_cast<float>(pair.world_rank_of(1))}));

  V out{static_cast<float>(r * 7)}, in(1);
  auto rq = pair.irecv(std::span<float>(in), 1 - pair.rank(), 0);
  ASSERT_TRUE(rq);
  ASSERT_TRUE(pair.send(std::span<const float>(out), 1 - pair.rank(), 0));
  ASSERT_TRUE(pair.wait(*rq));
  EXPECT_EQ(in[0], static_cast<float>((r ^ 1) * 7));
  EXPECT_EQ(pair.bytes_sent(), 4u + 4u + 4u);  // all_reduce (n=2, 1 element): 1, gather 1, p2p 1
  EXPECT_EQ(c.bytes_sent(), 0u);               // the parent counts its own traffic only

  // A negative color joins no group; the other three form one.
  auto three = c.split(r == 3 ? -1 : 0, r);
  ASSERT_TRUE(three);
  if (r == 3) {
    EXPECT_EQ(*three, nullptr);
  } else {
    ASSERT_NE(*three, nullptr);
    EXPECT_EQ((*three)->size(), 3);
    std::vector<double> one{1};
    ASSERT_TRUE((*three)->all_reduce(std::span<double>(one)));
    EXPECT_EQ(one[0], 3.0);
  }
}

TEST_F(Mpi, RecvFromASilentPeerTimesOutNamingItThenAllContinue) {
  // Rank 1 never sends tag 99 before the barrier; rank 0's 1 s receive must fail, not hang.
  V got(4, -1);
  if (r == 0) {
    c.set_timeout(std::chrono::seconds(1));
    const auto start = std::chrono::steady_clock::now();
    Status s = c.recv(std::span<float>(got), 1, 99);
    const auto waited = std::chrono::steady_clock::now() - start;
    ASSERT_FALSE(s);
    EXPECT_THAT(s.error_str(), HasSubstr("recv of 16 bytes from rank 1 (world rank 1), tag 99: "
                                         "timed out after 1"));
    EXPECT_GE(waited, std::chrono::seconds(1));
    EXPECT_LT(waited, std::chrono::seconds(5));
    EXPECT_TRUE(c.healthy());  // the receive was cancelled
    c.set_timeout(std::chrono::seconds(30));
  }
  ASSERT_TRUE(c.barrier());
  // The cancelled receive must not swallow a later message with the same tag.
  V sent{1, 2, 3, 4};
  if (r == 1) {
    ASSERT_TRUE(c.send(std::span<const float>(sent), 0, 99));
  }
  if (r == 0) {
    ASSERT_TRUE(c.recv(std::span<float>(got), 1, 99));
    EXPECT_EQ(got, sent);
    EXPECT_EQ(c.bytes_received(), 16u);  // the timed-out receive counted nothing
  }
}

TEST_F(Mpi, CollectiveTimeoutNamesTheGroupAndBreaksOnlyThatCommunicator) {
  auto sub = c.split(r / 2, r);
  ASSERT_TRUE(sub);
  Communicator& pair = **sub;
  if (r == 0) {
    // World rank 1 joins 1.5 s late: rank 0's 300 ms barrier gives up.
    pair.set_timeout(std::chrono::milliseconds(300));
    Status s = pair.barrier();
    ASSERT_FALSE(s);
    EXPECT_THAT(s.error_str(), HasSubstr("barrier over 2 ranks (world ranks 0,1): timed out"));
    EXPECT_THAT(s.error_str(), HasSubstr("waiting for the other ranks of the group to join; "
                                         "no answer from rank 1 (world rank 1)"));
    EXPECT_FALSE(pair.healthy());
    V v{1};
    Status later = pair.all_reduce(std::span<float>(v));
    EXPECT_THAT(later.error_str(), HasSubstr("all_reduce(sum): communicator unusable after an "
                                             "earlier failure (barrier over 2 ranks"));
  } else if (r == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    EXPECT_TRUE(pair.barrier());  // completes: rank 0's abandoned barrier is still posted
  } else {
    EXPECT_TRUE(pair.barrier());
  }
  EXPECT_TRUE(c.healthy());  // the world communicator is untouched
  // World rank 1 has joined by now, so rank 0's abandoned barrier can finish before `sub` is
  // freed.
  EXPECT_TRUE(c.barrier());
}

TEST_F(Mpi, CollectiveTimeoutNamesTheOneRankThatNeverArrived) {
  // World rank 2 is "in a long kernel"; the three others must all name it, and only it.
  // `v` is declared before `sub`: an abandoned all_reduce still writes it until `sub` is gone.
  std::vector<double> v{1};
  auto sub = c.split(0, r);
  ASSERT_TRUE(sub);
  Communicator& all = **sub;
  if (r == 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    EXPECT_TRUE(all.all_reduce(std::span<double>(v)));  // the others' calls are still posted
    EXPECT_EQ(v[0], 4.0);
  } else {
    all.set_timeout(std::chrono::milliseconds(300));
    Status s = all.all_reduce(std::span<double>(v));
    ASSERT_FALSE(s);
    EXPECT_THAT(s.error_str(), HasSubstr("no answer from rank 2 (world rank 2) (busy outside"));
    EXPECT_THAT(s.error_str(), ::testing::Not(HasSubstr("rank 0 (")));
    EXPECT_THAT(s.error_str(), ::testing::Not(HasSubstr("rank 1 (")));
    EXPECT_THAT(s.error_str(), ::testing::Not(HasSubstr("rank 3 (")));
  }
  EXPECT_TRUE(c.barrier());
}

TEST_F(Mpi, ProbeTagIsReserved) {
  V one{1};
  Status s = c.send(std::span<const float>(one), (r + 1) % n, MpiCommunicator::kProbeTag);
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error_str(), HasSubstr("tag 32767 is reserved (user tags are below 32767)"));
  EXPECT_TRUE(c.healthy());
}

}  // namespace
}  // namespace cpbench
