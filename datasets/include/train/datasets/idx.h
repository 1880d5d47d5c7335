// Reader for the IDX format of MNIST and Fashion-MNIST (raw or gzip-compressed).
#pragma once

#include "train/catalog/catalog.h"
#include "train/datasets/dataset.h"

#include <cstdint>
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

}  // namespace train::datasets
