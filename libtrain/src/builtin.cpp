// run_training: what the `train` program trains. Builds a registered model, a built-in dataset
// and the model's recipe (optimizer, batch size, learning rate and schedule: train/catalog.h),
// with the optional augmentation, then hands them to the Trainer.
#include "train/trainer.h"

#include "train/adadelta.h"
#include "train/fused_optim.h"
#include "train/augment.h"
#include "train/catalog.h"
#include "train/datasets/dataset.h"
#include "train/error.h"
#include "train/text.h"
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

// The optimizer's base rate: --lr, else the recipe's, else (Adam, AdamW) torch.optim's default.
double base_lr(const TrainConfig& c, const catalog::Recipe& r) {
  const std::string name = c.optimizer == "auto" ? r.optimizer : c.optimizer;
  if (c.lr > 0) return c.lr;
  return name == "adam" || name == "adamw" ? 1e-3 : r.lr;
}

OptimizerBuilder optimizer_for(const TrainConfig& c, const catalog::Recipe& r) {
  const std::string name = c.optimizer == "auto" ? r.optimizer : c.optimizer;
  const double lr = base_lr(c, r);
  const double wd = c.weight_decay >= 0 ? c.weight_decay : r.weight_decay;
  const double momentum = c.momentum;
  if (name == "adam" || name == "adamw") {
    // torch.optim's defaults where the recipe's (made for Adadelta or SGD) don't fit. On CUDA the
    // fused ones (what Python runs with fused=True), which a CUDA graph captures.
    const double alr = lr;
    const double awd = c.weight_decay >= 0 ? c.weight_decay : (name == "adamw" ? 1e-2 : 0.0);
    if (name == "adam") {
      return [alr, awd](const std::vector<at::Tensor>& params) -> std::unique_ptr<torch::optim::Optimizer> {
        const auto o = torch::optim::AdamOptions(alr).weight_decay(awd);
        if (!params.empty() && params.front().is_cuda()) return std::make_unique<optim::FusedAdam>(params, o);
        return std::make_unique<torch::optim::Adam>(params, o);
      };
    }
    return [alr, awd](const std::vector<at::Tensor>& params) -> std::unique_ptr<torch::optim::Optimizer> {
      const auto o = torch::optim::AdamWOptions(alr).weight_decay(awd);
      if (!params.empty() && params.front().is_cuda()) return std::make_unique<optim::FusedAdamW>(params, o);
      return std::make_unique<torch::optim::AdamW>(params, o);
    };
  }
  if (name == "adadelta") {
    return [lr, wd](const std::vector<at::Tensor>& params) -> std::unique_ptr<torch::optim::Optimizer> {
      return std::make_unique<optim::Adadelta>(params, optim::AdadeltaOptions(lr).weight_decay(wd));
    };
  }
  const bool nesterov = (c.nesterov || r.nesterov) && momentum > 0;  // Nesterov needs momentum
  return [lr, wd, momentum, nesterov](const std::vector<at::Tensor>& params) -> std::unique_ptr<torch::optim::Optimizer> {
    const auto o = torch::optim::SGDOptions(lr).momentum(momentum).weight_decay(wd).nesterov(nesterov);
    if (!params.empty() && params.front().is_cuda()) return std::make_unique<optim::FusedSGD>(params, o);
    return std::make_unique<torch::optim::SGD>(params, o);
  };
}

// warmup-cosine or linear with the recipe's warm-up: a share of the run's steps (resnet18: 5%).
LrSchedule warmup_share(bool linear, double share) {
  LrSchedule s = linear ? linear_decay(0) : warmup_cosine(0);
  s.rate = [linear, share](int64_t step, const ScheduleContext& run) {
    const int64_t warmup = std::max<int64_t>(1, static_cast<int64_t>(share * static_cast<double>(run.total_steps)));
    return (linear ? linear_decay(warmup) : warmup_cosine(warmup)).rate(step, run);
  };
  s.description = std::string(linear ? "linear_decay" : "warmup_cosine") + "(warmup=" + text::format("%g", 100 * share) +
                  "% of the run)";
  return s;
}

// --lr-schedule: auto takes the recipe's (StepLR per epoch by gamma; resnet18 warm-up + cosine
// per step), else the one named, per step over the whole run.
LrSchedule schedule_for(const TrainConfig& c, const catalog::Recipe& r) {
  std::string name = c.lr_schedule;
  if (name == "auto") name = r.schedule == "warmup_cosine" ? "warmup-cosine" : "step";
  if (name == "constant") return constant_lr();
  if (name == "one-cycle") return one_cycle();
  if (name == "warmup-cosine" || name == "linear") {
    const bool linear = name == "linear";
    if (c.warmup_steps < 0 && r.warmup_fraction > 0) return warmup_share(linear, r.warmup_fraction);
    const int64_t warmup = std::max<int64_t>(0, c.warmup_steps);
    return linear ? linear_decay(warmup) : warmup_cosine(warmup);
  }
  return step_lr(c.gamma > 0 ? c.gamma : r.gamma);
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
  spec.loss = class_index_loss([built, nll = nll_loss(), ce = cross_entropy_loss()](const at::Tensor& out,
                                                                                    const at::Tensor& target, Reduction r) {
    return (*built)->output_kind() == models::OutputKind::log_probs ? nll(out, target, r) : ce(out, target, r);
  });
  spec.optimizer = optimizer_for(c, recipe);
  spec.lr_schedule = schedule_for(c, recipe);
  spec.batch_size = recipe.batch_size;
  if (c.model == "mnist") spec.auto_bf16_batch = kAutoBf16Batch;  // measured there only (docs/gpu.md)
  return trainer.fit(spec);
}

}  // namespace train
