// train::host_memory::keep_freed_memory: blocks up to 32 MiB come from the heap (and stay there
// for the next step) instead of fresh mmap'd, zero-filled pages; the user's MALLOC_* wins.
#include "train/base/host_memory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#if defined(__GLIBC__)
TEST(HostMemory, LargeBlocksComeFromTheHeapAfterwards) {
  const size_t before = mallinfo2().hblkhd;  // bytes in mmap'd blocks
  const auto s = train::host_memory::keep_freed_memory();
  ASSERT_TRUE(s.applied) << s.description;
  EXPECT_EQ(s.mmap_threshold, size_t{32} << 20);
  EXPECT_NE(s.description.find("32 MiB"), std::string::npos);
  void* p = std::malloc(20 << 20);  // an activation-sized block, above glibc's default threshold
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, 20 << 20);
  EXPECT_EQ(mallinfo2().hblkhd, before) << "a 20 MiB block must not be mmap'd any more";
  std::free(p);
  EXPECT_TRUE(train::host_memory::keep_freed_memory().applied) << "idempotent";
}

TEST(HostMemory, TheUsersMallocSettingsWin) {
  ::setenv("MALLOC_TRIM_THRESHOLD_", "1000000", 1);
  const auto s = train::host_memory::keep_freed_memory();
  ::unsetenv("MALLOC_TRIM_THRESHOLD_");
  EXPECT_FALSE(s.applied);
  EXPECT_NE(s.description.find("MALLOC_"), std::string::npos) << s.description;
}
#else
TEST(HostMemory, NotGlibc) {
  GTEST_SKIP() << "not glibc: keep_freed_memory() leaves the allocator alone";
}
#endif
