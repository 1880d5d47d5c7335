// The Trainer: trains any LibTorch model on any Dataset with a loss, an optimizer, an LR schedule,
// metrics and callbacks (callback.h), on one process or as one rank of many (SLURM, torchrun, trainctl local).
// It owns the process group, DDP, the sampler, preemption and requeue, checkpoints, the metrics
// JSONL, logging and the done line. docs/architecture.md shows how one step flows through it.
#pragma once

#include "train/callback.h"
#include "train/train_spec.h"
#include "train/config.h"
#include "train/data.h"
#include "train/loss.h"
#include "train/model_handle.h"
#include "train/base/env.h"
#include "train/metrics.h"
#include "train/preemption.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace train {

class ProcessGroup;

/// Trains a TrainSpec under a TrainConfig (the Trainer's flags: epochs, seed, device, checkpoints,
/// preemption...). With a world size above 1 every rank must construct it and call fit().
class Trainer {
 public:
  /// Checks the configuration (train::ConfigError naming the flag) and picks threads and device.
  Trainer(TrainConfig config, DistEnv env);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Sets up (data to the device, process group, model, optimizer, resume, DDP), trains, and
  /// returns the done line's contents. Throws train::Error subclasses.
  TrainResult fit(const TrainSpec& spec);

  const TrainConfig& config() const;
  const DistEnv& env() const;
  /// The device this rank trains on (chosen in the constructor).
  const at::Device& device() const;
  /// The process group while fit() runs (nullptr for a single process).
  ProcessGroup* process_group() const;
  /// The model while fit() runs.
  torch::nn::Module* model() const;
  /// The optimizer while fit() runs (e.g. from on_train_start; StepInfo and EpochInfo carry it too).
  torch::optim::Optimizer* optimizer() const;
  /// Adds a record of your own at the current step, e.g. from a callback kept from on_train_start:
  /// trainer.log_metrics("grad", {{"norm", 1.5}}) writes a "grad" line to --metrics and the scalar
  /// grad/norm to --tensorboard. Every rank may call it; rank 0 writes. At most one record per
  /// event and step, so that the event's steps keep increasing.
  void log_metrics(const std::string& event, std::vector<std::pair<std::string, double>> values);


 private:
  struct Run;  // what fit() works with (libtrain/src/trainer_run.h)
  std::unique_ptr<Run> run_;
};

/// SHA-256 (hex) of every parameter's float32 bytes, in registration order.
std::string params_sha256(const torch::nn::Module& module);

/// The `done` line (or `preempted` / `cancelled`): one JSON object.
std::string to_json(const TrainResult& result);

}  // namespace train
