// mpi_communicator_mpi_test.cpp — MpiCommunicator on 4 ranks (mpirun -np 4): the Communicator
// contract every implementation passes (communicator_contract.h: exact collectives, byte counters,
// uneven all_to_allv, split), then MPI's own: world ranks, the reserved probe tag, and timeouts that
// name the peer and leave the job able to continue.
#include "core/runtime/mpi_communicator.h"
#include "core/runtime/communicator_contract.h"
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

TEST_F(Mpi, RingSendRecvBlockingAndNonBlocking) { contract::ring_send_recv(c); }

TEST_F(Mpi, AllReduceSumAndMaxAreExact) { contract::all_reduce_exact(c); }

TEST_F(Mpi, ReduceScatterSumsEachBlockOnItsRank) { contract::reduce_scatter_blocks(c); }

TEST_F(Mpi, AllGatherAndAllGatherV) { contract::all_gather_and_v(c); }

TEST_F(Mpi, AllToAllDeliversBlockRToRankR) { contract::all_to_all_blocks(c); }

TEST_F(Mpi, AllToAllvUnevenCountsWithZeros) { contract::all_to_allv_uneven(c); }

TEST_F(Mpi, SplitIntoPairsRunsCollectivesInsideEachPair) { contract::split_into_pairs(c); }

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
