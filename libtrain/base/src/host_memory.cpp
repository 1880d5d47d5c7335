#include "train/base/host_memory.h"

#include <cstdio>
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace train::host_memory {

HeapSettings keep_freed_memory() {
  HeapSettings s;
#if defined(__GLIBC__)
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_")) {
    s.description = "heap: left as MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ set it";
    return s;
  }
  // 32 MiB is the largest mmap threshold glibc accepts on 64-bit (HEAP_MAX_SIZE / 2).
  constexpr size_t kMmap = size_t{32} << 20;
  constexpr size_t kTrim = size_t{1} << 30;
  const bool ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmap)) == 1 &&
                  mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrim)) == 1;
  s.applied = ok;
  s.mmap_threshold = kMmap;
  s.trim_threshold = kTrim;
  s.description = ok ? "heap: freed blocks under 32 MiB are kept for reuse (mmap threshold 32 MiB, "
                       "trim threshold 1 GiB)"
                     : "heap: mallopt refused the thresholds; glibc defaults stay";
#else
  s.description = "heap: not glibc, allocator defaults stay";
#endif
  return s;
}

Resident resident() {
  Resident r;
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return r;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    long kb = 0;
    if (std::sscanf(line, "VmHWM: %ld kB", &kb) == 1) r.peak_mb = static_cast<double>(kb) / 1024.0;
    if (std::sscanf(line, "RssAnon: %ld kB", &kb) == 1) r.anon_mb = static_cast<double>(kb) / 1024.0;
    if (std::sscanf(line, "RssFile: %ld kB", &kb) == 1) r.file_mb = static_cast<double>(kb) / 1024.0;
  }
  std::fclose(f);
  return r;
}

}  // namespace train::host_memory
