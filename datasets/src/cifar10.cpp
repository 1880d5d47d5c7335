// CIFAR-10 binary batches: 1 label byte then 3072 pixel bytes (R, G, B planes, row-major).
#include "train/datasets/cifar10.h"

#include "train/datasets/idx.h"
#include "train/error.h"
#include "train/files.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <vector>

namespace train::datasets {

TensorDataset load_cifar10(const std::string& dir, Split split, const LoadOptions& options) {
  std::vector<std::string> files;
  if (split == Split::train) {
    for (int i = 1; i <= 5; ++i) files.push_back("data_batch_" + std::to_string(i) + ".bin");
  } else {
    files.push_back("test_batch.bin");
  }
  const int64_t want = options.limit > 0 ? options.limit : INT64_MAX;

  std::vector<uint8_t> labels;
  std::vector<uint8_t> pixels;
  for (const auto& file : files) {
    if (int64_t(labels.size()) >= want) break;
    const std::string path = files::join(dir, file);
    if (!files::is_regular_file(path)) {
      throw DataError(path + ": not found (CIFAR-10 binary version expected: " +
                          "data_batch_1..5.bin and test_batch.bin).",
                      "pass --data with the cifar-10-batches-bin folder extracted from "
                      "cifar-10-binary.tar.gz.");
    }
    std::vector<uint8_t> bytes = read_file_bytes(path);
    if (bytes.empty() || bytes.size() % kCifarRecordBytes != 0) {
      throw DataError(path + ": expected whole records of " +
                          std::to_string(kCifarRecordBytes) + " bytes (" +
                          std::to_string(kCifarRecordsPerFile * kCifarRecordBytes) +
                          " bytes for 10000 records), found " + std::to_string(bytes.size()) +
                          " bytes (truncated?).",
                      "re-extract cifar-10-binary.tar.gz.");
    }
    const int64_t records = int64_t(bytes.size()) / kCifarRecordBytes;
    for (int64_t r = 0; r < records && int64_t(labels.size()) < want; ++r) {
      const uint8_t* rec = bytes.data() + r * kCifarRecordBytes;
      if (rec[0] > 9) {
        throw DataError(path + ": expected labels in 0..9, found " +
                            std::to_string(int(rec[0])) + " in record " + std::to_string(r) + ".",
                        "this is not the CIFAR-10 binary version (CIFAR-100 has 2 label bytes); "
                        "re-extract cifar-10-binary.tar.gz.");
      }
      labels.push_back(rec[0]);
      pixels.insert(pixels.end(), rec + 1, rec + kCifarRecordBytes);
    }
  }
  const int64_t n = int64_t(labels.size());
  TensorDataset ds;
  ds.name = std::string("cifar10/") + (split == Split::train ? "train" : "test");
  ds.num_classes = 10;
  auto raw = at::from_blob(pixels.data(), {n, 3, 32, 32}, at::kByte);
  ds.images = raw.to(at::kFloat).div_(255.0).sub_(0.5).div_(0.5).contiguous();
  ds.labels = at::from_blob(labels.data(), {n}, at::kByte).to(at::kLong);
  return ds;
}

}  // namespace train::datasets
