// The training loop behind the `train` program: data, model, optimizer, DDP, evaluation, metrics.
#pragma once

#include "train/launcher/env.h"

#include <torch/nn/module.h>

#include <cstdint>
#include <string>

namespace train {

/// Everything that shapes a run; the `train` flags map one to one onto it.
struct TrainConfig {
  std::string model = "mnist";
  std::string dataset;          ///< "" = the model's usual dataset (mnist -> fashion-mnist)
  std::string data_dir;         ///< "" = Debian's fashion-mnist folder when that is the dataset
  int epochs = 14;
  int64_t batch_size = 0;       ///< per rank; 0 = the recipe's (mnist 64, cifar10 256)
  int64_t test_batch_size = 1000;
  double lr = -1;               ///< < 0 = the recipe's (Adadelta 1.0, SGD 0.1)
  double gamma = -1;            ///< StepLR factor per epoch; < 0 = the recipe's (0.7, SGD 1.0)
  std::string optimizer = "auto";  ///< auto | adadelta | sgd
  double momentum = 0.9;        ///< SGD only
  double weight_decay = -1;     ///< < 0 = the recipe's (Adadelta 0, SGD 1e-4)
  uint64_t seed = 1;
  int64_t max_steps = 0;        ///< stop after this many optimizer steps in total (0 = no limit)
  int64_t limit_train_samples = 0;
  int64_t limit_test_samples = 0;
  std::string device = "auto";  ///< auto | cpu | cuda
  int threads = 0;              ///< intra-op CPU threads; 0 = cores / local ranks
  int64_t log_interval = 10;
  std::string save_model;       ///< write the final parameters here (rank 0)
  std::string metrics;          ///< JSON-lines metrics file (rank 0)
  bool dry_run = false;         ///< one step per epoch, one test batch
  bool no_dropout = false;
  std::string backend = "auto"; ///< auto | gloo | nccl
  double dist_timeout_sec = 300;
  double bucket_cap_mb = 25;
};

/// What a finished run reports (the `done` line).
struct TrainResult {
  int epochs = 0;
  int64_t steps = 0;
  double train_loss = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  double images_per_sec = 0;
  int world_size = 1;
  std::string params_sha256;
};

/// Checks the configuration without touching data or peers. Throws train::ConfigError naming
/// the flag, what was expected and what was found.
void validate(const TrainConfig& config);

/// Runs the whole training. With a world size above 1 every rank must call it; it builds the
/// process group and wraps the model in DistributedDataParallel. Throws train::Error subclasses.
TrainResult run_training(const TrainConfig& config, const DistEnv& env);

/// SHA-256 (hex) of every parameter's float32 bytes, in registration order.
std::string params_sha256(const torch::nn::Module& module);

/// The `done` line: one JSON object.
std::string to_json(const TrainResult& result);

}  // namespace train
