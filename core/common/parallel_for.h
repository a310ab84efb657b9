// parallel_for.h — runs f(0) … f(n − 1) on `jobs` threads (the calling thread is one of them),
// each index exactly once, returning when all are done. The one thread pool of the search, the
// frontier tracking and frontier runs; f must be safe to call concurrently for distinct indices.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

namespace cpbench {

inline void parallel_for(size_t n, int jobs, const std::function<void(size_t)>& f) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next++) < n;) f(i);
  };
  std::vector<std::thread> threads;
  const int extra = std::min<int>(std::max(1, jobs), static_cast<int>(std::max<size_t>(n, 1))) - 1;
  for (int t = 0; t < extra; ++t) threads.emplace_back(worker);
  worker();
  for (auto& th : threads) th.join();
}

}  // namespace cpbench
