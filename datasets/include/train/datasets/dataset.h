// The built-in datasets by name: a split decoded whole into one image tensor and one label tensor
// (load_dataset), or read sample by sample from its files on the loader's threads (open_stream).
#pragma once

#include "train/catalog/catalog.h"
#include "train/sample_dataset.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
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

/// Options of the built-in datasets read sample by sample (train --stream).
struct StreamOptions {
  /// Serve only the first `limit` samples (0: all). A limit above the split's size serves all.
  int64_t limit = 0;
  /// Where files that can't be memory-mapped as they are (gzip-compressed IDX files, CIFAR-10's
  /// Python batches) are unpacked once and reused; "" = default_unpack_dir("").
  std::string unpack_dir;
};

/// The folder --stream unpacks into: `checkpoint_dir`/unpacked when a checkpoint folder is given
/// (the run's own storage, kept with its checkpoints), else $SLURM_TMPDIR/libtrain-unpacked (the
/// job's node-local storage), else $TMPDIR/libtrain-unpacked, else /tmp/libtrain-unpacked-<uid>.
std::string default_unpack_dir(const std::string& checkpoint_dir);

/// Opens a split of a built-in dataset by name, read sample by sample: "mnist", "fashion-mnist"
/// (IdxDataset, train/datasets/idx.h) or "cifar10" (Cifar10Dataset, train/datasets/cifar10.h),
/// found under `dir` as load_dataset finds it. A sample is load_dataset's, bit for bit: the same
/// float32 [C, H, W] image, normalized alike, and its label as int64 [].
/// @throws train::ConfigError for an unknown name or a negative limit; train::DataError as the
///   datasets' constructors.
std::shared_ptr<SampleDataset> open_stream(const std::string& name, const std::string& dir, Split split,
                                           const StreamOptions& options = {});

/// $TRAIN_FASHION_MNIST_DIR if set, else the folder where Debian's dataset-fashion-mnist
/// package puts its files (/usr/share/datasets/fashion-mnist), or "" if absent.
std::string default_fashion_mnist_dir();

}  // namespace train::datasets
