// The image sources' cache files: names, atomic writes, whole-file and positioned reads (index_cache.h).
#include "index_cache.h"

#include "train/base/files.h"
#include "train/base/sha256.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

namespace train::datasets::detail {

std::string cache_file_name(const std::string& cache_dir, const std::string& prefix, const std::string& key,
                            const std::string& ext) {
  Sha256 h;
  h.update(key.data(), key.size());
  return files::join(cache_dir, prefix + "-" + h.hex().substr(0, 16) + ext);
}

namespace {

std::string write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::strerror(n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
  return "";
}

}  // namespace

std::string write_atomically(const std::string& path, const std::string& bytes) {
  const auto slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string made = files::make_dirs(path.substr(0, slash));
    if (!made.empty()) return "can't create the folder " + path.substr(0, slash) + ": " + made;
  }
  // mkstemp: a name no other process (rank, node) uses, so racing writers never share a temp file.
  std::string tmp = path + ".tmp.XXXXXX";
  std::vector<char> name(tmp.begin(), tmp.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd < 0) return "can't create a file next to " + path + ": " + std::strerror(errno);
  tmp = name.data();
  ::fchmod(fd, 0644);
  std::string err = write_all(fd, bytes);
  if (err.empty() && ::fsync(fd) != 0) err = std::strerror(errno);
  if (::close(fd) != 0 && err.empty()) err = std::strerror(errno);
  if (err.empty()) err = files::rename(tmp, path);
  if (!err.empty()) {
    files::remove_file(tmp);
    return "can't write " + path + ": " + err;
  }
  return "";
}

bool read_whole_file(const std::string& path, std::string& out) {
  out.clear();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (ok) {
    out.resize(static_cast<size_t>(st.st_size));
    const int64_t got = pread_full(fd, 0, out.size(), reinterpret_cast<uint8_t*>(out.data()));
    ok = got == static_cast<int64_t>(out.size());
  }
  ::close(fd);
  if (!ok) out.clear();
  return ok;
}

int64_t pread_full(int fd, uint64_t offset, uint64_t size, uint8_t* out) {
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    done += static_cast<uint64_t>(n);
  }
  return static_cast<int64_t>(done);
}

}  // namespace train::datasets::detail
