// train::builtin: what the `train` program trains. The built-in models (train/models) on the
// built-in datasets (train/datasets) with each model's recipe (train/catalog/catalog.h), the recipe's
// flags (--model, --dataset, --optimizer, --lr, ...), and the program's main(). The Trainer
// (train::train) doesn't depend on any of it; link train::builtin to train a built-in model.
#pragma once

#include "train/augment.h"
#include "train/cli.h"
#include "train/config.h"
#include "train/base/env.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace CLI {
class App;
}

namespace train {

/// --optimizer: automatic = the model's recipe (Adadelta for mnist, SGD for cifar10).
enum class OptimizerKind { automatic, adadelta, sgd, adam, adamw };
template <>
const std::vector<std::pair<OptimizerKind, std::string>>& choices<OptimizerKind>();
/// --lr-schedule: automatic = the recipe's (StepLR by --gamma each epoch; resnet18 warm-up +
/// cosine per step), else the one named, per step over the whole run (step: StepLR per epoch).
enum class LrScheduleKind { automatic, step, constant, warmup_cosine, linear, one_cycle };
template <>
const std::vector<std::pair<LrScheduleKind, std::string>>& choices<LrScheduleKind>();

/// --decode: where imagefolder and webdataset training JPEGs are decoded.
enum class DecodeKind { cpu, gpu };
template <>
const std::vector<std::pair<DecodeKind, std::string>>& choices<DecodeKind>();

namespace builtin {

/// The built-in MNIST recipe's TrainSpec::auto_bf16_batch: --precision auto picks bf16 on CUDA
/// from this per-rank batch size up, where it was measured within 0.5 points of fp32's test
/// accuracy (docs/gpu.md), not at batch 64. (The CIFAR-10 recipe and users' specs stay fp32:
/// bf16 was not measured there.)
inline constexpr int64_t kAutoBf16Batch = 512;


/// The `train` program's recipe settings: what the built-in recipes read besides TrainConfig.
/// Unset numbers (RecipeOptions) mean the model's recipe's.
struct Recipe : cli::RecipeOptions {
  std::string model = "mnist";   ///< --model: a registered model (train/models/model.h)
  std::string dataset;           ///< --dataset: "" = the model's (mnist -> fashion-mnist)
  OptimizerKind optimizer = OptimizerKind::automatic;  ///< --optimizer
  AugmentOptions augment;        ///< --augment: the training images of built-in image datasets
  LrScheduleKind lr_schedule = LrScheduleKind::automatic;  ///< --lr-schedule
  std::optional<int64_t> warmup_steps;  ///< --warmup-steps (warmup-cosine, linear); unset = the recipe's (resnet18: 5% of the run, else 0)
  bool nesterov = false;         ///< --nesterov: SGD's Nesterov momentum
  /// --stream: the built-in IDX and CIFAR-10 datasets' training split read sample by sample by the
  /// loader from its files (memory-mapped), not whole into memory at start (npy always is)
  bool stream = false;
  /// --image-size: imagefolder and webdataset images' height and width (0: the model's; resnet18 224)
  int64_t image_size = 0;
  /// --eval-data: webdataset's evaluation shards, or imagefolder's evaluation folder ("" = DIR/val or DIR/test)
  std::string eval_data;
  /// --decode: imagefolder and webdataset training JPEGs decoded on the loader's threads (cpu) or by
  /// nvJPEG on the rank's GPU (gpu; the crop, flip and normalization there too). Evaluation images
  /// are decoded on the CPU either way.
  DecodeKind decode = DecodeKind::cpu;
};

/// Checks a Recipe built without the command line. Throws train::ConfigError naming the flag.
void validate(const Recipe& recipe);

/// Adds the recipe's flags (--model, --dataset, --data, --lr, --gamma, --optimizer, --momentum,
/// --nesterov, --lr-schedule, --warmup-steps, --weight-decay, --limit-train-samples,
/// --limit-test-samples, --no-dropout, --augment, --stream), bound to
/// `recipe`, to an App that has the Trainer's flags (train::cli::add_trainer_flags), and names the
/// recipes' defaults in the help of --epochs and --batch-size.
void add_flags(CLI::App& app, Recipe& recipe);

/// Trains a built-in model (--model, from the registry) on a built-in dataset (--dataset/--data)
/// with its recipe: what the `train` program runs. Every rank must call it.
TrainResult run_training(const TrainConfig& config, const Recipe& recipe, const DistEnv& env);

/// The `train` program: train::cli::main with the recipe's flags, --list-models and run_training.
int main(int argc, char** argv);

}  // namespace builtin
}  // namespace train
