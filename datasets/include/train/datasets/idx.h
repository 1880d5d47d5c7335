// Readers for the IDX format of MNIST and Fashion-MNIST (raw or gzip-compressed): a split loaded
// whole into memory (load_idx), or memory-mapped and read sample by sample (IdxDataset, --stream).
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

/// MNIST's normalization, used by the seeds for MNIST and Fashion-MNIST alike.
constexpr double kMnistMean = catalog::kMnistMean;
constexpr double kMnistStd = catalog::kMnistStd;

/// Reads a whole file, gunzipping when it starts with the gzip magic. Throws DataError.
std::vector<uint8_t> read_file_bytes(const std::string& path);

/// Loads `train-images-idx3-ubyte` + `train-labels-idx1-ubyte` (or `t10k-*`), each raw or `.gz`,
/// from `dir` or torchvision's subfolder of it (MNIST/raw, FashionMNIST/raw: catalog::locate with
/// `name`, "mnist" for a name the catalog doesn't know), normalized with kMnistMean/kMnistStd. `name` labels errors and the result.
/// Throws train::DataError naming the file for: missing files, a wrong magic number, impossible
/// dimensions, a truncated or oversized body, image/label count mismatch, labels outside 0..9.
TensorDataset load_idx(const std::string& dir, Split split, const LoadOptions& options = {},
                       const std::string& name = "mnist");

class MappedFile;

/// A split of MNIST or Fashion-MNIST read sample by sample from its IDX files, memory-mapped
/// (what `train --stream` trains on): get(i) is load_idx's image i, bit for bit (float32
/// [1, rows, cols], normalized with kMnistMean/kMnistStd), and its label as int64 []. Raw files
/// are mapped where they lie; a gzip-compressed one is unpacked once into
/// StreamOptions::unpack_dir (gzip has no random access) and that copy is mapped, reused by later
/// runs while the source keeps its size and modification time. Safe to read from several threads.
class IdxDataset : public SampleDataset {
 public:
  /// Finds the split under `dir` as load_idx does (`name`: "mnist" or "fashion-mnist"), unpacks
  /// what is compressed, maps both files and checks them as load_idx does (header, dimensions,
  /// sizes, every label in 0..9) before serving a sample.
  /// @throws train::DataError naming the file: load_idx's errors, and a cache folder or copy that
  ///   can't be written (naming it); train::ConfigError for a negative limit.
  IdxDataset(const std::string& dir, Split split, const StreamOptions& options = {}, const std::string& name = "mnist");
  ~IdxDataset() override;

  /// The split's images, or StreamOptions::limit of them.
  int64_t size() const override { return size_; }
  /// Image `index` and its label.
  /// @throws train::DataError for an index outside [0, size()).
  Sample get(int64_t index) override;
  /// "fashion-mnist/train" and the like, as load_idx names the split.
  std::string name() const override { return name_; }

  /// The images' height and width.
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  /// The files mapped: the images and labels files themselves, or their unpacked copies.
  const std::string& images_path() const;
  const std::string& labels_path() const;

 private:
  std::string name_;
  std::shared_ptr<const MappedFile> images_, labels_;
  int64_t size_ = 0, rows_ = 0, cols_ = 0;
  std::array<float, 256> table_{};  // byte value -> its normalized float
};

}  // namespace train::datasets
