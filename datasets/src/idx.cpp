// IDX decoding with every header and size check done before a byte of the body is touched.
#include "train/datasets/idx.h"

#include "idx_format.h"

#include "train/catalog/catalog.h"
#include "train/base/error.h"
#include "train/base/files.h"
#include "train/base/log.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <zlib.h>

#include <cstring>

namespace train::datasets {
namespace {

constexpr uint32_t kImagesMagic = catalog::kIdxImagesMagic;
constexpr uint32_t kLabelsMagic = catalog::kIdxLabelsMagic;
// MNIST-like sets never have more than a few million images of a few dozen pixels a side.
constexpr uint64_t kMaxPixelsPerImage = 1u << 20;

uint32_t read_be32(const uint8_t* b, size_t off) {
  return (uint32_t(b[off]) << 24) | (uint32_t(b[off + 1]) << 16) | (uint32_t(b[off + 2]) << 8) |
         uint32_t(b[off + 3]);
}

}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  // gzopen reads plain files transparently, so one path serves raw and .gz files.
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    throw DataError(path + ": cannot open (" + std::strerror(errno) + ").",
                    "check that the file exists and is readable by this user on this node.");
  }
  gzbuffer(f, 1 << 20);
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  while (true) {
    int n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int errnum = 0;
      std::string msg = gzerror(f, &errnum);
      gzclose(f);
      throw DataError(path + ": read failed (" + msg + ").",
                      "the file may be a truncated or corrupt gzip archive; re-download or "
                      "re-extract it.");
    }
    if (n == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  // A gzip stream cut short reads as EOF without error in some zlib versions: check explicitly.
  int errnum = 0;
  const char* msg = gzerror(f, &errnum);
  if (errnum != Z_OK && errnum != Z_STREAM_END) {
    std::string m = msg;
    gzclose(f);
    throw DataError(path + ": read failed (" + m + ").",
                    "the gzip archive is probably truncated; re-download it.");
  }
  int rc = gzclose(f);
  if (rc == Z_BUF_ERROR) {
    throw DataError(path + ": the gzip stream ends before its end marker (truncated archive).",
                    "re-download or re-copy the file.");
  }
  return out;
}

namespace detail {

void check_idx_labels(const uint8_t* lab, uint64_t size, const std::string& labels_path, const std::string& images_path,
                      uint64_t count) {
  if (size < 8) {
    throw DataError(labels_path + ": expected an IDX labels header of 8 bytes, found a file of " +
                        std::to_string(size) + " bytes.",
                    "the file is empty or truncated; re-extract the dataset archive.");
  }
  if (read_be32(lab, 0) != kLabelsMagic) {
    throw DataError(labels_path + ": expected IDX labels magic number 2049, found " +
                        std::to_string(read_be32(lab, 0)) + ".",
                    "this is not an idx1-ubyte labels file.");
  }
  const uint64_t label_count = read_be32(lab, 4);
  if (label_count != count) {
    throw DataError(labels_path + ": expected " + std::to_string(count) + " labels to match " +
                        images_path + ", found " + std::to_string(label_count) + ".",
                    "the images and labels files come from different splits or datasets.");
  }
  if (size != 8 + label_count) {
    throw DataError(labels_path + ": expected " + std::to_string(8 + label_count) + " bytes for " +
                        std::to_string(label_count) + " labels, found " + std::to_string(size) +
                        (size < 8 + label_count ? " (truncated?)." : " (trailing bytes?)."),
                    "re-extract the dataset archive.");
  }
  for (uint64_t i = 0; i < label_count; ++i) {
    if (lab[8 + i] >= catalog::kNumClasses) {
      throw DataError(labels_path + ": expected labels in 0..9, found " +
                          std::to_string(int(lab[8 + i])) + " at index " + std::to_string(i) + ".",
                      "the labels file is corrupt; re-extract the dataset archive.");
    }
  }
}

IdxImages check_idx_images(const uint8_t* img, uint64_t size, const std::string& images_path) {
  if (size < 16) {
    throw DataError(images_path + ": expected an IDX images header of 16 bytes, found a file of " +
                        std::to_string(size) + " bytes.",
                    "the file is empty or truncated; re-extract the dataset archive.");
  }
  if (read_be32(img, 0) != kImagesMagic) {
    throw DataError(images_path + ": expected IDX images magic number 2051, found " +
                        std::to_string(read_be32(img, 0)) + ".",
                    "this is not an idx3-ubyte images file (labels file passed as images? "
                    "still compressed with something other than gzip?).");
  }
  const uint64_t count = read_be32(img, 4), rows = read_be32(img, 8), cols = read_be32(img, 12);
  if (count == 0 || rows == 0 || cols == 0 || rows * cols > kMaxPixelsPerImage) {
    throw DataError(images_path + ": expected positive image count and dimensions, found " +
                        std::to_string(count) + " images of " + std::to_string(rows) + "x" +
                        std::to_string(cols) + ".",
                    "the header is corrupt; re-extract the dataset archive.");
  }
  const uint64_t expected_img = 16 + count * rows * cols;
  if (size != expected_img) {
    throw DataError(images_path + ": expected " + std::to_string(expected_img) + " bytes for " +
                        std::to_string(count) + " images of " + std::to_string(rows) + "x" +
                        std::to_string(cols) + ", found " + std::to_string(size) +
                        (size < expected_img ? " (truncated?)." : " (trailing bytes?)."),
                    "re-extract the dataset archive.");
  }
  return {count, rows, cols};
}

}  // namespace detail

TensorDataset load_idx(const std::string& dir, Split split, const LoadOptions& options,
                       const std::string& name) {
  // The folder itself or torchvision's subfolder (MNIST/raw, FashionMNIST/raw); each file raw or .gz.
  const bool known = name == "mnist" || name == "fashion-mnist";
  const catalog::Located found = catalog::locate(known ? name : "mnist", dir, split);
  const std::string& images_path = found.paths.at(0);
  const std::string& labels_path = found.paths.at(1);

  std::vector<uint8_t> img = read_file_bytes(images_path);
  std::vector<uint8_t> lab = read_file_bytes(labels_path);

  const detail::IdxImages header = detail::check_idx_images(img.data(), img.size(), images_path);
  const uint64_t count = header.count, rows = header.rows, cols = header.cols;
  detail::check_idx_labels(lab.data(), lab.size(), labels_path, images_path, count);

  int64_t n = static_cast<int64_t>(count);
  if (options.limit > 0 && options.limit < n) n = options.limit;
  log::info(catalog::describe_source(name + "/" + (split == Split::train ? "train" : "test"), found,
                                     static_cast<int64_t>(count), n));

  TensorDataset ds;
  ds.name = name + "/" + (split == Split::train ? "train" : "test");
  ds.num_classes = 10;
  auto raw = at::from_blob(img.data() + 16, {n, 1, int64_t(rows), int64_t(cols)}, at::kByte);
  // (x / 255 - mean) / std, as torchvision's ToTensor + Normalize compute it.
  ds.images = raw.to(at::kFloat).div_(255.0).sub_(kMnistMean).div_(kMnistStd).contiguous();
  ds.labels = at::from_blob(lab.data() + 8, {n}, at::kByte).to(at::kLong);
  return ds;
}

}  // namespace train::datasets
