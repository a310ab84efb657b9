// communicator_test.cpp — the Communicator contract in one process: SelfCommunicator (every
// collective is the identity, self messages match by tag), argument validation and its error
// wording, byte counters, and the run_with_timeout deadline loop.
#include "core/runtime/communicator.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/runtime/collective_args.h"
#include "core/runtime/self_communicator.h"
#include "core/runtime/watchdog.h"

namespace cpbench {
namespace {

using ::testing::HasSubstr;
using V = std::vector<float>;
using Counts = std::vector<std::size_t>;

TEST(SelfCommunicator, CollectivesAreTheIdentity) {
  SelfCommunicator c;
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);

  V in{1.5f, -2, 3, 4}, out(4, 0);
  ASSERT_TRUE(c.all_to_all(std::span<const float>(in), std::span<float>(out)));
  EXPECT_EQ(out, in);
  out.assign(4, 0);
  ASSERT_TRUE(c.all_gather(std::span<const float>(in), std::span<float>(out)));
  EXPECT_EQ(out, in);
  out.assign(4, 0);
  ASSERT_TRUE(c.reduce_scatter(in, out));
  EXPECT_EQ(out, in);

  V data = in;
  ASSERT_TRUE(c.all_reduce(std::span<float>(data), ReduceOp::kSum));
  EXPECT_EQ(data, in);
  ASSERT_TRUE(c.all_reduce(std::span<float>(data), ReduceOp::kMax));
  EXPECT_EQ(data, in);
  std::vector<double> d{1e300, -7.25};
  ASSERT_TRUE(c.all_reduce(std::span<double>(d)));
  EXPECT_EQ(d, (std::vector<double>{1e300, -7.25}));
  ASSERT_TRUE(c.barrier());

  // Nothing leaves a size-1 group.
  EXPECT_EQ(c.bytes_sent(), 0u);
  EXPECT_EQ(c.bytes_received(), 0u);
}

TEST(SelfCommunicator, VariableCollectivesHonourDisplacements) {
  SelfCommunicator c;
  V in{1, 2, 3, 4, 5}, out(5, 0);
  ASSERT_TRUE(c.all_to_allv(std::span<const float>(in), Counts{3}, Counts{1},
                            std::span<float>(out), Counts{3}, Counts{2}));
  EXPECT_EQ(out, (V{0, 0, 2, 3, 4}));

  out.assign(5, 0);
  ASSERT_TRUE(c.all_gatherv(std::span<const float>(in.data(), 2), std::span<float>(out),
                            Counts{2}, Counts{3}));
  EXPECT_EQ(out, (V{0, 0, 0, 1, 2}));

  // Zero counts are legal and move nothing.
  out.assign(5, 9);
  ASSERT_TRUE(c.all_to_allv(std::span<const float>(in), Counts{0}, Counts{0},
                            std::span<float>(out), Counts{0}, Counts{0}));
  EXPECT_EQ(out, V(5, 9));
}

TEST(SelfCommunicator, SelfMessagesMatchByTagInPostingOrder) {
  SelfCommunicator c;
  V a{1, 2}, b{3, 4}, c2{5, 6}, got(2, 0);
  ASSERT_TRUE(c.send(std::span<const float>(a), 0, 1));
  ASSERT_TRUE(c.send(std::span<const float>(b), 0, 2));
  ASSERT_TRUE(c.send(std::span<const float>(c2), 0, 1));
  ASSERT_TRUE(c.recv(std::span<float>(got), 0, 2));
  EXPECT_EQ(got, b);
  ASSERT_TRUE(c.recv(std::span<float>(got), 0, 1));
  EXPECT_EQ(got, a);  // oldest tag-1 message first
  ASSERT_TRUE(c.recv(std::span<float>(got), 0, 1));
  EXPECT_EQ(got, c2);

  // A receive posted before its send completes when the send arrives.
  std::vector<std::byte> buffer(3);
  auto r = c.irecv(std::span<std::byte>(buffer), 0, 7);
  ASSERT_TRUE(r);
  auto done = c.test(*r);
  ASSERT_TRUE(done);
  EXPECT_FALSE(*done);
  const std::vector<std::byte> payload{std::byte{7}, std::byte{8}, std::byte{9}};
  ASSERT_TRUE(c.send(std::span<const std::byte>(payload), 0, 7));
  ASSERT_TRUE(c.wait(*r));
  EXPECT_FALSE(r->pending());
  EXPECT_EQ(buffer, payload);
  EXPECT_EQ(c.bytes_sent(), 0u);  // self messages stay on the rank
}

TEST(SelfCommunicator, UnmatchedReceiveIsAnErrorNotAHang) {
  SelfCommunicator c(5);
  V got(4);
  Status s = c.recv(std::span<float>(got), 0, 9);
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error_str(), HasSubstr("recv of 16 bytes from rank 0 (world rank 5), tag 9"));
  EXPECT_THAT(s.error_str(), HasSubstr("no matching send"));
  // The receive was withdrawn: the communicator stays usable.
  EXPECT_TRUE(c.healthy());
  EXPECT_TRUE(c.barrier());
}

