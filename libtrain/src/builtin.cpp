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
                      "use --model mnist with mnist/fashion-mnist and --model cifar10 with cifar10.");
  }
  return std::make_shared<InMemoryDataset>(d.images, d.labels, d.name);
}

OptimizerBuilder optimizer_for(const TrainConfig& c, const catalog::Recipe& r) {
  const std::string name = c.optimizer == "auto" ? r.optimizer : c.optimizer;
  const double lr = c.lr > 0 ? c.lr : r.lr;
  const double wd = c.weight_decay >= 0 ? c.weight_decay : r.weight_decay;
  const double momentum = c.momentum;
  if (name == "adam" || name == "adamw") {
    // torch.optim's defaults where the recipe's (made for Adadelta or SGD) don't fit.
    const double alr = c.lr > 0 ? c.lr : 1e-3;
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
  return [lr, wd, momentum](const std::vector<at::Tensor>& params) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(lr).momentum(momentum).weight_decay(wd));
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
  spec.loss = class_index_loss([built, nll = nll_loss(), ce = cross_entropy_loss()](const at::Tensor& out,
                                                                                    const at::Tensor& target, Reduction r) {
    return (*built)->output_kind() == models::OutputKind::log_probs ? nll(out, target, r) : ce(out, target, r);
  });
  spec.optimizer = optimizer_for(c, recipe);
  spec.lr_schedule = step_lr(c.gamma > 0 ? c.gamma : recipe.gamma);
  spec.batch_size = recipe.batch_size;
  if (c.model == "mnist") spec.auto_bf16_batch = kAutoBf16Batch;  // measured there only (docs/gpu.md)
  return trainer.fit(spec);
}

}  // namespace train
