// train::parallel_for (train/base/parallel.h): threads that take the next index from a counter, and
// the lowest failing index's exception kept for the caller.
#include "train/base/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace train {

void parallel_for(int64_t n, int threads, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> failed_at{n};  // the lowest index that threw so far; n while none has (the
                                      // loop's end: indices above a failure are not started)
  std::exception_ptr error;           // its exception
  std::mutex error_mutex;
  const auto work = [&] {
    for (int64_t i = next++; i < failed_at.load(); i = next++) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (i < failed_at.load()) {
          failed_at = i;
          error = std::current_exception();
        }
      }
    }
  };
  const int64_t count = std::min<int64_t>(std::max(threads, 1), n);
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < count; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace train
