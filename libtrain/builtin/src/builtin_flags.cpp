// The `train` program's recipe flags, their checks, and its main(): the Trainer's flags
// (train::cli) plus the built-in recipes' and --list-models, around builtin::run_training.
#include "train/builtin.h"

#include "train/base/error.h"
#include "train/models/model.h"
#include "train/base/text.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

namespace train {

template <>
const std::vector<std::pair<OptimizerKind, std::string>>& choices<OptimizerKind>() {
  static const std::vector<std::pair<OptimizerKind, std::string>> all = {
      {OptimizerKind::automatic, "auto"}, {OptimizerKind::adadelta, "adadelta"}, {OptimizerKind::sgd, "sgd"},
      {OptimizerKind::adam, "adam"}, {OptimizerKind::adamw, "adamw"}};
  return all;
}

template <>
const std::vector<std::pair<DecodeKind, std::string>>& choices<DecodeKind>() {
  static const std::vector<std::pair<DecodeKind, std::string>> all = {{DecodeKind::cpu, "cpu"}, {DecodeKind::gpu, "gpu"}};
  return all;
}

template <>
const std::vector<std::pair<LrScheduleKind, std::string>>& choices<LrScheduleKind>() {
  static const std::vector<std::pair<LrScheduleKind, std::string>> all = {
      {LrScheduleKind::automatic, "auto"}, {LrScheduleKind::step, "step"}, {LrScheduleKind::constant, "constant"},
      {LrScheduleKind::warmup_cosine, "warmup-cosine"}, {LrScheduleKind::linear, "linear"},
      {LrScheduleKind::one_cycle, "one-cycle"}};
  return all;
}

namespace builtin {
namespace {

[[noreturn]] void bad(const std::string& flag, const std::string& expected, double found, const std::string& hint) {
  throw ConfigError(flag + ": expected " + expected + ", found " + text::format("%g", found) + ".", hint);
}

CLI::Validator augment_words() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        try {
          parse_augment(value);
        } catch (const Error& e) {
          return e.message() + " Hint: " + e.hint();
        }
        return "";
      },
      "crop,flip");
}

}  // namespace

void validate(const Recipe& c) {
  cli::validate(c);  // --lr, --gamma, --momentum, --weight-decay: as their flags check them
  if (c.warmup_steps && *c.warmup_steps < 0) {
    bad("--warmup-steps", "0 or more steps", static_cast<double>(*c.warmup_steps), "e.g. --warmup-steps 500");
  }
  if (c.nesterov && !(c.momentum > 0)) bad("--nesterov", "a positive --momentum", c.momentum, "e.g. --momentum 0.9 --nesterov");
  if (c.limit_train_samples && *c.limit_train_samples < 1) {
    bad("--limit-train-samples", "a positive count (leave it out for all)", static_cast<double>(*c.limit_train_samples), "");
  }
  if (c.limit_test_samples && *c.limit_test_samples < 1) {
    bad("--limit-test-samples", "a positive count (leave it out for all)", static_cast<double>(*c.limit_test_samples), "");
  }
}

