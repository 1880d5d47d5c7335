// `trainctl preflight`: checks a node before training starts on it (one srun task per node, run by
// the generated sbatch scripts): the data is readable here, CUDA sees the GPUs the job asked for,
// and the tasks on the node match its GPUs. No LibTorch, no CUDA.
#pragma once

#include <string>
#include <vector>

#include "train/catalog/catalog.h"
#include "train/base/device.h"
#include "train/base/env.h"

namespace train {

/// Where train looks for Fashion-MNIST when neither --data nor TRAIN_FASHION_MNIST_DIR is given
/// (Debian's dataset-fashion-mnist package); the same rule as train's.
constexpr const char* kDefaultFashionMnistDir = catalog::kDebianFashionMnistDir;

/// What to check on this node.
struct PreflightOptions {
  /// The data folder; "" takes train's: the last --data among train_args, else Fashion-MNIST's
  /// default folder when the dataset is fashion-mnist.
  std::string data_dir;
  /// GPUs the job asked for on each node; -1 reads SLURM_GPUS_ON_NODE (0 when unset: none asked).
  int expect_gpus = -1;
  /// The job's tasks per node in SLURM's notation ("2(x3),1"); "" reads SLURM_TASKS_PER_NODE. The
  /// batch script passes the job's value, because a preflight step's own variables say 1.
  std::string tasks_per_node;
  /// train's arguments: --data, --dataset, --model, --device and --backend are read from them (the
  /// last copy wins, as in train).
  std::vector<std::string> train_args;
  /// --dataset imagefolder and webdataset: decode every image whole (libjpeg-turbo, libpng) on the
  /// node's CPUs; false reads each image's header and checks its end (a truncated file, a non-image,
  /// a damaged header are found; damage inside the compressed data is not).
  bool decode_images = false;
  /// The NVIDIA driver's GPU folder; tests pass a fake one.
  std::string proc_gpus_dir = kNvidiaProcGpus;
};

/// The outcome of the checks on one node.
struct PreflightReport {
  std::string host;                   ///< this node's name
  std::vector<std::string> passed;    ///< one line per check that passed
  std::vector<std::string> warnings;  ///< things that won't stop training but look wrong
  std::vector<std::string> errors;    ///< failed checks: input, expected, found, and a hint each
  bool ok() const { return errors.empty(); }
};

/// Checks the dataset files under `dir` by train's rules (catalog::locate: the folder itself or
/// torchvision's subfolders; IDX raw or .gz, CIFAR-10 binary or pickles), both splits; an empty or
/// unknown `dataset` accepts any dataset of the catalog. Each file must exist, be readable and hold
/// the whole structure train reads (catalog::check_file: every header, size, record, label and
/// pickle opcode), without training.
/// @param warnings receives what is worth a warning (a CIFAR-10 batch of other than 10000 records).
/// @return a one-line summary ("4 IDX files (fashion-mnist)").
/// @throws train::DataError naming the folder or file, with what was expected and found.
std::string check_dataset_folder(const std::string& dir, const std::string& dataset,
                                 std::vector<std::string>* warnings = nullptr);

/// Runs every check for this node and collects the results (never throws for a failed check).
/// @param env the environment: SLURM_NODEID, SLURM_TASKS_PER_NODE, SLURM_GPUS_ON_NODE,
///   CUDA_VISIBLE_DEVICES, TRAIN_FASHION_MNIST_DIR.
PreflightReport run_preflight(const PreflightOptions& options, const EnvMap& env);

}  // namespace train
