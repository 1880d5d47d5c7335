// What the image sources' cached lists share (image_folder.cpp, tar_shards.cpp): a cache file's
// name from a hash of what it lists, writing it atomically, a little binary encoding read back with
// bounds checks, and reading a file's bytes at an offset with pread.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace train::datasets::detail {

/// cache_dir/PREFIX-HASH.EXT, HASH = the first 16 hex digits of SHA-256(key).
std::string cache_file_name(const std::string& cache_dir, const std::string& prefix, const std::string& key,
                            const std::string& ext);

/// Writes `bytes` to `path` through a temporary file in the same folder (created if needed),
/// fsync'ed and renamed over `path`: a reader sees the old file or the whole new one. Returns "" on
/// success, else why not.
std::string write_atomically(const std::string& path, const std::string& bytes);

/// The whole file; false (and `out` empty) when it can't be read.
bool read_whole_file(const std::string& path, std::string& out);

/// Reads `size` bytes at `offset` of the open file `fd` into `out` (pread, retried on EINTR and
/// short reads). Returns the bytes read: less than `size` at the end of the file; -1 with errno on error.
int64_t pread_full(int fd, uint64_t offset, uint64_t size, uint8_t* out);

/// A modification time to the nanosecond.
struct FileTime {
  int64_t sec = 0;
  int64_t nsec = 0;
  bool operator==(const FileTime& o) const { return sec == o.sec && nsec == o.nsec; }
  bool operator!=(const FileTime& o) const { return !(*this == o); }
};

/// Appends numbers and length-prefixed strings (little-endian, as this machine stores them).
class ByteWriter {
 public:
  void u64(uint64_t v) { raw(&v, sizeof(v)); }
  void i64(int64_t v) { raw(&v, sizeof(v)); }
  void u32(uint32_t v) { raw(&v, sizeof(v)); }
  void u8(uint8_t v) { raw(&v, sizeof(v)); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void time(const FileTime& t) {
    i64(t.sec);
    i64(t.nsec);
  }
  void raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

/// Reads what ByteWriter wrote; any read past the end makes ok() false (and returns zeros), so a
/// cut or foreign file is refused after parsing instead of crashing.
class ByteReader {
 public:
  explicit ByteReader(const std::string& in) : in_(in) {}
  uint64_t u64() { return get<uint64_t>(); }
  int64_t i64() { return get<int64_t>(); }
  uint32_t u32() { return get<uint32_t>(); }
  uint8_t u8() { return get<uint8_t>(); }
  std::string str() {
    const uint32_t n = u32();
    if (!ok_ || in_.size() - pos_ < n) return fail_str();
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  /// Appends a length-prefixed string to `out` (no temporary string); returns its length.
  uint32_t str_into(std::string& out) {
    const uint32_t n = u32();
    if (!ok_ || in_.size() - pos_ < n) {
      ok_ = false;
      return 0;
    }
    out.append(in_, pos_, n);
    pos_ += n;
    return n;
  }
  FileTime time() {
    FileTime t;
    t.sec = i64();
    t.nsec = i64();
    return t;
  }
  /// Whether the next bytes are `text` (consumed if so).
  bool expect(const std::string& text) {
    if (!ok_ || in_.compare(pos_, text.size(), text) != 0) return ok_ = false;
    pos_ += text.size();
    return true;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == in_.size(); }

 private:
  template <typename T>
  T get() {
    T v{};
    if (!ok_ || in_.size() - pos_ < sizeof(T)) {
      ok_ = false;
      return v;
    }
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string fail_str() {
    ok_ = false;
    return {};
  }
  const std::string& in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace train::datasets::detail
