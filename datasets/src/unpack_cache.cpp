// Unpacked copies of data files in a cache folder (unpack_cache.h): keyed by the source's path,
// size and modification time, written to a private file and renamed into place.
#include "unpack_cache.h"

#include "train/base/absolute_path.h"
#include "train/base/error.h"
#include "train/base/files.h"
#include "train/base/log.h"
#include "train/base/sha256.h"
#include "train/base/text.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

namespace train::datasets::detail {
namespace {

struct SourceStat {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

SourceStat stat_source(const std::string& source) {
  struct stat st {};
  if (::stat(source.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    throw DataError(source + ": expected a readable data file on this node, found " +
                        (S_ISDIR(st.st_mode) ? std::string("a folder") : std::string(std::strerror(err))) + ".",
                    "check --data and that the file system holding it is mounted on this node.");
  }
  return {static_cast<uint64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + static_cast<int64_t>(st.st_mtim.tv_nsec)};
}

// 16 hex digits of SHA-256 over the source's absolute path, size and modification time.
std::string cache_key(const std::string& source, const SourceStat& s) {
  const std::string id = files::absolute(source) + "\n" + std::to_string(s.size) + "\n" + std::to_string(s.mtime_ns);
  Sha256 h;
  h.update(id.data(), id.size());
  return h.hex().substr(0, 16);
}

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "host";
  return host;
}

const char* const kCacheHint =
    "the copies go into --checkpoint-dir's 'unpacked' folder (else $SLURM_TMPDIR, $TMPDIR or /tmp): pass a "
    "--checkpoint-dir with room for the unpacked data, or unpack the files yourself (gunzip) and point --data there.";

// Writes the copy into `tmp` and renames it to `path`; removes `tmp` when anything fails.
uint64_t write_copy(const std::string& source, const std::string& tmp, const std::string& path, const Unpacker& unpack) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw DataError(tmp + ": expected to create the unpacked copy of " + source + ", found it can't be created (" +
                        std::strerror(err) + ").",
                    kCacheHint);
  }
  uint64_t bytes = 0;
  try {
    bytes = unpack(source, fd);
    if (::fsync(fd) != 0) {
      const int err = errno;
      throw DataError(tmp + ": expected the unpacked copy of " + source + " flushed to disk, found fsync failing (" +
                          std::strerror(err) + ").",
                      kCacheHint);
    }
  } catch (...) {
    ::close(fd);
    files::remove_file(tmp);
    throw;
  }
  ::close(fd);
  const std::string err = files::rename(tmp, path);
  if (!err.empty()) {
    files::remove_file(tmp);
    throw DataError(path + ": expected to rename the unpacked copy of " + source + " into place, found " + err + ".",
                    kCacheHint);
  }
  return bytes;
}

}  // namespace

void write_all(int fd, const void* data, uint64_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      throw DataError(path + ": expected to write " + std::to_string(size) + " more bytes, found a write error (" +
                          std::strerror(err) + ").",
                      kCacheHint);
    }
    p += n;
    size -= static_cast<uint64_t>(n);
  }
}

bool is_gzip(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  unsigned char magic[2] = {};
  const bool gz = ::pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  ::close(fd);
  return gz;
}

uint64_t gunzip_to(const std::string& source, int fd) {
  gzFile f = gzopen(source.c_str(), "rb");
  if (f == nullptr) {
    throw DataError(source + ": expected a gzip file this user can read, found it unreadable (" + std::strerror(errno) +
                        ").",
                    "check that the file exists and is readable by this user on this node.");
  }
  gzbuffer(f, 1 << 20);
  std::vector<char> chunk(1 << 20);
  uint64_t total = 0;
  const std::string out = "the unpacked copy of " + source;
  try {
    while (true) {
      const int n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()));
      if (n < 0) {
        int errnum = 0;
        throw DataError(source + ": expected a gzip stream, found a read error after " + std::to_string(total) +
                            " unpacked bytes (" + gzerror(f, &errnum) + ").",
                        "the file may be a truncated or corrupt gzip archive; re-download or re-extract it.");
      }
      if (n == 0) break;
      write_all(fd, chunk.data(), static_cast<uint64_t>(n), out);
      total += static_cast<uint64_t>(n);
    }
    int errnum = 0;
    const char* msg = gzerror(f, &errnum);
    if (errnum != Z_OK && errnum != Z_STREAM_END) {
      throw DataError(source + ": expected a whole gzip stream, found " + msg + " after " + std::to_string(total) +
                          " unpacked bytes.",
                      "the gzip archive is probably truncated; re-download it.");
    }
  } catch (...) {
    gzclose(f);
    throw;
  }
  if (gzclose(f) == Z_BUF_ERROR) {
    throw DataError(source + ": expected a gzip stream with its end marker, found it ending after " +
                        std::to_string(total) + " unpacked bytes (truncated archive).",
                    "re-download or re-copy the file.");
  }
  return total;
}

std::string unpacked_copy(const std::string& source, const std::string& cache_dir, const std::string& stem,
                          const std::string& what, const Unpacker& unpack) {
  const SourceStat s = stat_source(source);
  const std::string path = files::join(cache_dir, stem + "." + cache_key(source, s));
  if (files::is_regular_file(path)) {
    log::info("--stream: reusing " + path + ", the unpacked copy of " + source + " (" + what + ", " +
              std::to_string(s.size) + " bytes, unchanged since it was unpacked)");
    return path;
  }
  const std::string made = files::make_dirs(cache_dir);
  if (!made.empty()) {
    throw DataError(cache_dir + ": expected a folder for the unpacked copy of " + source + ", found " + made + ".",
                    kCacheHint);
  }
  const auto t0 = std::chrono::steady_clock::now();
  // Ranks are processes; threads of one process each get a copy of their own too.
  static std::atomic<int> copies{0};
  const std::string tmp = path + ".tmp." + host_name() + "." + std::to_string(::getpid()) + "." + std::to_string(copies++);
  const uint64_t bytes = write_copy(source, tmp, path, unpack);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info("--stream: unpacked " + source + " (" + what + ", " + std::to_string(s.size) + " bytes) into " +
            std::to_string(bytes) + " bytes at " + path + " in " + text::format("%.2f", seconds) +
            " s; later runs reuse it while the source keeps its size and modification time");
  return path;
}

}  // namespace train::datasets::detail
