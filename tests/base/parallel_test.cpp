// Tests for libtrain/base/src/parallel.cpp (train::parallel_for): every index runs once on at most
// the threads asked for, and a failure rethrows the lowest failing index's exception, whatever the
// threads' timing, with every index below it run and none above it started once it is known.
#include "train/base/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace train {
namespace {

TEST(ParallelFor, EveryIndexRunsOnceOnAtMostTheThreadsAskedFor) {
  for (int threads : {-1, 0, 1, 2, 3, 8, 100}) {
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
      std::mutex mu;
      std::set<std::thread::id> ids;
      parallel_for(n, threads, [&](int64_t i) {
        ++runs[static_cast<size_t>(i)];
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(runs[static_cast<size_t>(i)], 1) << "index " << i << " of " << n;
      EXPECT_LE(static_cast<int64_t>(ids.size()), std::max<int64_t>(1, std::min<int64_t>(threads, n)))
          << threads << " threads, " << n << " indices";
    }
  }
}

TEST(ParallelFor, OneThreadIsTheCallersInIndexOrder) {
  std::vector<int64_t> order;
  parallel_for(5, 1, [&](int64_t i) { order.push_back(i); });
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  const std::thread::id caller = std::this_thread::get_id();
  parallel_for(3, 1, [&](int64_t) { EXPECT_EQ(std::this_thread::get_id(), caller); });
}

// Index 3 fails late (after a sleep) and index 7 at once: 3's exception comes back every time, and
// indices 0..2 ran.
TEST(ParallelFor, TheLowestFailingIndexsExceptionIsRethrown) {
  for (int round = 0; round < 20; ++round) {
    std::vector<std::atomic<int>> runs(50);
    try {
      parallel_for(50, 4, [&](int64_t i) {
        ++runs[static_cast<size_t>(i)];
        if (i == 3) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          throw std::runtime_error("index 3");
        }
        if (i == 7) throw std::runtime_error("index 7");
      });
      ADD_FAILURE() << "expected an exception";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "index 3") << "round " << round;
    }
    for (int64_t i = 0; i <= 3; ++i) EXPECT_EQ(runs[static_cast<size_t>(i)], 1) << "index " << i;
  }
}

TEST(ParallelFor, NoIndexAboveAFailureStartsOnOneThread) {
  std::vector<int64_t> ran;
  EXPECT_THROW(parallel_for(10, 1,
                            [&](int64_t i) {
                              ran.push_back(i);
                              if (i == 2) throw std::logic_error("stop");
                            }),
               std::logic_error);
  EXPECT_EQ(ran, (std::vector<int64_t>{0, 1, 2}));
}

TEST(ParallelFor, AnyExceptionTypeComesBack) {
  EXPECT_THROW(parallel_for(4, 2, [](int64_t i) { if (i == 1) throw 42; }), int);
}

}  // namespace
}  // namespace train
