// IdxDataset (idx.h): MNIST's and Fashion-MNIST's IDX files memory-mapped (unpacked once where
// they are gzip-compressed), checked as load_idx checks them, served one image at a time.
#include "train/datasets/idx.h"

#include "idx_format.h"
#include "uint8_table.h"
#include "unpack_cache.h"

#include "train/base/error.h"
#include "train/base/files.h"
#include "train/base/log.h"
#include "train/datasets/mapped_file.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>

#include <algorithm>

namespace train::datasets {
namespace {

// The file mapped where it lies, or its unpacked copy where it is gzip-compressed.
std::shared_ptr<const MappedFile> map_idx(const std::string& path, const std::string& unpack_dir) {
  if (!detail::is_gzip(path)) return std::make_shared<const MappedFile>(path);
  std::string stem = files::basename(path);
  if (stem.size() > 3 && stem.compare(stem.size() - 3, 3, ".gz") == 0) stem.resize(stem.size() - 3);
  return std::make_shared<const MappedFile>(detail::unpacked_copy(path, unpack_dir, stem, "gzip", detail::gunzip_to));
}

}  // namespace

IdxDataset::IdxDataset(const std::string& dir, Split split, const StreamOptions& options, const std::string& name)
    : name_(name + "/" + (split == Split::train ? "train" : "test")) {
  if (options.limit < 0) {
    throw ConfigError("sample limit: expected 0 (all) or a positive count, found " + std::to_string(options.limit) + ".",
                      "pass --limit-train-samples N with N >= 1.");
  }
  const bool known = name == "mnist" || name == "fashion-mnist";
  const catalog::Located found = catalog::locate(known ? name : "mnist", dir, split);
  const std::string unpack_dir = options.unpack_dir.empty() ? default_unpack_dir("") : options.unpack_dir;
  images_ = map_idx(found.paths.at(0), unpack_dir);
  labels_ = map_idx(found.paths.at(1), unpack_dir);
  // The messages name the files in --data, not the copies: that is what the user can fix.
  const detail::IdxImages header = detail::check_idx_images(images_->data(), images_->size(), found.paths.at(0));
  detail::check_idx_labels(labels_->data(), labels_->size(), found.paths.at(1), found.paths.at(0), header.count);
  const auto count = static_cast<int64_t>(header.count);
  rows_ = static_cast<int64_t>(header.rows);
  cols_ = static_cast<int64_t>(header.cols);
  size_ = options.limit > 0 ? std::min(options.limit, count) : count;
  table_ = detail::normalized_uint8_table(kMnistMean, kMnistStd);
  log::info(catalog::describe_source(name_, found, count, size_) + "; streamed: memory-mapped, read by the loader");
}

IdxDataset::~IdxDataset() = default;

const std::string& IdxDataset::images_path() const { return images_->path(); }
const std::string& IdxDataset::labels_path() const { return labels_->path(); }

Sample IdxDataset::get(int64_t index) {
  if (index < 0 || index >= size_) {
    throw DataError(name_ + ": expected a sample index in [0, " + std::to_string(size_) + "), found " +
                        std::to_string(index) + ".",
                    "the sampler and the dataset disagree on its size: build the sampler from this dataset's size().");
  }
  const int64_t pixels = rows_ * cols_;
  const uint8_t* image = images_->data() + catalog::kIdxImagesHeaderBytes + index * pixels;
  Sample s;
  s.input = at::empty({1, rows_, cols_}, at::kFloat);
  float* dst = s.input.data_ptr<float>();
  for (int64_t j = 0; j < pixels; ++j) dst[j] = table_[image[j]];
  s.target = at::scalar_tensor(static_cast<int64_t>(labels_->data()[catalog::kIdxLabelsHeaderBytes + index]), at::kLong);
  return s;
}

}  // namespace train::datasets
