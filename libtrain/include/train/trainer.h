// The training loop behind the `train` program: data, model, optimizer, DDP, evaluation, metrics.
#pragma once

#include "train/launcher/env.h"

#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <vector>

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
  std::string shm_allreduce = "auto";  ///< auto (ranks on one machine sum CPU gradients in shared memory) | off
  std::string tf32 = "auto";    ///< auto (PyTorch's defaults: cuDNN yes, matmul no) | on | off
  bool deterministic = false;   ///< deterministic cuDNN algorithms (CUDA runs)

  // Checkpoints and preemption (docs/checkpoints.md).
  std::string checkpoint_dir;   ///< "" = no checkpoints
  int64_t checkpoint_every = 0; ///< also checkpoint every N steps (0 = only at epoch ends)
  int keep_checkpoints = 3;
  std::string resume = "auto";  ///< auto | never | PATH of a checkpoint file
  std::string preempt_signals = "USR1,USR2,TERM";  ///< signals that mean "checkpoint and stop"
  double time_margin_sec = 60;  ///< checkpoint this long before the SLURM job's end time
  bool requeue = true;          ///< under SLURM, `scontrol requeue` the job after a preemption checkpoint
};

/// Exit status of `train` when it stopped for a preemption signal or the job's time limit after
/// writing a checkpoint (EX_TEMPFAIL: "try again later").
constexpr int kExitPreempted = 75;

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
  bool preempted = false;        ///< stopped early by a signal or the time limit
  std::string preempt_reason;    ///< e.g. "signal SIGUSR2" or "time limit"
  std::string checkpoint_path;   ///< last checkpoint written ("" if none)
  bool requeued = false;         ///< `scontrol requeue` was run for this job
};

/// Checks the configuration without touching data or peers. Throws train::ConfigError naming
/// the flag, what was expected and what was found.
void validate(const TrainConfig& config);

/// Runs the whole training. With a world size above 1 every rank must call it; it builds the
/// process group and wraps the model in DistributedDataParallel. Throws train::Error subclasses.
TrainResult run_training(const TrainConfig& config, const DistEnv& env);

/// SHA-256 (hex) of every parameter's float32 bytes, in registration order.
std::string params_sha256(const torch::nn::Module& module);

/// Parses --preempt-signals ("USR1,USR2,TERM", "SIGUSR2", "none") into signal numbers.
/// Throws train::ConfigError for an unknown name.
std::vector<int> parse_signal_list(const std::string& list);

/// The `done` line (or, for a preempted run, the `preempted` line): one JSON object.
std::string to_json(const TrainResult& result);

}  // namespace train
