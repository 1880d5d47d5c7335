// MappedFile: open, fstat, mmap (mapped_file.h).
#include "train/datasets/mapped_file.h"

#include "train/base/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace train::datasets {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw DataError(path + ": expected a readable file, found none (" + std::strerror(err) + ").",
                    "check the path, and that the file exists and is readable by this user on "
                    "every node the job runs on.");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DataError(path + ": expected a regular file, found " +
                        (S_ISDIR(st.st_mode) ? std::string("a folder") : std::string("another kind of file")) + ".",
                    "name the data file itself, not its folder.");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    // MAP_SHARED read-only: the page cache's pages, shared by every rank of the node.
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw DataError(path + ": expected to map " + std::to_string(size_) + " bytes, found mmap failing (" +
                          std::strerror(err) + ").",
                      "the file system may not support memory maps (some FUSE mounts don't), or the "
                      "address space is limited (ulimit -v): copy the file to local storage.");
    }
    data_ = static_cast<const uint8_t*>(p);
    // Samples are read in a shuffled order: without this advice a page fault reads read_ahead_kb
    // around it (8 MiB on a virtual disk here), megabytes for a sample of a few hundred bytes,
    // which under a memory limit are read and evicted again (34 GiB read for 300 steps of a token
    // file, docs/benchmarks.md). A hint only: a file system that ignores it reads as before.
    (void)::madvise(p, size_, MADV_RANDOM);
  }
  ::close(fd);  // the mapping keeps the file open
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace train::datasets
