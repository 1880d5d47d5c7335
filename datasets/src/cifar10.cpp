// CIFAR-10 in either of its layouts: the binary version (data_batch_N.bin: records of 1 label byte
// then 3072 pixel bytes, R, G, B planes, row-major) and the Python version torchvision downloads
// (cifar-10-batches-py/data_batch_N: pickles, read by the restricted reader in cifar_pickle.cpp).
#include "train/datasets/cifar10.h"

#include "cifar_pickle.h"
#include "train/catalog.h"
#include "train/datasets/idx.h"
#include "train/error.h"

#include <ATen/ops/from_blob.h>

#include <vector>

namespace train::datasets {
namespace {

// Appends the records of one binary batch file, up to `want` samples in all.
void read_binary(const std::string& path, int64_t want, std::vector<uint8_t>& labels, std::vector<uint8_t>& pixels) {
  std::vector<uint8_t> bytes = read_file_bytes(path);
  if (bytes.empty() || bytes.size() % kCifarRecordBytes != 0) {
    throw DataError(path + ": expected whole records of " + std::to_string(kCifarRecordBytes) + " bytes (" +
                        std::to_string(kCifarRecordsPerFile * kCifarRecordBytes) +
                        " bytes for 10000 records), found " + std::to_string(bytes.size()) +
                        " bytes (truncated? a record size other than 3073?).",
                    "re-extract cifar-10-binary.tar.gz.");
  }
  const int64_t records = int64_t(bytes.size()) / kCifarRecordBytes;
  for (int64_t r = 0; r < records && int64_t(labels.size()) < want; ++r) {
    const uint8_t* rec = bytes.data() + r * kCifarRecordBytes;
    if (rec[0] >= catalog::kNumClasses) {
      throw DataError(path + ": expected labels in 0..9, found " + std::to_string(int(rec[0])) + " in record " +
                          std::to_string(r) + ".",
                      "this is not the CIFAR-10 binary version (CIFAR-100 has 2 label bytes); "
                      "re-extract cifar-10-binary.tar.gz.");
    }
    labels.push_back(rec[0]);
    pixels.insert(pixels.end(), rec + 1, rec + kCifarRecordBytes);
  }
}

// Appends the samples of one pickled batch, up to `want` samples in all.
void read_pickle(const std::string& path, int64_t want, std::vector<uint8_t>& labels, std::vector<uint8_t>& pixels) {
  const detail::CifarPickleBatch b = detail::decode_cifar_pickle(path, read_file_bytes(path));
  const int64_t take = std::min<int64_t>(int64_t(b.labels.size()), want - int64_t(labels.size()));
  labels.insert(labels.end(), b.labels.begin(), b.labels.begin() + take);
  pixels.insert(pixels.end(), b.pixels.begin(), b.pixels.begin() + take * catalog::kCifarPixelBytes);
}

}  // namespace

TensorDataset load_cifar10(const std::string& dir, Split split, const LoadOptions& options) {
  const catalog::Located found = catalog::locate("cifar10", dir, split);
  const int64_t want = options.limit > 0 ? options.limit : INT64_MAX;
  std::vector<uint8_t> labels;
  std::vector<uint8_t> pixels;
  for (const std::string& path : found.paths) {
    if (int64_t(labels.size()) >= want) break;
    if (found.format == catalog::Format::cifar_pickle) {
      read_pickle(path, want, labels, pixels);
    } else {
      read_binary(path, want, labels, pixels);
    }
  }
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
