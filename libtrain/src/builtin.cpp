// run_training: what the `train` program trains. Builds a registered model, a built-in dataset
// and the model's recipe (optimizer, batch size, learning rate and schedule: train/catalog.h),
// with the optional augmentation, then hands them to the Trainer.
#include "train/trainer.h"

#include "train/adadelta.h"
#include "train/augment.h"
#include "train/catalog.h"
#include "train/datasets/dataset.h"
#include "train/error.h"
#include "train/models/model.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>

namespace train {
namespace {

std::string data_dir_for(const TrainConfig& c, const std::string& dataset) {
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

// The recipe's linear warm-up + cosine decay, per step: step i (0-based) of `total` runs at
// base * (i + 1) / warmup while i < warmup, then at base * (1 + cos(pi * (i - warmup) / (total - warmup))) / 2.
double warmup_cosine_factor(int64_t i, int64_t warmup, int64_t total) {
  if (i < warmup) return static_cast<double>(i + 1) / static_cast<double>(warmup);
  const double t = static_cast<double>(std::min(i, total) - warmup) / static_cast<double>(std::max<int64_t>(total - warmup, 1));
  return 0.5 * (1.0 + std::cos(M_PI * t));
}

// The run's optimizer steps: epochs x batches per epoch on each rank (the sampler's padding
// included), or --max-steps where that comes first.
int64_t total_steps(const TrainConfig& c, int64_t samples, int world, int64_t batch) {
  const int64_t per_rank = (samples + world - 1) / world;
  const int64_t steps = static_cast<int64_t>(c.epochs) * ((per_rank + batch - 1) / batch);
  return c.max_steps > 0 ? std::min(steps, c.max_steps) : steps;
}

LrSchedule recipe_warmup_cosine(double base, int64_t warmup, int64_t total) {
  LrSchedule s;
  s.every = LrSchedule::Every::step;
  s.next = [base, warmup, total](int64_t index, double) { return base * warmup_cosine_factor(index, warmup, total); };
  s.description = "warm-up " + std::to_string(warmup) + " steps + cosine over " + std::to_string(total) + " steps";
  return s;
}

// The optimizer's base rate: --lr, else the recipe's, else (Adam, AdamW) torch.optim's default.
double base_lr(const TrainConfig& c, const catalog::Recipe& r) {
  const std::string name = c.optimizer == "auto" ? r.optimizer : c.optimizer;
  if (c.lr > 0) return c.lr;
  return name == "adam" || name == "adamw" ? 1e-3 : r.lr;
}

OptimizerBuilder optimizer_for(const TrainConfig& c, const catalog::Recipe& r, double lr_scale) {
  const std::string name = c.optimizer == "auto" ? r.optimizer : c.optimizer;
  const double lr = base_lr(c, r) * lr_scale;
  const double wd = c.weight_decay >= 0 ? c.weight_decay : r.weight_decay;
  const double momentum = c.momentum;
  if (name == "adam" || name == "adamw") {
    // torch.optim's defaults where the recipe's (made for Adadelta or SGD) don't fit.
    const double alr = lr;
    const double awd = c.weight_decay >= 0 ? c.weight_decay : (name == "adamw" ? 1e-2 : 0.0);
    if (name == "adam") {
      return [alr, awd](const std::vector<at::Tensor>& params) -> std::unique_ptr<torch::optim::Optimizer> {
        return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(alr).weight_decay(awd));
      };
    }
    return [alr, awd](const std::vector<at::Tensor>& params) -> std::unique_ptr<torch::optim::Optimizer> {
      return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(alr).weight_decay(awd));
    };
  }
  if (name == "adadelta") {
    return [lr, wd](const std::vector<at::Tensor>& params) -> std::unique_ptr<torch::optim::Optimizer> {
      return std::make_unique<optim::Adadelta>(params, optim::AdadeltaOptions(lr).weight_decay(wd));
    };
  }
  const bool nesterov = r.nesterov && momentum > 0;  // Nesterov needs momentum
  return [lr, wd, momentum, nesterov](const std::vector<at::Tensor>& params) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(lr).momentum(momentum).weight_decay(wd).nesterov(nesterov));
  };
}

}  // namespace

TrainResult run_training(const TrainConfig& c, const DistEnv& env) {
  const models::ModelInfo& info = models::model_info(c.model);  // throws with the known names
  Trainer trainer(c, env);
  const catalog::Recipe& recipe = catalog::recipe_for(c.model);
  TrainSpec spec;
  spec.model_name = c.model;
  spec.data_name = c.dataset.empty() ? recipe.dataset : c.dataset;
  // Data first: a bad file should fail before we wait for peers.
  const std::string dir = data_dir_for(c, spec.data_name);
  spec.train_data = load(spec.data_name, dir, datasets::Split::train, c.limit_train_samples, info, c.model);
  spec.eval_data = load(spec.data_name, dir, datasets::Split::test, c.limit_test_samples, info, c.model);
  const AugmentOptions augment = parse_augment(c.augment);
  if (augment.crop || augment.flip) {
    AugmentOptions o = augment;
    const catalog::DatasetInfo& data = catalog::dataset_info(spec.data_name);
    o.pad_value = (0.0 - data.mean) / data.std;  // black, as torchvision pads before normalizing
    auto augmented = std::make_shared<AugmentedDataset>(spec.train_data, o, c.seed, env.rank);
    spec.callbacks.push_back(augment_checkpoint_callback(augmented));
    spec.train_data = augmented;
  }
  models::ModelOptions mo;
  mo.dropout = !c.no_dropout;
  const std::string name = c.model;
  // The model says whether it outputs log-probabilities or logits; the loss asks the one built.
  auto built = std::make_shared<std::shared_ptr<models::Model>>();
  spec.model = [name, mo, built]() {
    std::shared_ptr<models::Model> m = models::make_model(name, mo);
    *built = m;
    return ModelHandle{m, [m](const at::Tensor& x) { return m->forward(x); }};
  };
  spec.loss = [built, nll = nll_loss(), ce = cross_entropy_loss()](const at::Tensor& out, const at::Tensor& target,
                                                                   Reduction r) {
    return (*built)->output_kind() == models::OutputKind::log_probs ? nll(out, target, r) : ce(out, target, r);
  };
  spec.batch_size = recipe.batch_size;
  if (recipe.schedule == "warmup_cosine") {
    const int64_t batch = c.batch_size > 0 ? c.batch_size : recipe.batch_size;
    const int64_t total = total_steps(c, spec.train_data->size(), env.world_size, batch);
    const int64_t warmup = std::max<int64_t>(1, static_cast<int64_t>(recipe.warmup_fraction * static_cast<double>(total)));
    const double base = base_lr(c, recipe);
    spec.optimizer = optimizer_for(c, recipe, warmup_cosine_factor(0, warmup, total));  // the first step's rate
    spec.lr_schedule = recipe_warmup_cosine(base, warmup, total);
  } else {
    spec.optimizer = optimizer_for(c, recipe, 1.0);
    spec.lr_schedule = step_lr(c.gamma > 0 ? c.gamma : recipe.gamma);
  }
  if (c.model == "mnist") spec.auto_bf16_batch = kAutoBf16Batch;  // measured there only (docs/gpu.md)
  return trainer.fit(spec);
}

}  // namespace train