TEST(SelfCommunicator, WrongMessageSizeNamesBothSizes) {
  SelfCommunicator c;
  V three{1, 2, 3}, four(4);
  ASSERT_TRUE(c.send(std::span<const float>(three), 0, 0));
  Status s = c.recv(std::span<float>(four), 0, 0);
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error_str(), HasSubstr("recv of 16 bytes from rank 0 (world rank 0), tag 0: got "
                                       "a message of 12 bytes"));
}

TEST(SelfCommunicator, SplitGivesASizeOneGroupOrNothing) {
  SelfCommunicator c(3);
  c.set_timeout(std::chrono::milliseconds(1234));
  auto sub = c.split(4, 0);
  ASSERT_TRUE(sub);
  ASSERT_NE(*sub, nullptr);
  EXPECT_EQ((*sub)->size(), 1);
  EXPECT_EQ((*sub)->world_rank_of(0), 3);
  EXPECT_EQ((*sub)->timeout(), std::chrono::milliseconds(1234));  // inherited
  auto none = c.split(-1, 0);
  ASSERT_TRUE(none);
  EXPECT_EQ(*none, nullptr);
}

TEST(Communicator, ValidationErrorsNameOperationAndPeer) {
  SelfCommunicator c;
  V buf(4);
  Status s = c.send(std::span<const float>(buf), 1, 0);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error_str(), "send: peer rank 1 is outside 0..0");
  s = c.recv(std::span<float>(buf), -1, 0);
  EXPECT_EQ(s.error_str(), "recv: peer rank -1 is outside 0..0");
  s = c.send(std::span<const float>(buf), 0, -3);
  EXPECT_EQ(s.error_str(), "send: tag -3 is negative");

  V out(4);
  s = c.all_to_allv(std::span<const float>(buf), Counts{2, 2}, Counts{0, 2},
                    std::span<float>(out), Counts{4}, Counts{0});
  EXPECT_EQ(s.error_str(),
            "all_to_allv: send counts and displacements need 1 entries each, got 2 and 2");
  s = c.all_to_allv(std::span<const float>(buf), Counts{4}, Counts{0}, std::span<float>(out),
                    Counts{3}, Counts{2});
  EXPECT_EQ(s.error_str(),
            "all_to_allv: recv block of rank 0 (displacement 2 + count 3) exceeds the buffer of "
            "4 elements");
  s = c.all_gather(std::span<const float>(buf), std::span<float>(out.data(), 3));
  EXPECT_EQ(s.error_str(), "all_gather: recv holds 3 elements, needs 1 ranks x 4");
  s = c.all_gatherv(std::span<const float>(buf), std::span<float>(out), Counts{3}, Counts{0});
  EXPECT_EQ(s.error_str(), "all_gatherv: this rank sends 4 elements but recv_counts[0] is 3");
  s = c.reduce_scatter(std::span<const float>(buf), std::span<float>(out.data(), 2));
  EXPECT_EQ(s.error_str(), "reduce_scatter(sum): send holds 4 elements, needs 1 ranks x 2");
  // Bad arguments are the caller's mistake, not a broken group.
  EXPECT_TRUE(c.healthy());
}

