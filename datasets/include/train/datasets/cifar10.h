// Readers for CIFAR-10 in both of its layouts: the binary version (data_batch_1..5.bin,
// test_batch.bin) and the Python version torchvision downloads (cifar-10-batches-py), loaded whole
// into memory (load_cifar10) or memory-mapped and read sample by sample (Cifar10Dataset, --stream).
#pragma once

#include "train/catalog/catalog.h"
#include "train/datasets/dataset.h"
#include "train/sample_dataset.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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

class MappedFile;

/// A split of CIFAR-10 read sample by sample, memory-mapped (what `train --stream` trains on):
/// get(i) is load_cifar10's image i, bit for bit (float32 [3, 32, 32], normalized with mean and std
/// 0.5), and its label as int64 []. The binary version's batches (data_batch_N.bin) are mapped
/// where they lie; the Python version's pickles are decoded once by the restricted reader (never
/// executed) and written as binary batches into StreamOptions::unpack_dir, reused by later runs
/// while the source keeps its size and modification time. Safe to read from several threads.
class Cifar10Dataset : public SampleDataset {
 public:
  /// Finds the split under `dir` as load_cifar10 does and maps its files; checks that each holds
  /// whole records (a file of another count than 10000 is used, with load_cifar10's warning).
  /// Labels are checked as samples are read (get()), not all at start.
  /// @throws train::DataError naming the file: missing files (every place looked), an empty file
  ///   or partial records, a pickle the reader refuses, a cache folder or copy that can't be
  ///   written; train::ConfigError for a negative limit.
  Cifar10Dataset(const std::string& dir, Split split, const StreamOptions& options = {});
  ~Cifar10Dataset() override;

  /// The split's records (all files), or StreamOptions::limit of them.
  int64_t size() const override { return size_; }
  /// Record `index` (of the files in order): its image and label.
  /// @throws train::DataError for an index outside [0, size()), or a label outside 0..9 (naming
  ///   the file and the record).
  Sample get(int64_t index) override;
  /// "cifar10/train" or "cifar10/test".
  std::string name() const override { return name_; }

 private:
  std::string name_;
  std::vector<std::shared_ptr<const MappedFile>> files_;  // the binary batches, in order
  std::vector<int64_t> first_;                            // the first record of each file; then the total
  int64_t size_ = 0;
  std::array<float, 256> table_{};  // byte value -> its normalized float
};

}  // namespace train::datasets
