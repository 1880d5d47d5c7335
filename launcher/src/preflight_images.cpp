// check_images: the images train would read, each checked where it lies (its head and tail, or a
// whole decode), on a few threads; the bad ones named with what was expected and found.
#include "preflight_images.h"

#include "train/base/error.h"
#include "train/base/parallel.h"
#include "train/base/text.h"
#include "train/datasets/image.h"
#include "train/datasets/image_folder.h"
#include "train/datasets/tar_shards.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>

namespace train::detail {
namespace {

// Bytes read from a file's start for its header: a JPEG's frame header follows its APP segments
// (EXIF thumbnails can be tens of KiB).
constexpr size_t kHeadBytes = 256 * 1024;

// The head and tail of an image held in `bytes` (a shard member) or in the file at `where`.
void check_bytes(const std::vector<uint8_t>& head, const std::vector<uint8_t>& tail, const std::string& where,
                 bool decode, const std::vector<uint8_t>* whole) {
  const datasets::ImageHeader h = datasets::read_image_header(head.data(), head.size(), where);
  if (!datasets::image_ends_whole(h.format, tail.data(), tail.size())) {
    throw DataError(where + ": expected a complete " + datasets::image_format_name(h.format) + " image of " +
                        std::to_string(h.width) + "x" + std::to_string(h.height) + ", found one that doesn't end as " +
                        (h.format == datasets::ImageFormat::jpeg ? "a JPEG ends (no EOI marker)" : "a PNG ends (no IEND chunk)") +
                        ": truncated?",
                    "re-copy the file from its source, or remove it (train --bad-samples skip goes past it).");
  }
  if (decode && whole != nullptr) (void)datasets::decode_image(whole->data(), whole->size(), where);
}

std::vector<uint8_t> read_at(int fd, off_t at, size_t n, const std::string& where) {
  std::vector<uint8_t> b(n);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, b.data() + got, n - got, at + static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      throw DataError(where + ": expected " + std::to_string(n) + " bytes at offset " + std::to_string(at) + ", found " +
                          (r < 0 ? std::string(std::strerror(errno)) : "the end of the file after " + std::to_string(got)) + ".",
                      "check the file system, or re-copy the file.");
    }
    got += static_cast<size_t>(r);
  }
  return b;
}

// An image file: its head and tail (or all of it, to decode).
void check_file(const std::string& path, bool decode) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw DataError(path + ": expected a readable image file, found " + why + ".", "check the file's permissions.");
  }
  try {
    const size_t size = static_cast<size_t>(st.st_size);
    if (decode) {
      const std::vector<uint8_t> all = read_at(fd, 0, size, path);
      check_bytes(all, all, path, true, &all);
    } else {
      const std::vector<uint8_t> head = read_at(fd, 0, std::min(size, kHeadBytes), path);
      const size_t t = std::min<size_t>(size, 64);
      check_bytes(head, read_at(fd, static_cast<off_t>(size - t), t, path), path, false, nullptr);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

// Runs check(i) for i in [0, n) on `threads` threads; the failures' messages, in index order.
// Every image is checked, however many fail: check's train::Error is caught and kept here, so
// parallel_for (which stops at a failure) sees none; any other exception still ends the loop and
// comes back from parallel_for.
template <typename Check>
std::vector<std::string> check_all(int64_t n, int threads, const Check& check) {
  std::mutex mu;
  std::vector<std::pair<int64_t, std::string>> bad;
  train::parallel_for(n, threads, [&](int64_t i) {
    try {
      check(i);
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(mu);
      bad.emplace_back(i, e.what());
    }
  });
  std::sort(bad.begin(), bad.end());
  std::vector<std::string> out;
  for (const auto& [i, message] : bad) {
    if (static_cast<int>(out.size()) == kMaxNamed) {
      out.push_back("... and " + std::to_string(bad.size() - kMaxNamed) + " more bad images (the first " +
                    std::to_string(kMaxNamed) + " are named above).");
      break;
    }
    out.push_back(message);
  }
  return out;
}

void append(std::vector<std::string>& to, const std::vector<std::string>& from) { to.insert(to.end(), from.begin(), from.end()); }

ImageCheck check_folder(const std::string& dir, const std::string& eval_data, bool decode, int threads) {
  ImageCheck c;
  std::vector<std::string> splits = {datasets::find_split_folder(dir, datasets::ImageSplit::train).path};
  const std::string eval = eval_data.empty() ? datasets::find_split_folder(dir, datasets::ImageSplit::eval, false).path
                                             : eval_data;
  if (!eval.empty()) splits.push_back(eval);
  int64_t images = 0;
  for (const std::string& split : splits) {
    const std::unique_ptr<datasets::ImageFolder> folder = datasets::open_image_folder(split, "");
    images += folder->size();
    append(c.errors, check_all(folder->size(), threads, [&](int64_t i) { check_file(folder->path(i), decode); }));
  }
  c.summary = std::to_string(images) + " images in " + std::to_string(splits.size()) + " split folder(s) " +
              (decode ? "decoded whole" : "checked (header and end)");
  return c;
}

ImageCheck check_shards(const std::string& data, const std::string& eval_data, bool decode, int threads) {
  ImageCheck c;
  int64_t images = 0, shards = 0;
  for (const std::string& spec : {data, eval_data}) {
    if (spec.empty()) continue;
    const std::unique_ptr<datasets::TarShards> s = datasets::open_tar_shards(spec, "");  // the tars' structure
    images += s->size();
    shards += static_cast<int64_t>(s->shards().size());
    append(c.errors, check_all(s->size(), threads, [&](int64_t i) {
      const datasets::EncodedImage e = s->read(i);
      const size_t t = std::min<size_t>(e.bytes.size(), 64);
      const std::vector<uint8_t> tail(e.bytes.end() - static_cast<std::ptrdiff_t>(t), e.bytes.end());
      check_bytes(e.bytes, tail, e.where, decode, &e.bytes);
    }));
  }
  c.summary = std::to_string(images) + " images in " + std::to_string(shards) + " WebDataset shards " +
              (decode ? "decoded whole" : "checked (header and end)");
  return c;
}

}  // namespace

ImageCheck check_images(const std::string& dataset, const std::string& data, const std::string& eval_data, bool decode,
                        int threads) {
  return dataset == "webdataset" ? check_shards(data, eval_data, decode, threads)
                                 : check_folder(data, eval_data, decode, threads);
}

}  // namespace train::detail
