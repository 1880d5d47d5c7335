// Reader for the CIFAR-10 binary version: data_batch_1..5.bin and test_batch.bin.
#pragma once

#include "train/datasets/dataset.h"

#include <cstdint>
#include <string>

namespace train::datasets {

constexpr int64_t kCifarRecordBytes = 1 + 3 * 32 * 32;  ///< label byte + R, G, B planes
constexpr int64_t kCifarRecordsPerFile = 10000;

/// Loads the train split (data_batch_1..5.bin) or test split (test_batch.bin) from `dir`,
/// normalized to [-1, 1] as the seeds do (mean 0.5, std 0.5 per channel).
/// Each file must hold whole records; throws train::DataError naming the file otherwise,
/// or for a missing file or a label outside 0..9.
TensorDataset load_cifar10(const std::string& dir, Split split, const LoadOptions& options = {});

}  // namespace train::datasets
