// A whole file mapped read-only into memory: what the .npy and token-file readers serve samples
// from. Its pages are the page cache's, so they count to no process's anonymous memory and the
// kernel can take them back under pressure.
#pragma once

#include <cstdint>
#include <string>

namespace train::datasets {

/// A read-only, shared memory map of a whole file, unmapped by the destructor. Reading it from
/// several threads at once is safe. An empty file maps to data() == nullptr and size() == 0.
/// The map is advised MADV_RANDOM (the loader reads samples in a shuffled order): a page fault
/// reads its own page, not the kernel's read-around of read_ahead_kb around it.
///
/// A file truncated by another process while mapped makes reads past its new end fault
/// (SIGBUS): replace data files by renaming a new one into place, never by rewriting them.
class MappedFile {
 public:
  /// Opens and maps `path`.
  /// @throws train::DataError naming the file when it can't be opened, isn't a regular file, or
  ///         can't be mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  /// The file's first byte (nullptr for an empty file).
  const uint8_t* data() const { return data_; }
  /// The file's size in bytes.
  uint64_t size() const { return size_; }
  /// The path it was opened with.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace train::datasets