void add_flags(CLI::App& app, Recipe& r) {
  using cli::RecipeFlag;
  app.add_option("--model", r.model, "model to train (see --list-models)")->capture_default_str();
  app.add_option("--dataset", r.dataset,
                 "mnist | fashion-mnist | cifar10 (read whole into memory), or npy: --data DIR's train_x.npy, "
                 "train_y.npy (memory-mapped, read sample by sample by the loader), test_x.npy, test_y.npy; "
                 "imagefolder: --data DIR's train/ and val/ (or test/), one folder of JPEG/PNG files per class; "
                 "webdataset: --data 'DIR/train-{000000..000127}.tar' (or a folder of shards), read in place "
                 "(default: the model's)");
  app.add_option("--image-size", r.image_size,
                 "imagefolder, webdataset: the images' height and width for the model (default: the model's; "
                 "resnet18 224, with ImageNet's random-resized crop and flip from 64 px)")
      ->check(CLI::PositiveNumber);
  cli::add_choice_flag(app, "--decode", r.decode,
                       "imagefolder, webdataset: where the training JPEGs are decoded: cpu (the loader's threads, "
                       "libjpeg-turbo) | gpu (nvJPEG on the rank's GPU, batched, its hardware engines where the card has "
                       "them; crop, flip and normalization there too; PNGs, grey JPEGs and JPEGs over 256 KiB still on "
                       "the loader's threads). The same labels, order, crops and flips; pixels within the decoders' "
                       "difference (docs/data.md)",
                       "gpu needs --device cuda and a build with nvJPEG");
  app.add_option("--eval-data", r.eval_data,
                 "webdataset: the evaluation shards (pattern or folder; default: none); imagefolder: the "
                 "evaluation folder (default: --data's val/ or test/)");
  cli::add_recipe_flags(app, r, {RecipeFlag::data, RecipeFlag::lr, RecipeFlag::gamma, RecipeFlag::momentum,
                                 RecipeFlag::weight_decay, RecipeFlag::limit_train_samples,
                                 RecipeFlag::limit_test_samples, RecipeFlag::no_dropout});
  cli::add_choice_flag(app, "--optimizer", r.optimizer, "auto | adadelta | sgd | adam | adamw", "auto takes the model's recipe");
  app.add_flag("--nesterov", r.nesterov, "SGD: Nesterov momentum");
  app.add_flag("--stream", r.stream,
               "mnist, fashion-mnist, cifar10: read the training split's records from their files on the "
               "loader's threads (memory-mapped; .gz IDX files and CIFAR-10 pickles unpacked once into "
               "--checkpoint-dir/unpacked, else $SLURM_TMPDIR, $TMPDIR or /tmp), not whole into memory at "
               "start; the test split stays in memory; the same params_sha256. npy is always read so");
  cli::add_choice_flag(app, "--lr-schedule", r.lr_schedule,
                       "auto (the recipe's) | step (StepLR by --gamma each epoch) | constant | warmup-cosine | linear | "
                       "one-cycle (per step, over the whole run; the graph follows them)",
                       "e.g. --lr-schedule warmup-cosine --warmup-steps 500");
  app.add_option_function<int64_t>("--warmup-steps", [&r](int64_t v) { r.warmup_steps = v; },
                                   "warmup-cosine and linear: steps of linear warm-up from 0 (default: the recipe's, "
                                   "resnet18 5% of the run, else 0)")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            return value.empty() || value.find_first_not_of("0123456789") != std::string::npos
                       ? "expected 0 or more steps, found '" + value + "'. Hint: e.g. --warmup-steps 500"
                       : "";
          },
          "0 or more steps"));
  app.add_option_function<std::string>("--augment", [&r](const std::string& v) { r.augment = parse_augment(v); },
                                       "augment the training images on their device: crop (random crop after 4 pixels "
                                       "of padding), flip (horizontal, p=0.5), or crop,flip; deterministic given "
                                       "--seed, resumed exactly")
      ->check(augment_words());
  // The recipes' defaults, where the Trainer's flags say "the program's".
  app.get_option("--epochs")->description("number of epochs (default: the recipe's, mnist 14, cifar10 4)");
  app.get_option("--batch-size")->description("batch size per rank (default: recipe's, mnist 64, cifar10 256)");
  app.get_option("--data")->description(
      "folder with the dataset files, or torchvision's root holding MNIST/raw, FashionMNIST/raw, "
      "cifar-10-batches-py or cifar-10-batches-bin (default for fashion-mnist: /usr/share/datasets/fashion-mnist)");
  app.get_option("--lr")->description("learning rate (default: recipe's, Adadelta 1.0, SGD 0.1; Adam/AdamW 1e-3)");
  app.get_option("--gamma")->description("StepLR factor per epoch (default: recipe's, 0.7 for mnist)");
  app.get_option("--weight-decay")->description("weight decay (default: recipe's, SGD 1e-4; Adam 0, AdamW 1e-2)");
  app.get_option("--precision")->description(
      "CUDA arithmetic: auto (the mnist recipe: bf16 for per-rank batches of " + std::to_string(kAutoBf16Batch) +
      " or more on GPUs that have it; fp32 otherwise and for cifar10), fp32, tf32 (TF32 matmuls/convolutions), "
      "bf16 (autocast, fp32 master weights)");
}

int main(int argc, char** argv) {
  auto recipe = std::make_shared<Recipe>();
  auto list_models = std::make_shared<bool>(false);
  return cli::main(
      argc, argv,
      "train: data-parallel training of LibTorch models (single process, torchrun-style variables, or "
      "SLURM srun tasks).\nPrints progress on stderr and one JSON 'done' line on stdout.",
      [recipe](const TrainConfig& config, const DistEnv& env) { return run_training(config, *recipe, env); },
      [recipe, list_models](CLI::App& app) -> std::function<int()> {
        add_flags(app, *recipe);
        app.add_flag("--list-models", *list_models, "print the registered models and exit");
        return [list_models]() {
          if (!*list_models) return -1;
          for (const auto& name : models::model_names()) {
            std::cout << name << "\t" << models::model_info(name).description << "\n";
          }
          return 0;
        };
      });
}

}  // namespace builtin
}  // namespace train