// Two ranks whose peer never answers: every wait times out after the timeout it is given, which
// the fake records instead of sleeping, and a timed-out receive is withdrawn.
class StalledPeerCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  int world_rank_of(int rank) const override { return rank; }
  std::vector<std::chrono::milliseconds> waited;

 protected:
  Expected<std::unique_ptr<RequestState>> do_isend(const void*, std::size_t, DataType, int,
                                                   int) override {
    return std::make_unique<RequestState>();
  }
  Expected<std::unique_ptr<RequestState>> do_irecv(void*, std::size_t, DataType, int,
                                                   int) override {
    return std::make_unique<RequestState>();
  }
  Status do_wait(RequestState&, std::chrono::milliseconds timeout, bool& withdrawn,
                 std::size_t&) override {
    waited.push_back(timeout);
    withdrawn = true;
    return Error{"", "", "timed out after " + std::to_string(timeout.count()) + " ms"};
  }
  Expected<bool> do_test(RequestState&, std::size_t&) override { return false; }
  Status do_all_to_allv(const void*, const std::size_t*, const std::size_t*, void*,
                        const std::size_t*, const std::size_t*, DataType) override {
    return unsupported();
  }
  Status do_all_gatherv(const void*, std::size_t, void*, const std::size_t*, const std::size_t*,
                        DataType) override {
    return unsupported();
  }
  Status do_reduce_scatter(const void*, void*, std::size_t, DataType, ReduceOp) override {
    return unsupported();
  }
  Status do_all_reduce(void*, std::size_t, DataType, ReduceOp) override { return unsupported(); }
  Status do_barrier() override { return unsupported(); }
  Expected<std::unique_ptr<Communicator>> do_split(int, int) override { return unsupported(); }

 private:
  static Error unsupported() { return Error{"", "", "not part of this fake"}; }
};

TEST(Communicator, WaitAllSharesOneDeadlineAndStopsWaitingAtTheFirstFailure) {
  // A stopped peer used to hold a rank for (requests x timeout): each request waited the full
  // timeout in turn. The set now has one deadline, and after the first failure the rest are only
  // polled, so the rank reports within one timeout.
  StalledPeerCommunicator c;
  c.set_timeout(std::chrono::milliseconds(5000));
  V a(4), b(4), d(4);
  std::vector<Request> requests;
  requests.push_back(std::move(*c.irecv(std::span<float>(a), 1, 1)));
  requests.push_back(std::move(*c.isend(std::span<const float>(b), 1, 2)));
  requests.push_back(std::move(*c.irecv(std::span<float>(d), 1, 3)));
  Status s = c.wait_all(requests);
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error_str(), HasSubstr("tag 1"));  // the first failure is the one reported
  ASSERT_EQ(c.waited.size(), 3u);
  EXPECT_LE(c.waited[0].count(), 5000);
  EXPECT_GT(c.waited[0].count(), 4000);
  EXPECT_EQ(c.waited[1].count(), 0);
  EXPECT_EQ(c.waited[2].count(), 0);
  for (const Request& r : requests) EXPECT_FALSE(r.pending());
}

TEST(CollectiveArgs, BlocksMustFitAndReceiveBlocksMustNotOverlap) {
  // Three ranks' blocks in a 10-element buffer: [0,3), [6,10), [3,6) fit and are disjoint.
  EXPECT_TRUE(check_blocks("op", "recv", 10, Counts{3, 4, 3}, Counts{0, 6, 3}, 3, true));
  // Rank 1's block [2,6) overlaps rank 0's [0,3): fine for a send, an error for a receive.
  EXPECT_TRUE(check_blocks("op", "send", 10, Counts{3, 4, 0}, Counts{0, 2, 9}, 3, false));
  EXPECT_EQ(check_blocks("op", "recv", 10, Counts{3, 4, 0}, Counts{0, 2, 9}, 3, true).error_str(),
            "op: recv blocks of ranks 0 and 1 overlap");
  // An empty block may sit anywhere inside the buffer, even at its end.
  EXPECT_TRUE(check_blocks("op", "recv", 10, Counts{0, 10, 0}, Counts{5, 0, 10}, 3, true));
  EXPECT_EQ(check_blocks("op", "send", 10, Counts{0, 1, 0}, Counts{0, 10, 0}, 3, false)
                .error_str(),
            "op: send block of rank 1 (displacement 10 + count 1) exceeds the buffer of 10 "
            "elements");
  auto [counts, displs] = equal_blocks(3, 4);
  EXPECT_EQ(counts, (Counts{4, 4, 4}));
  EXPECT_EQ(displs, (Counts{0, 4, 8}));
}

