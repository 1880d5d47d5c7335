// custom_model: trains the example's small ResNet on its striped images with libtrain's Trainer.
// Every Trainer flag works (--epochs, --checkpoint-dir, --resume, ...), plus the recipe flags this
// program reads (--data, --lr, --gamma, --limit-train-samples, --limit-test-samples) and
// --make-data DIR. `train`'s other recipe flags (--model, --optimizer, ...) are unknown here.
#include "loss.h"
#include "resnet.h"
#include "stripes_dataset.h"
#include "sync_batchnorm.h"

#include <train/cli.h>
#include <train/trainer.h>

#include <CLI/CLI.hpp>
#include <torch/optim/sgd.h>
#include <iostream>

constexpr double kDefaultLr = 0.05;    // SGD with momentum 0.9; --lr overrides it
constexpr double kDefaultGamma = 0.7;  // StepLR factor per epoch; --gamma overrides it
constexpr int64_t kBatchSize = 32;     // per rank; --batch-size overrides it

train::TrainResult train_stripes(const train::TrainConfig& config, const train::cli::RecipeOptions& recipe,
                                 const train::DistEnv& env) {
  train::Trainer trainer(config, env);
  const std::string dir = recipe.data_dir.empty() ? "stripes-data" : recipe.data_dir;
  const double lr = recipe.lr.value_or(kDefaultLr);
  train::TrainSpec spec;
  spec.model = [] { return train::wrap_model(example::TinyResNet(example::kStripesClasses)); };
  spec.model_name = "tiny-resnet";
  spec.train_data = std::make_shared<example::StripesDataset>(dir + "/train.stripes", recipe.limit_train_samples.value_or(0));
  spec.eval_data = std::make_shared<example::StripesDataset>(dir + "/test.stripes", recipe.limit_test_samples.value_or(0));
  spec.data_name = "stripes";
  spec.loss = example::label_smoothing_loss(/*eps=*/0.1);
  spec.optimizer = [lr](const std::vector<at::Tensor>& params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(lr).momentum(0.9));
  };
  spec.lr_schedule = train::step_lr(recipe.gamma.value_or(kDefaultGamma));
  spec.callbacks = {std::make_shared<example::SyncBatchNormStats>()};
  spec.batch_size = kBatchSize;
  return trainer.fit(spec);
}

int main(int argc, char** argv) {
  auto data_dir = std::make_shared<std::string>();
  using train::cli::RecipeFlag;
  return train::cli::main(argc, argv, "custom_model: a small ResNet on striped images (libtrain example)",
                          {RecipeFlag::data, RecipeFlag::lr, RecipeFlag::gamma, RecipeFlag::limit_train_samples,
                           RecipeFlag::limit_test_samples},
                          train_stripes, [data_dir](CLI::App& app) -> std::function<int()> {
    app.add_option("--make-data", *data_dir, "write train.stripes and test.stripes into this folder and exit");
    return [data_dir]() {
      if (data_dir->empty()) return -1;
      try {
        example::make_stripes_data(*data_dir);
        return 0;
      } catch (const std::exception& e) {
        std::cerr << "custom_model --make-data: " << e.what() << "\n";
        return 1;
      }
    };
  });
}
