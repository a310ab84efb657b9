// communicator_contract.h — what every Communicator must do, as test bodies over a Communicator of
// 4 ranks (each rank's thread or process calls the same function): exact collectives on crafted
// inputs (small integers, so float sums are exact, as nccl-tests checks), the byte counters against
// the payload formulas, uneven all_to_allv with zeros, and split. MpiCommunicator's test runs them
// under mpirun -np 4, ThreadCommunicator's on 4 threads; a new backend's communicator runs them too.
// Requires: GoogleTest; a communicator of exactly 4 ranks with its counters reset. For tests only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "core/runtime/communicator.h"

namespace cpbench::contract {

using V = std::vector<float>;
using Counts = std::vector<std::size_t>;

inline void ring_send_recv(Communicator& c) {
  const int r = c.rank(), n = c.size();
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

inline void all_reduce_exact(Communicator& c) {
  const int r = c.rank(), n = c.size();
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

inline void reduce_scatter_blocks(Communicator& c) {
  const int r = c.rank(), n = c.size();
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

inline void all_gather_and_v(Communicator& c) {
  const int r = c.rank(), n = c.size();
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

inline void all_to_all_blocks(Communicator& c) {
  const int r = c.rank(), n = c.size();
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

inline void all_to_allv_uneven(Communicator& c) {
  const int r = c.rank(), n = c.size();
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

inline void split_into_pairs(Communicator& c) {
  const int r = c.rank(), n = c.size();
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

}  // namespace cpbench::contract
