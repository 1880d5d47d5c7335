// The catalog: what libtrain knows about its built-in models and datasets, in one place and
// without LibTorch. For each model its recipe (optimizer, batch size, learning rate, schedule,
// epochs, dataset); for each dataset the folders to look in (flat, torchvision's subfolders),
// the file names, their formats (IDX magic numbers, CIFAR-10 record sizes, pickles) and how to
// get them. `train` (builtin.cpp), the dataset readers and `trainctl preflight` all read it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace train::catalog {

// ---- Formats ----

constexpr uint32_t kIdxImagesMagic = 2051;  ///< 00 00 08 03: unsigned bytes, 3 dimensions
constexpr uint32_t kIdxLabelsMagic = 2049;  ///< 00 00 08 01: unsigned bytes, 1 dimension
constexpr int64_t kIdxImagesHeaderBytes = 16;
constexpr int64_t kIdxLabelsHeaderBytes = 8;
constexpr int64_t kCifarPixelBytes = 3 * 32 * 32;            ///< R, G, B planes of 32x32
constexpr int64_t kCifarRecordBytes = 1 + kCifarPixelBytes;  ///< binary version: label byte + pixels
constexpr int64_t kCifarRecordsPerFile = 10000;
constexpr int kNumClasses = 10;  ///< every built-in dataset has 10 classes
/// Normalization, (x / 255 - mean) / std, as torchvision's Normalize does in the usual scripts: MNIST's for MNIST and
/// Fashion-MNIST alike, Normalize(0.5, 0.5, 0.5) for CIFAR-10.
constexpr double kMnistMean = 0.1307;
constexpr double kMnistStd = 0.3081;
constexpr double kCifarMean = 0.5;
constexpr double kCifarStd = 0.5;

/// How a dataset's files are encoded.
enum class Format {
  idx,           ///< MNIST's IDX files, raw or gzip-compressed (`.gz`)
  cifar_binary,  ///< CIFAR-10 binary version: records of 1 label byte + 3072 pixel bytes
  cifar_pickle,  ///< CIFAR-10 Python version: a pickled dict with `data` (uint8 N x 3072) and `labels`
};

/// "IDX", "CIFAR-10 binary", "CIFAR-10 Python pickle".
std::string format_name(Format format);

/// Which split of a dataset.
enum class Split { train, test };

// ---- Recipes ----

/// How a built-in model trains (the recipe its usual training script uses).
struct Recipe {
  std::string optimizer;  ///< "adadelta" | "sgd"
  int64_t batch_size;     ///< per rank
  double lr;
  double gamma;           ///< StepLR factor per epoch (1: constant)
  double weight_decay;
  double momentum;        ///< SGD only
  int epochs;             ///< default number of epochs
  std::string dataset;    ///< the dataset it trains on by default
  std::string schedule = "step";  ///< "step": StepLR by gamma each epoch; "warmup_cosine": per step (below)
  bool nesterov = false;          ///< SGD only
  double warmup_fraction = 0;     ///< warmup_cosine: the share of the run's steps that warm up linearly
  int step_size = 1;              ///< "step": epochs between two multiplications by gamma
};

/// ResNet-18's recipe on ImageNet-sized images (an image folder or shards at 64 px or more), as
/// torchvision's reference (references/classification): SGD 0.1 with momentum 0.9 for 32 images
/// per rank (a global batch of 256 on 8 GPUs), weight decay 1e-4, 90 epochs, the rate divided by 10
/// every 30.
const Recipe& imagenet_recipe();

/// ImageNet's per-channel normalization (torchvision's): mean and std of R, G and B.
constexpr double kImageNetMean[3] = {0.485, 0.456, 0.406};
constexpr double kImageNetStd[3] = {0.229, 0.224, 0.225};

/// The recipe of a built-in model ("mnist", "cifar10", "resnet18"); a model the catalog doesn't know gets
/// MNIST's (Adadelta), as `train` always did.
const Recipe& recipe_for(const std::string& model);

/// Whether the catalog has a recipe of its own for this model.
bool has_recipe(const std::string& model);

// ---- Datasets ----

/// Where Debian's dataset-fashion-mnist package puts its files: `train`'s folder for Fashion-MNIST
/// when neither --data nor TRAIN_FASHION_MNIST_DIR is given.
constexpr char kDebianFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

/// One way a dataset's files can be laid out under the --data folder.
struct Layout {
  std::string subfolder;  ///< relative to --data; "" = the files lie in --data itself
  Format format;
};

/// What the catalog knows of a dataset.
struct DatasetInfo {
  std::string name;                ///< "mnist", "fashion-mnist", "cifar10"
  std::vector<Layout> layouts;     ///< in the order they are tried
  int channels, height, width;     ///< one image
  double mean, std;                ///< normalization of every channel
  std::string how_to_get;          ///< how to get the files (for the missing-dataset hint)
};

/// The known datasets: "mnist", "fashion-mnist", "cifar10".
const std::vector<DatasetInfo>& datasets();

/// Whether the catalog knows a dataset called `name`.
bool has_dataset(const std::string& name);

/// The dataset called `name`. @throws train::ConfigError listing the known names.
const DatasetInfo& dataset_info(const std::string& name);

/// The files of one split in one format, in reading order. IDX: the images file, then the
/// labels file (each may also be `NAME.gz`); CIFAR: data_batch_1..5 or test_batch (`.bin` for the
/// binary version, no suffix for the pickles).
std::vector<std::string> split_files(Format format, Split split);

/// A split's files, found.
struct Located {
  std::string dir;                 ///< the folder that holds them
  Format format;
  std::vector<std::string> paths;  ///< split_files() in that folder (IDX: the .gz where only that exists)
};

/// Finds a split of `dataset` under `data_dir`: tries each layout of the catalog in order (the
/// flat folder, then torchvision's subfolders such as MNIST/raw or cifar-10-batches-py); a layout
/// matches when every file of the split is there.
/// @throws train::DataError naming --data, every folder looked in with the files looked for, and
///   how to get the files; or, where a folder holds some files of a layout but not all, naming
///   the missing ones.
Located locate(const std::string& dataset, const std::string& data_dir, Split split);

/// What the readers log for a split they loaded: "cifar10/train: 50000 samples from 5 CIFAR-10
/// binary files (data_batch_1.bin, ...) in DIR", and "; the first N kept (sample limit)" when
/// `kept` is less than `samples`.
std::string describe_source(const std::string& split_name, const Located& found, int64_t samples, int64_t kept);

/// What check_file found in a file.
struct FileCheck {
  int64_t samples = 0;  ///< images (IDX images file), labels (IDX labels file) or records (CIFAR-10)
  std::string warning;  ///< "" or something worth saying that doesn't stop training (a short CIFAR-10 batch)
};

/// Checks a found file's whole structure the way train's readers do, without keeping its data
/// (what `trainctl preflight` checks on every node): IDX magic, dimensions, size and labels (raw or
/// gzip-compressed); a CIFAR-10 binary file of whole records with labels in 0..9; a CIFAR-10 pickle
/// decoded whole by the restricted reader (never executed).
/// @throws train::DataError naming the file, what was expected and what was found.
FileCheck check_file(const std::string& path, Format format);

}  // namespace train::catalog