TEST(Communicator, ElementSizes) {
  EXPECT_EQ(element_size_bytes(DataType::kByte), 1u);
  EXPECT_EQ(element_size_bytes(DataType::kFloat32), 4u);
  EXPECT_EQ(element_size_bytes(DataType::kFloat64), 8u);
}

TEST(RunWithTimeout, ReturnsWhenThePollSucceeds) {
  int calls = 0;
  Status s = run_with_timeout([&]() -> Expected<bool> { return ++calls == 500; },
                              std::chrono::seconds(10), "waiting for rank 1");
  EXPECT_TRUE(s);
  EXPECT_EQ(calls, 500);  // stops at the first success, polls nothing more
}

TEST(RunWithTimeout, PassesThePollsErrorThrough) {
  Status s = run_with_timeout([]() -> Expected<bool> { return Error{"", "", "MPI_Test failed"}; },
                              std::chrono::seconds(10), "waiting for rank 1");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error_str(), "MPI_Test failed");
}

TEST(RunWithTimeout, MissedDeadlineNamesWhatItWaitedFor) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  Status s = run_with_timeout([]() -> Expected<bool> { return false; },
                              std::chrono::milliseconds(200), "waiting for rank 3");
  const auto waited = Clock::now() - start;
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error_str(), ::testing::MatchesRegex("timed out after 2[0-9][0-9] ms waiting for "
                                                     "rank 3"));
  EXPECT_GE(waited, std::chrono::milliseconds(200));
  EXPECT_LT(waited, std::chrono::milliseconds(2000));
}

}  // namespace
}  // namespace cpbench

namespace cpbench {
namespace {

// Batches (NCCL's groups): posts inside a bracket are issued at its end; a wait, a test or a
// collective inside one is an error, as is an end without a start; brackets nest.
TEST(CommunicatorBatch, BracketsNestAndRefuseWaitsInside) {
  SelfCommunicator c;
  EXPECT_THAT(c.group_end().error_str(), ::testing::HasSubstr("group_end without a group_start"));
  std::vector<float> out{1, 2}, in(2, 0);
  ASSERT_TRUE(c.group_start());
  ASSERT_TRUE(c.group_start());
  EXPECT_TRUE(c.in_group());
  auto r = c.irecv(std::span<float>(in), 0, 3);
  ASSERT_TRUE(r);
  auto s = c.isend(std::span<const float>(out), 0, 3);
  ASSERT_TRUE(s);
  EXPECT_THAT(c.wait(*r).error_str(), ::testing::HasSubstr("wait inside a group_start/group_end batch"));
  EXPECT_THAT(c.test(*r).error_str(), ::testing::HasSubstr("test inside a group_start/group_end batch"));
  EXPECT_THAT(c.barrier().error_str(), ::testing::HasSubstr("barrier inside a group_start/group_end batch"));
  ASSERT_TRUE(c.group_end());
  EXPECT_TRUE(c.in_group());  // the outer bracket is still open
  ASSERT_TRUE(c.group_end());
  EXPECT_FALSE(c.in_group());
  ASSERT_TRUE(c.wait(*r));
  ASSERT_TRUE(c.wait(*s));
  EXPECT_EQ(in, out);
  EXPECT_TRUE(c.healthy());
}

}  // namespace
}  // namespace cpbench
