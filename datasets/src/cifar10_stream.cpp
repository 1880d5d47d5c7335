// Cifar10Dataset (cifar10.h): CIFAR-10's binary batches memory-mapped (the Python version's
// pickles decoded once into binary batches in the unpack folder), served one record at a time.
#include "train/datasets/cifar10.h"

#include "uint8_table.h"
#include "unpack_cache.h"

#include "train/base/error.h"
#include "train/base/files.h"
#include "train/base/log.h"
#include "train/catalog/cifar_batch.h"
#include "train/datasets/mapped_file.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>

#include <algorithm>

namespace train::datasets {
namespace {

// A pickle decoded by the restricted reader and written as the binary version's records.
uint64_t pickle_to_binary(const std::string& source, int fd) {
  const cifar::Batch b = cifar::read_batch(source, catalog::Format::cifar_pickle);
  const std::string out = "the unpacked copy of " + source;
  std::vector<uint8_t> records(static_cast<size_t>(b.size() * kCifarRecordBytes));
  for (int64_t r = 0; r < b.size(); ++r) {
    uint8_t* rec = records.data() + r * kCifarRecordBytes;
    rec[0] = b.labels[static_cast<size_t>(r)];
    std::copy_n(b.pixels.data() + r * catalog::kCifarPixelBytes, catalog::kCifarPixelBytes, rec + 1);
  }
  detail::write_all(fd, records.data(), records.size(), out);
  return records.size();
}

// The records of one binary batch, mapped; `source` (the file in --data) names it in errors.
std::shared_ptr<const MappedFile> map_batch(const std::string& path, const std::string& source) {
  auto f = std::make_shared<const MappedFile>(path);
  const auto size = static_cast<int64_t>(f->size());
  if (size == 0 || size % kCifarRecordBytes != 0) {
    throw DataError(source + ": expected whole records of " + std::to_string(kCifarRecordBytes) + " bytes (" +
                        std::to_string(kCifarRecordsPerFile * kCifarRecordBytes) + " bytes for " +
                        std::to_string(kCifarRecordsPerFile) + " records), found " + std::to_string(size) +
                        " bytes (truncated? a record size other than 3073?).",
                    "re-extract cifar-10-binary.tar.gz.");
  }
  const std::string warning = cifar::record_count_warning(source, size / kCifarRecordBytes);
  if (!warning.empty()) log::warn(warning);
  return f;
}

}  // namespace

Cifar10Dataset::Cifar10Dataset(const std::string& dir, Split split, const StreamOptions& options)
    : name_(std::string("cifar10/") + (split == Split::train ? "train" : "test")) {
  if (options.limit < 0) {
    throw ConfigError("sample limit: expected 0 (all) or a positive count, found " + std::to_string(options.limit) + ".",
                      "pass --limit-train-samples N with N >= 1.");
  }
  const catalog::Located found = catalog::locate("cifar10", dir, split);
  const std::string unpack_dir = options.unpack_dir.empty() ? default_unpack_dir("") : options.unpack_dir;
  int64_t total = 0;
  for (const std::string& source : found.paths) {
    const std::string path =
        found.format == catalog::Format::cifar_pickle
            ? detail::unpacked_copy(source, unpack_dir, files::basename(source) + ".bin", "CIFAR-10 pickle", pickle_to_binary)
            : source;
    files_.push_back(map_batch(path, source));
    first_.push_back(total);
    total += static_cast<int64_t>(files_.back()->size()) / kCifarRecordBytes;
  }
  first_.push_back(total);
  size_ = options.limit > 0 ? std::min(options.limit, total) : total;
  table_ = detail::normalized_uint8_table(catalog::kCifarMean, catalog::kCifarStd);
  log::info(catalog::describe_source(name_, found, total, size_) + "; streamed: memory-mapped, read by the loader");
}

Cifar10Dataset::~Cifar10Dataset() = default;

Sample Cifar10Dataset::get(int64_t index) {
  if (index < 0 || index >= size_) {
    throw DataError(name_ + ": expected a sample index in [0, " + std::to_string(size_) + "), found " +
                        std::to_string(index) + ".",
                    "the sampler and the dataset disagree on its size: build the sampler from this dataset's size().");
  }
  // The file holding the record: the last whose first record is at or before it.
  const auto f = static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), index) - first_.begin() - 1);
  const int64_t record = index - first_[f];
  const uint8_t* rec = files_[f]->data() + record * kCifarRecordBytes;
  if (rec[0] >= catalog::kNumClasses) {
    throw DataError(files_[f]->path() + ": expected labels in 0..9, found " + std::to_string(int(rec[0])) +
                        " in record " + std::to_string(record) + " (sample " + std::to_string(index) + ").",
                    "this is not the CIFAR-10 binary version (CIFAR-100 has 2 label bytes); "
                    "re-extract cifar-10-binary.tar.gz.");
  }
  Sample s;
  s.input = at::empty({3, 32, 32}, at::kFloat);
  float* dst = s.input.data_ptr<float>();
  for (int64_t j = 0; j < catalog::kCifarPixelBytes; ++j) dst[j] = table_[rec[1 + j]];
  s.target = at::scalar_tensor(static_cast<int64_t>(rec[0]), at::kLong);
  return s;
}

}  // namespace train::datasets
