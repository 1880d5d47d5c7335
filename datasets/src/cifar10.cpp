// CIFAR-10 in either of its layouts: the binary version (data_batch_N.bin: records of 1 label byte
// then 3072 pixel bytes, R, G, B planes, row-major) and the Python version torchvision downloads
// (cifar-10-batches-py/data_batch_N: pickles), both decoded by train::base (train/catalog/cifar_batch.h).
#include "train/datasets/cifar10.h"

#include "train/catalog/catalog.h"
#include "train/catalog/cifar_batch.h"
#include "train/base/error.h"
#include "train/base/files.h"
#include "train/base/log.h"

#include <ATen/ops/from_blob.h>

#include <algorithm>
#include <vector>

namespace train::datasets {

TensorDataset load_cifar10(const std::string& dir, Split split, const LoadOptions& options) {
  const catalog::Located found = catalog::locate("cifar10", dir, split);
  const int64_t want = options.limit > 0 ? options.limit : INT64_MAX;
  std::vector<uint8_t> labels;
  std::vector<uint8_t> pixels;
  int64_t total = 0;
  // Every file is read and checked whole, also those past a sample limit: a broken data_batch_5
  // fails a short test run too, not the first full one.
  for (const std::string& path : found.paths) {
    const cifar::Batch b = cifar::read_batch(path, found.format);
    const std::string warning = cifar::record_count_warning(path, b.size());
    if (!warning.empty()) log::warn(warning);
    total += b.size();
    const int64_t take = std::min<int64_t>(b.size(), want - int64_t(labels.size()));
    if (take <= 0) continue;
    labels.insert(labels.end(), b.labels.begin(), b.labels.begin() + take);
    pixels.insert(pixels.end(), b.pixels.begin(), b.pixels.begin() + take * catalog::kCifarPixelBytes);
  }
  log::info(catalog::describe_source(std::string("cifar10/") + (split == Split::train ? "train" : "test"), found, total,
                            int64_t(labels.size())));
  const int64_t n = int64_t(labels.size());
  TensorDataset ds;
  ds.name = std::string("cifar10/") + (split == Split::train ? "train" : "test");
  ds.num_classes = catalog::kNumClasses;
  auto raw = at::from_blob(pixels.data(), {n, 3, 32, 32}, at::kByte);
  // Normalize(0.5, 0.5, 0.5): (x / 255 - 0.5) / 0.5, as torchvision's transform computes it.
  ds.images = raw.to(at::kFloat).div_(255.0).sub_(catalog::kCifarMean).div_(catalog::kCifarStd).contiguous();
  ds.labels = at::from_blob(labels.data(), {n}, at::kByte).to(at::kLong);
  return ds;
}

}  // namespace train::datasets
