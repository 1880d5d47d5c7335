// In-memory datasets: the whole split decoded once into one image tensor and one label tensor.
#pragma once

#include "train/catalog/catalog.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace train::datasets {

/// A whole dataset split held in memory.
struct TensorDataset {
  at::Tensor images;  ///< float32 [N, C, H, W], normalized
  at::Tensor labels;  ///< int64 [N], in [0, num_classes)
  int64_t num_classes = 10;
  std::string name;   ///< e.g. "fashion-mnist/train"

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

/// Which split of a dataset to load (the catalog's).
using Split = catalog::Split;

/// Options shared by the loaders.
struct LoadOptions {
  /// Keep only the first `limit` samples (0: all). A limit above the split's size keeps all.
  int64_t limit = 0;
};

/// Loads a dataset by name: "mnist", "fashion-mnist" (IDX files, raw or .gz) or "cifar10" (binary
/// or Python batches) from `dir`: a flat folder of its files, or torchvision's root folder (the
/// dataset's own subfolder is found inside it, see catalog::locate). Throws train::DataError for
/// a missing file (listing every place looked and how to get the files) or a malformed one, and
/// train::ConfigError for an unknown name.
TensorDataset load_dataset(const std::string& name, const std::string& dir, Split split,
                           const LoadOptions& options = {});

/// $TRAIN_FASHION_MNIST_DIR if set, else the folder where Debian's dataset-fashion-mnist
/// package puts its files (/usr/share/datasets/fashion-mnist), or "" if absent.
std::string default_fashion_mnist_dir();

}  // namespace train::datasets
