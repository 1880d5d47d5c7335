// builtin::run_training: what the `train` program trains. Builds a registered model, a built-in
// dataset and the model's recipe (optimizer, batch size, learning rate and schedule, epochs:
// train/catalog/catalog.h), with the optional augmentation, then hands them to the Trainer.
#include "train/builtin.h"
#include "builtin_data.h"

#include "train/trainer.h"

#include "train/adadelta.h"
#include "train/fused_optim.h"
#include "train/augment.h"
#include "train/catalog/catalog.h"
#include "train/datasets/dataset.h"
#include "train/datasets/npy.h"
#include "train/base/error.h"
#include "train/base/files.h"
#include "train/base/text.h"
#include "train/models/model.h"

#include <ATen/ops/stack.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <utility>
#include <cmath>

namespace train::builtin {
namespace {

std::string data_dir_for(const Recipe& c, const std::string& dataset) {
  if (!c.data_dir.empty()) return c.data_dir;
  std::string dir = datasets::default_fashion_mnist_dir();
  if (dir.empty() || dataset != "fashion-mnist") {
    throw ConfigError("--data: expected the folder holding the " + dataset + " files (or torchvision's root folder), "
                          "found none given.",
                      "pass --data DIR. " + catalog::dataset_info(dataset).how_to_get);
  }
  return dir;
}

std::shared_ptr<InMemoryDataset> load(const std::string& dataset, const std::string& dir, datasets::Split split,
                                      int64_t limit, const models::ModelInfo& info, const std::string& model) {
  datasets::TensorDataset d = datasets::load_dataset(dataset, dir, split, {limit});
  const auto& shape = d.images.sizes();
  if (shape[1] != info.channels || shape[2] != info.height || shape[3] != info.width) {
    throw ConfigError("--model " + model + " with --dataset " + dataset + ": expected images of " +
                          std::to_string(info.channels) + "x" + std::to_string(info.height) + "x" +
                          std::to_string(info.width) + ", found " + std::to_string(shape[1]) + "x" +
                          std::to_string(shape[2]) + "x" + std::to_string(shape[3]) + ".",
                      "use --model mnist with mnist/fashion-mnist and --model cifar10 or resnet18 with cifar10.");
  }
  return std::make_shared<InMemoryDataset>(d.images, d.labels, d.name);
}

// --dataset npy: DIR/{train,test}_x.npy and _y.npy, memory-mapped. The training split is read
// sample by sample by the loader; the test split, small, is read whole into memory. uint8 images
// are scaled and normalized as the recipe's dataset is ([N, H, W] read as one channel).
void load_npy(TrainSpec& spec, const std::string& dir, const Recipe& c, const models::ModelInfo& info) {
  const catalog::DatasetInfo& norm = catalog::dataset_info(catalog::recipe_for(c.model).dataset);
  datasets::NpyOptions o;
  o.uint8_mean = norm.mean;
  o.uint8_std = norm.std;
  o.input_shape = {info.channels, info.height, info.width};
  o.num_classes = info.num_classes;
  auto split = [&](const std::string& name) {
    return std::make_shared<datasets::NpyDataset>(files::join(dir, name + "_x.npy"), files::join(dir, name + "_y.npy"), o);
  };
  std::shared_ptr<SampleDataset> train = split("train");
  if (c.limit_train_samples) train = std::make_shared<FirstSamples>(train, *c.limit_train_samples);
  spec.train_samples = train;
  std::shared_ptr<datasets::NpyDataset> test = split("test");
  const int64_t n = c.limit_test_samples ? std::min(*c.limit_test_samples, test->size()) : test->size();
  std::vector<at::Tensor> inputs, targets;
  for (int64_t i = 0; i < n; ++i) {
    Sample s = test->get(i);
    inputs.push_back(s.input);
    targets.push_back(s.target);
  }
  spec.eval_data = std::make_shared<InMemoryDataset>(at::stack(inputs), at::stack(targets), "npy:" + dir + "/test");
}

// --stream: the training split of a built-in dataset read sample by sample by the loader from its
// files, memory-mapped (.gz IDX files and CIFAR-10 pickles unpacked once, next to the checkpoints:
// datasets::default_unpack_dir); the test split read whole into memory, as without --stream. The
// samples are the in-memory reader's bit for bit, so the run's params_sha256 is too.
void load_streamed(TrainSpec& spec, const std::string& dir, const Recipe& c, const std::string& checkpoint_dir,
                   const models::ModelInfo& info) {
  if (c.augment.crop || c.augment.flip) {
    throw ConfigError("--augment with --stream: expected the training images held in memory (the augmentation crops "
                          "and flips them on their device), found --stream (images read sample by sample).",
                      "leave out --stream (" + spec.data_name + " fits in memory) or --augment.");
  }
  datasets::StreamOptions o;
  o.limit = c.limit_train_samples.value_or(0);
  o.unpack_dir = datasets::default_unpack_dir(checkpoint_dir);
  std::shared_ptr<SampleDataset> train = datasets::open_stream(spec.data_name, dir, datasets::Split::train, o);
  // load() checks the test images against the model; the training images must be of their size.
  std::shared_ptr<InMemoryDataset> test =
      load(spec.data_name, dir, datasets::Split::test, c.limit_test_samples.value_or(0), info, c.model);
  const at::IntArrayRef image = test->inputs().sizes().slice(1);
  const at::Tensor first = train->get(0).input;
  if (first.sizes() != image) {
    throw DataError(dir + ": expected the training images of " + spec.data_name + " to be of the test images' size " +
                        c10::str(image) + ", found " + c10::str(first.sizes()) + ".",
                    "the training and test files come from different datasets: re-extract the dataset.");
  }
  spec.train_samples = std::move(train);
  spec.eval_data = std::move(test);
}

// The optimizer's settings after the recipe's defaults, as checkpoints record them.
struct OptimizerSettings {
  OptimizerKind kind;
  double lr, weight_decay, momentum;
  bool nesterov;
};

OptimizerSettings optimizer_settings(const Recipe& c, const catalog::Recipe& r) {
  const OptimizerKind kind = c.optimizer == OptimizerKind::automatic ? parse_choice<OptimizerKind>("recipe", r.optimizer)
                                                                     : c.optimizer;
  const bool nesterov = (c.nesterov || r.nesterov) && c.momentum > 0;  // Nesterov needs momentum
  if (kind == OptimizerKind::adam || kind == OptimizerKind::adamw) {
    // torch.optim's defaults where the recipe's (made for Adadelta or SGD) don't fit.
    return {kind, c.lr.value_or(1e-3), c.weight_decay.value_or(kind == OptimizerKind::adamw ? 1e-2 : 0.0), c.momentum,
            nesterov};
  }
  return {kind, c.lr.value_or(r.lr), c.weight_decay.value_or(r.weight_decay), c.momentum, nesterov};
}

// On CUDA the fused optimizers (what Python runs with fused=True), which a CUDA graph captures;
// on the CPU too with --shard-optimizer (`fused`), which shards only those.
OptimizerBuilder optimizer_for(const OptimizerSettings& s, bool fused) {
  const double lr = s.lr, wd = s.weight_decay, momentum = s.momentum;
  const bool nesterov = s.nesterov;
  const auto use_fused = [fused](const std::vector<at::Tensor>& params) {
    return fused || (!params.empty() && params.front().is_cuda());
  };
  switch (s.kind) {
    case OptimizerKind::adam:
      return [lr, wd, use_fused](const std::vector<at::Tensor>& params) -> std::unique_ptr<torch::optim::Optimizer> {
        const auto o = torch::optim::AdamOptions(lr).weight_decay(wd);
        if (use_fused(params)) return std::make_unique<optim::FusedAdam>(params, o);
        return std::make_unique<torch::optim::Adam>(params, o);
      };
    case OptimizerKind::adamw:
      return [lr, wd, use_fused](const std::vector<at::Tensor>& params) -> std::unique_ptr<torch::optim::Optimizer> {
        const auto o = torch::optim::AdamWOptions(lr).weight_decay(wd);
        if (use_fused(params)) return std::make_unique<optim::FusedAdamW>(params, o);
        return std::make_unique<torch::optim::AdamW>(params, o);
      };
    case OptimizerKind::adadelta:
      return [lr, wd](const std::vector<at::Tensor>& params) -> std::unique_ptr<torch::optim::Optimizer> {
        return std::make_unique<optim::Adadelta>(params, optim::AdadeltaOptions(lr).weight_decay(wd));
      };
    default:
      return [lr, wd, momentum, nesterov, use_fused](const std::vector<at::Tensor>& params) -> std::unique_ptr<torch::optim::Optimizer> {
        const auto o = torch::optim::SGDOptions(lr).momentum(momentum).weight_decay(wd).nesterov(nesterov);
        if (use_fused(params)) return std::make_unique<optim::FusedSGD>(params, o);
        return std::make_unique<torch::optim::SGD>(params, o);
      };
  }
}

// What checkpoints record of the recipe besides the Trainer's own (TrainSpec::recipe).
std::vector<std::pair<std::string, std::string>> recorded(const Recipe& c, const OptimizerSettings& o) {
  const auto number = [](double v) { return nlohmann::json(v).dump(); };
  return {{"optimizer", choice_name(o.kind)},
          {"momentum", number(o.momentum)},
          {"weight_decay", number(o.weight_decay)},
          {"limit_train_samples", std::to_string(c.limit_train_samples.value_or(0))},
          {"limit_test_samples", std::to_string(c.limit_test_samples.value_or(0))},
          {"no_dropout", c.no_dropout ? "true" : "false"},
          {"nesterov", o.nesterov ? "true" : "false"}};
}

// warmup-cosine or linear with the recipe's warm-up: a share of the run's steps (resnet18: 5%).
LrSchedule warmup_share(bool linear, double share) {
  LrSchedule s = linear ? linear_decay(0) : warmup_cosine(0);
  // The schedule for the run's length, made once (the rate is asked for after every step).
  auto made = std::make_shared<std::pair<int64_t, LrSchedule>>(-1, LrSchedule{});
  s.rate = [linear, share, made](int64_t step, const ScheduleContext& run) {
    if (made->first != run.total_steps) {
      const auto warmup = std::max<int64_t>(1, static_cast<int64_t>(share * static_cast<double>(run.total_steps)));
      *made = {run.total_steps, linear ? linear_decay(warmup) : warmup_cosine(warmup)};
    }
    return made->second.rate(step, run);
  };
  s.description = std::string(linear ? "linear_decay" : "warmup_cosine") + "(warmup=" + text::format("%g", 100 * share) +
                  "% of the run)";
  return s;
}

// --lr-schedule: auto takes the recipe's (StepLR per epoch by gamma; resnet18 warm-up + cosine
// per step), else the one named, per step over the whole run.
LrSchedule schedule_for(const Recipe& c, const catalog::Recipe& r) {
  LrScheduleKind kind = c.lr_schedule;
  if (kind == LrScheduleKind::automatic) {
    kind = r.schedule == "warmup_cosine" ? LrScheduleKind::warmup_cosine : LrScheduleKind::step;
  }
  switch (kind) {
    case LrScheduleKind::constant: return constant_lr();
    case LrScheduleKind::one_cycle: return one_cycle();
    case LrScheduleKind::warmup_cosine:
    case LrScheduleKind::linear: {
      const bool linear = kind == LrScheduleKind::linear;
      if (!c.warmup_steps && r.warmup_fraction > 0) return warmup_share(linear, r.warmup_fraction);
      const int64_t warmup = c.warmup_steps.value_or(0);
      return linear ? linear_decay(warmup) : warmup_cosine(warmup);
    }
    default: return step_lr(c.gamma.value_or(r.gamma), r.step_size);
  }
}

}  // namespace

TrainResult run_training(const TrainConfig& config, const Recipe& c, const DistEnv& env) {
  validate(c);
  const models::ModelInfo& info = models::model_info(c.model);  // throws with the known names
  Trainer trainer(config, env);
  const bool images = is_image_dataset(c.dataset);
  if (c.decode == DecodeKind::gpu && !images) {
    throw ConfigError("--decode gpu with --dataset " + (c.dataset.empty() ? std::string("(the model's)") : c.dataset) +
                          ": expected JPEG images, --dataset imagefolder or webdataset.",
                      "leave --decode out: the other datasets hold decoded samples.");
  }
  const catalog::Recipe& recipe = images ? image_recipe(c, info) : catalog::recipe_for(c.model);
  TrainSpec spec;
  spec.model_name = c.model;
  spec.data_name = c.dataset.empty() ? recipe.dataset : c.dataset;
  models::ModelOptions mo;
  mo.dropout = !c.no_dropout;
  // Data first: a bad file should fail before we wait for peers.
  if (images) {
    load_images(spec, c, info, config.checkpoint.dir, mo);
  } else if (spec.data_name == "npy") {
    if (c.data_dir.empty()) {
      throw ConfigError("--dataset npy: expected --data DIR holding train_x.npy, train_y.npy, test_x.npy and "
                            "test_y.npy, found no --data.",
                        "e.g. --dataset npy --data /scratch/my-data (numpy: np.save('train_x.npy', images))");
    }
    if (c.augment.crop || c.augment.flip) {
      throw ConfigError("--augment with --dataset npy: expected data held in memory, found data read sample by sample.",
                        "leave --augment out with --dataset npy.");
    }
    load_npy(spec, c.data_dir, c, info);
  } else if (c.stream) {
    load_streamed(spec, data_dir_for(c, spec.data_name), c, config.checkpoint.dir, info);
  } else {
    const std::string dir = data_dir_for(c, spec.data_name);
    spec.train_data = load(spec.data_name, dir, datasets::Split::train, c.limit_train_samples.value_or(0), info, c.model);
    spec.eval_data = load(spec.data_name, dir, datasets::Split::test, c.limit_test_samples.value_or(0), info, c.model);
  }
  if (c.augment.crop || c.augment.flip) {
    AugmentOptions o = c.augment;
    const catalog::DatasetInfo& data = catalog::dataset_info(spec.data_name);
    o.pad_value = (0.0 - data.mean) / data.std;  // black, as torchvision pads before normalizing
    auto augmented = std::make_shared<AugmentedDataset>(spec.train_data, o, config.run.seed, env.rank);
    spec.callbacks.push_back(augment_checkpoint_callback(augmented));
    spec.train_data = augmented;
  }
  const std::string name = c.model;
  // The model says whether it outputs log-probabilities or logits; the loss asks the one built.
  auto built = std::make_shared<std::shared_ptr<models::Model>>();
  spec.model = [name, mo, built]() {
    std::shared_ptr<models::Model> m = models::make_model(name, mo);
    *built = m;
    return ModelHandle{m, [m](const at::Tensor& x) { return m->forward(x); }};
  };
  spec.loss = class_index_loss([built, nll = nll_loss(), ce = cross_entropy_loss()](const at::Tensor& out,
                                                                                    const at::Tensor& target, Reduction r) {
    return (*built)->output_kind() == models::OutputKind::log_probs ? nll(out, target, r) : ce(out, target, r);
  });
  const OptimizerSettings optimizer = optimizer_settings(c, recipe);
  spec.optimizer = optimizer_for(optimizer, config.distributed.shard_optimizer);
  spec.recipe = recorded(c, optimizer);
  spec.lr_schedule = schedule_for(c, recipe);
  spec.batch_size = recipe.batch_size;
  spec.epochs = recipe.epochs;
  if (c.model == "mnist") spec.auto_bf16_batch = kAutoBf16Batch;  // measured there only (docs/gpu.md)
  return trainer.fit(spec);
}

}  // namespace train::builtin
