// train::parallel_for: a loop over indices on a few threads that stops at a failure and rethrows
// the exception of the lowest index that failed. No LibTorch (layer 0), for the launcher too.
#pragma once

#include <cstdint>
#include <functional>

namespace train {

/// Runs fn(i) for i in [0, n) on up to `threads` threads (the calling thread is one of them; fewer
/// than 1 counts as 1, and no more threads than indices are started). Indices are handed out in
/// increasing order. When fn throws, no index above the lowest one that threw is started any more;
/// every index below it still runs, and once all threads have stopped that index's exception is
/// rethrown: for a deterministic fn, the same exception whatever the threads' timing.
void parallel_for(int64_t n, int threads, const std::function<void(int64_t)>& fn);

}  // namespace train
