// nccl_communicator_gpu_test.cpp (label gpu: run on a device by scripts/device_check.sh) — the
// NCCL communicator's contract on one GPU, one rank (what a one-GPU machine can check; several
// ranks need one GPU each, under mpirun): a send to itself paired with its receive in one batch,
// on device and on host buffers; each collective on device and host memory; byte counters; a
// split; the deadline (a group a peer never joins ends at the timeout, saying so); an unpaired
// receive from itself an error naming the peer, the communicator unusable after.
#include "core/runtime/cuda/nccl_communicator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace cpbench {
namespace {

using V = std::vector<float>;

// A device copy of `host`, and back.
float* to_device(const V& host) {
  float* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(1, host.size()) * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}
V to_host(const float* p, size_t n) {
  V out(n);
  EXPECT_EQ(cudaMemcpy(out.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

std::unique_ptr<NcclCommunicator> one_rank(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto id = NcclCommunicator::new_unique_id();
  EXPECT_TRUE(id.ok()) << id.error_str();
  auto c = NcclCommunicator::create(*id, 0, 1, {0}, nullptr, timeout);
  EXPECT_TRUE(c.ok()) << c.error_str();
  return c.ok() ? std::move(*c) : nullptr;
}

TEST(NcclCommunicator, ASendToItselfInOneBatchOnDeviceAndHostMemory) {
  auto c = one_rank();
  ASSERT_TRUE(c);
  float* out = to_device({1, 2, 3});
  float* in = to_device({0, 0, 0});
  ASSERT_TRUE(c->group_start());
  auto r = c->irecv(std::span<float>(in, 3), 0, 5);
  auto s = c->isend(std::span<const float>(out, 3), 0, 5);
  ASSERT_TRUE(r.ok() && s.ok());
  ASSERT_TRUE(c->group_end());
  std::vector<Request> reqs;
  reqs.push_back(std::move(*r));
  reqs.push_back(std::move(*s));
  ASSERT_TRUE(c->wait_all(reqs));
  EXPECT_EQ(to_host(in, 3), (V{1, 2, 3}));
  // Host buffers are staged through the device.
  V host_out{4, 5}, host_in{0, 0};
  ASSERT_TRUE(c->group_start());
  auto r2 = c->irecv(std::span<float>(host_in), 0, 6);
  auto s2 = c->isend(std::span<const float>(host_out), 0, 6);
  ASSERT_TRUE(c->group_end());
  ASSERT_TRUE(c->wait(*r2));
  ASSERT_TRUE(c->wait(*s2));
  EXPECT_EQ(host_in, (V{4, 5}));
  // A send to oneself is not counted (Communicator's rule).
  EXPECT_EQ(c->bytes_sent(), 0u);
  cudaFree(out);
  cudaFree(in);
}

TEST(NcclCommunicator, CollectivesOnDeviceAndHostMemory) {
  auto c = one_rank();
  ASSERT_TRUE(c);
  float* d = to_device({1, 2});
  ASSERT_TRUE(c->all_reduce(std::span<float>(d, 2)));
  EXPECT_EQ(to_host(d, 2), (V{1, 2}));
  std::vector<double> host{3, 4};
  ASSERT_TRUE(c->all_reduce(std::span<double>(host), ReduceOp::kMax));
  EXPECT_EQ(host, (std::vector<double>{3, 4}));
  V gathered(2);
  ASSERT_TRUE(c->all_gather(std::span<const float>(d, 2), std::span<float>(gathered)));
  EXPECT_EQ(gathered, (V{1, 2}));
  V a2a(2);
  ASSERT_TRUE(c->all_to_all(std::span<const float>(d, 2), std::span<float>(a2a)));
  EXPECT_EQ(a2a, (V{1, 2}));
  V block(2);
  ASSERT_TRUE(c->reduce_scatter(std::span<const float>(d, 2), std::span<float>(block)));
  EXPECT_EQ(block, (V{1, 2}));
  ASSERT_TRUE(c->barrier());
  auto half = c->split(0, 0);
  ASSERT_TRUE(half.ok()) << half.error_str();
  ASSERT_TRUE(*half);
  EXPECT_EQ((*half)->size(), 1);
  EXPECT_EQ((*half)->world_rank_of(0), 0);
  ASSERT_TRUE((*half)->barrier());
  cudaFree(d);
}

// The deadline: a communicator of two ranks that only this one joins does not finish initialising;
// create() gives up at the timeout and says why, instead of hanging.
TEST(NcclCommunicator, AGroupAPeerNeverJoinsEndsAtTheDeadline) {
  auto id = NcclCommunicator::new_unique_id();
  ASSERT_TRUE(id.ok()) << id.error_str();
  const auto t0 = std::chrono::steady_clock::now();
  auto c = NcclCommunicator::create(*id, 0, 2, {0, 1}, nullptr, std::chrono::milliseconds(1000));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error_str().find("did not finish initialising within 1000 ms"), std::string::npos) << c.error_str();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

// A receive from itself without its send in the same batch: NCCL refuses it at once (a one-rank
// communicator cannot wait for anyone); the error names the operation and the peer, and the
// communicator is unusable after.
TEST(NcclCommunicator, AnUnpairedReceiveFromItselfIsAnErrorAndLeavesItUnusable) {
  auto c = one_rank(std::chrono::milliseconds(2000));
  ASSERT_TRUE(c);
  float* in = to_device({0});
  auto r = c->irecv(std::span<float>(in, 1), 0, 9);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_str().find("from rank 0 (world rank 0)"), std::string::npos) << r.error_str();
  EXPECT_FALSE(c->barrier());
  cudaFree(in);
}

}  // namespace
}  // namespace cpbench
