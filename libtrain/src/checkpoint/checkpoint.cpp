// CheckpointDir: atomic writes with a checksum trailer, and newest-valid lookup with fallback.
#include "train/checkpoint.h"

#include "train/base/error.h"
#include "train/base/files.h"
#include "train/base/log.h"
#include "train/base/sha256.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <regex>
#include <sstream>

namespace train {
namespace {

constexpr char kMagic[8] = {'L', 'T', 'C', 'K', 'P', 'T', '0', '1'};
constexpr size_t kTrailer = 8 + 32 + 8;

void write_all(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw CheckpointError(path + ": write failed (" + std::strerror(errno) + ").",
                            "free space on the checkpoint file system or pick another --checkpoint-dir; "
                            "earlier checkpoints are untouched.");
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

CheckpointDir::CheckpointDir(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  if (keep_ < 1) {
    throw ConfigError("--keep-checkpoints: expected at least 1, found " + std::to_string(keep_) + ".",
                      "keep 2 or more so that a corrupt newest file can fall back to an older one.");
  }
  const std::string err = files::make_dirs(dir_);
  if (!err.empty()) {
    throw CheckpointError("--checkpoint-dir " + dir_ + ": cannot create the folder (" + err + ").",
                          "pick a writable folder on a shared file system that every node sees.");
  }
}

std::string CheckpointDir::save(torch::serialize::OutputArchive& archive, int64_t step) {
  return write(serialize(archive, step), step);
}

std::string CheckpointDir::serialize(torch::serialize::OutputArchive& archive, int64_t step, size_t size_hint) {
  // Straight into one buffer, reserved at the last size: an ostringstream grows by copying and
  // str() copies once more, which for a model of some MB cost more than the archive's own work.
  std::string bytes;
  bytes.reserve(size_hint);
  try {
    archive.save_to([&bytes](const void* data, size_t n) {
      bytes.append(static_cast<const char*>(data), n);
      return n;
    });
  } catch (const std::exception& e) {
    throw CheckpointError("checkpoint of step " + std::to_string(step) + ": serialization failed (" +
                              std::string(e.what()).substr(0, 300) + ").",
                          "this is a bug in libtrain or a custom model; please report it.");
  }
  return bytes;
}

std::string CheckpointDir::write(const std::string& bytes, int64_t step) {
  const auto digest = sha256(bytes.data(), bytes.size());
  char trailer[kTrailer];
  uint64_t len = bytes.size();
  for (int i = 0; i < 8; ++i) trailer[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  std::memcpy(trailer + 8, digest.data(), 32);
  std::memcpy(trailer + 40, kMagic, 8);

  const std::string final_path = path_for(step);
  const std::string tmp = files::join(dir_, ".ckpt-" + std::to_string(step) + ".pt.tmp." + std::to_string(::getpid()));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw CheckpointError(tmp + ": cannot create (" + std::string(std::strerror(errno)) + ").",
                          "check that --checkpoint-dir is writable; earlier checkpoints are untouched.");
  }
  try {
    write_all(fd, bytes.data(), bytes.size(), tmp);
    write_all(fd, trailer, kTrailer, tmp);
    if (::fsync(fd) != 0) {
      throw CheckpointError(tmp + ": fsync failed (" + std::string(std::strerror(errno)) + ").",
                            "the file system may be full or failing; earlier checkpoints are untouched.");
    }
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw CheckpointError(final_path + ": rename from the temp file failed (" + err + ").",
                          "check the folder's permissions; earlier checkpoints are untouched.");
  }
  fsync_dir(dir_);

  // Prune only now that the new one is durable; only files older than it.
  auto files = list();
  int excess = static_cast<int>(files.size()) - keep_;
  for (int i = 0; i < excess; ++i) {
    if (files[i].step >= step) break;
    files::remove_file(files[i].path);
  }
  return final_path;
}

std::string CheckpointDir::path_for(int64_t step) const {
  return files::join(dir_, "ckpt-" + std::to_string(step) + ".pt");
}

std::vector<CheckpointFile> CheckpointDir::list() const {
  static const std::regex kName(R"(ckpt-(\d+)\.pt)");
  std::vector<CheckpointFile> out;
  for (const auto& name : files::list_dir(dir_)) {
    std::smatch m;
    if (std::regex_match(name, m, kName)) out.push_back({files::join(dir_, name), std::stoll(m[1].str())});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::vector<char> CheckpointDir::read_verified(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw CheckpointError(path + ": cannot open (" + std::string(std::strerror(errno)) + ").",
                          "check the path given to --resume.");
  }
  std::vector<char> data;
  char chunk[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    data.insert(data.end(), chunk, chunk + n);
  }
  ::close(fd);
  if (data.size() < kTrailer || std::memcmp(data.data() + data.size() - 8, kMagic, 8) != 0) {
    throw CheckpointError(path + ": expected a libtrain checkpoint ending in the LTCKPT01 trailer, found " +
                              std::to_string(data.size()) + " bytes without it (truncated or not a checkpoint).",
                          "the write was probably cut short; an older checkpoint is used instead.");
  }
  uint64_t len = 0;
  const char* t = data.data() + data.size() - kTrailer;
  for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(static_cast<unsigned char>(t[i])) << (8 * i);
  if (len != data.size() - kTrailer) {
    throw CheckpointError(path + ": expected " + std::to_string(len) + " archive bytes before the trailer, found " +
                              std::to_string(data.size() - kTrailer) + ".",
                          "the file is damaged; an older checkpoint is used instead.");
  }
  const auto digest = sha256(data.data(), len);
  if (std::memcmp(digest.data(), t + 8, 32) != 0) {
    throw CheckpointError(path + ": SHA-256 of the archive does not match the one recorded in the file.",
                          "the file is corrupt; an older checkpoint is used instead.");
  }
  data.resize(len);
  return data;
}

std::unique_ptr<torch::serialize::InputArchive> CheckpointDir::load_file(const std::string& path,
                                                                        std::optional<c10::Device> device) {
  std::vector<char> bytes = read_verified(path);
  auto archive = std::make_unique<torch::serialize::InputArchive>();
  try {
    archive->load_from(bytes.data(), bytes.size(), device);
  } catch (const std::exception& e) {
    throw CheckpointError(path + ": checksum verified but the archive does not parse (" +
                              std::string(e.what()).substr(0, 200) + ").",
                          "was it written by another libtrain/torch version?");
  }
  return archive;
}

std::optional<std::pair<std::unique_ptr<torch::serialize::InputArchive>, CheckpointFile>>
CheckpointDir::load_latest_valid(std::optional<c10::Device> device) const {
  auto files = list();
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    try {
      auto archive = load_file(it->path, device);
      return std::make_pair(std::move(archive), *it);
    } catch (const CheckpointError& e) {
      log::warn(std::string("skipping checkpoint: ") + e.what());
    }
  }
  return std::nullopt;
}

}  // namespace train
