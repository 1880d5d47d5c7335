// Everything a checkpoint holds, in one schema: model, optimizer (any torch::optim::Optimizer),
// loop progress, the LR schedule's state, RNG states and the user's own state. Used by the Trainer
// and by hand-written loops alike.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstdint>
#include <functional>
#include <string>

namespace train {

/// Where the loop is and what it has accumulated.
struct Progress {
  int epoch = 1;               ///< epoch in progress (1-based)
  int64_t batches_done = 0;    ///< batches of `epoch` already trained by every rank
  int64_t step = 0;            ///< optimizer steps so far
  int64_t epoch_steps = 0;     ///< steps of `epoch` so far
  int64_t images_total = 0;    ///< images trained on by all ranks, over the whole run
  int64_t skipped_samples = 0; ///< samples the loader replaced (--bad-samples skip), all ranks, whole run
  double train_seconds = 0;    ///< time spent in training steps
  double last_test_loss = 0, last_test_accuracy = 0, last_train_loss = 0;
};

/// One run's resumable state. The model and optimizer are referenced, not owned.
///
/// Archive keys: "model/<name>" (parameters and buffers), "optimizer" (the optimizer's own
/// archive), "progress/*" (a checkpoint without "progress/skipped_samples", from before it was
/// kept, loads as 0), "schedule/*" (the LR schedule's own record), "world_size", "shape"
/// (JSON of the flags that shaped the run), "rng/cpu" and, on CUDA, "rng/cuda", "user/*" for the
/// save_user/load_user callbacks and "controls/*" for save_controls/load_controls.
struct TrainingState {
  torch::nn::Module* model = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  Progress progress;
  at::Tensor loss_sum;          ///< this rank's running sum of step losses in the epoch (double)
  int world_size = 1;
  int64_t batch_size = 0;       ///< per rank, for re-sharding at another world size
  std::string shape_json;       ///< the run's shape; compared on resume
  std::function<void(torch::serialize::OutputArchive&)> save_user;  ///< optional user state
  std::function<void(torch::serialize::InputArchive&)> load_user;
  /// The Trainer's training controls (EMA weights, early stopping), under "controls/*"; optional.
  /// load_controls gets a null archive when the checkpoint has none.
  std::function<void(torch::serialize::OutputArchive&)> save_controls;
  std::function<void(torch::serialize::InputArchive*)> load_controls;
  /// The LR schedule's state, its own record under "schedule/*" (the Trainer's schedule writes
  /// "lr": the rate the next optimizer step runs with); optional. load_schedule gets the record;
  /// from an older checkpoint, which kept that rate as "progress/lr", a record holding it as "lr".
  std::function<void(torch::serialize::OutputArchive&)> save_schedule;
  std::function<void(torch::serialize::InputArchive&)> load_schedule;

  /// Writes the state into `archive`; `device` is where the model lives (its RNG is saved too).
  void save(torch::serialize::OutputArchive& archive, const at::Device& device) const;

  /// Restores model, optimizer, progress, the schedule, loss sum and RNG states from `archive`,
  /// which was loaded onto `device` (CheckpointDir::load_file(path, device)), so the optimizer's
  /// state tensors land next to the parameters whatever optimizer it is. When the archive's world
  /// size differs from world_size, progress.batches_done is re-sharded to the new global batch.
  /// @return the world size the archive was written with.
  /// @throws train::CheckpointError when a key is missing or a tensor doesn't fit the model.
  int load(torch::serialize::InputArchive& archive, const at::Device& device);

  /// The "shape" JSON stored in `archive`.
  static std::string read_shape(torch::serialize::InputArchive& archive);
};

}  // namespace train
