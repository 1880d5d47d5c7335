// Host heap tuning for training loops. Each CPU training step frees and re-allocates the same
// few-MB activation tensors; with glibc's default (dynamic) thresholds the freed memory goes back
// to the kernel at the end of a step and comes back as fresh zeroed pages in the next one,
// measured at ~8000 page faults and ~30% of a 1-thread MNIST step (docs/benchmarks.md).
#pragma once

#include <cstddef>
#include <string>

namespace train::host_memory {

struct HeapSettings {
  bool applied = false;        ///< false where the C library has no such knobs (not glibc)
  size_t mmap_threshold = 0;   ///< blocks at least this big come from mmap (and go back at free)
  size_t trim_threshold = 0;   ///< free memory at the heap's top kept before returning it
  std::string description;     ///< one line for the log
};

/// Keeps freed blocks below 32 MiB in the heap for reuse (glibc mallopt: fixed mmap threshold
/// 32 MiB, trim threshold 1 GiB). Peak RSS grows by about one step's working set; page faults
/// per step drop to ~0. Safe to call at any time, idempotent. MALLOC_MMAP_THRESHOLD_ or
/// MALLOC_TRIM_THRESHOLD_ in the environment mean the user chose: then nothing is changed.
HeapSettings keep_freed_memory();

/// This process's resident memory now, from /proc/self/status, in MB: its peak (VmHWM), and the
/// anonymous (RssAnon: heap, tensors) and file-backed (RssFile: memory-mapped files and libraries,
/// which the kernel can take back) parts. All 0 where the file can't be read.
struct Resident {
  double peak_mb = 0, anon_mb = 0, file_mb = 0;
};
Resident resident();

}  // namespace train::host_memory
