// Reader for CIFAR-10 in both of its layouts: the binary version (data_batch_1..5.bin,
// test_batch.bin) and the Python version torchvision downloads (cifar-10-batches-py).
#pragma once

#include "train/catalog/catalog.h"
#include "train/datasets/dataset.h"

#include <cstdint>
#include <string>

namespace train::datasets {

constexpr int64_t kCifarRecordBytes = catalog::kCifarRecordBytes;  ///< label byte + R, G, B planes
constexpr int64_t kCifarRecordsPerFile = catalog::kCifarRecordsPerFile;

/// Loads the train split (data_batch_1..5) or the test split (test_batch) found under `dir` by
/// catalog::locate: the files in `dir` itself (binary `.bin` or pickles), or in its
/// cifar-10-batches-bin or cifar-10-batches-py subfolder (torchvision's root). Normalized to
/// [-1, 1] as the seeds do (mean 0.5, std 0.5 per channel).
/// @throws train::DataError naming the file: missing files (listing every place looked), a binary
///   file of partial records, a pickle of another structure (never executed), labels outside 0..9.
TensorDataset load_cifar10(const std::string& dir, Split split, const LoadOptions& options = {});

}  // namespace train::datasets
