// The run's plan: the Trainer's flags (TrainConfig) and the user's spec (TrainSpec) resolved once,
// at fit()'s start, into the settings every part reads. Where a flag and the spec both set
// something (the batch size, the epochs, accumulation, clipping, sharding, early stopping, the
// moving average), the flag wins, here and nowhere else. Private.
#pragma once

#include "train/base/env.h"
#include "train/config.h"
#include "train/train_spec.h"

#include <cstdint>
#include <optional>
#include <string>

namespace train::detail {

struct RunPlan {
  TrainConfig config;           ///< the flags as given (validated by the Trainer's constructor)
  DistEnv env;                  ///< this rank's place in the job
  int threads = 1;              ///< intra-op threads
  const TrainSpec* spec = nullptr;  ///< what fit() trains; null before fit()

  int64_t batch = 0;            ///< per rank and micro-batch: --batch-size or TrainSpec::batch_size
  int epochs = 0;               ///< --epochs or TrainSpec::epochs
  int64_t accumulate = 1;       ///< micro-batches per optimizer step: --accumulate-steps or the spec's
  std::optional<double> clip_norm;  ///< --clip-grad-norm or the spec's; unset: no clipping
  bool shard_optimizer = false;     ///< --shard-optimizer or TrainSpec::shard_optimizer
  EarlyStopping early_stopping;     ///< the spec's, with --early-stop-* over it
  std::optional<double> ema_decay;  ///< --ema-decay or the spec's; unset: no moving average

  int64_t train_size = 0;       ///< the training data's samples (TrainSpec::train_data's or train_samples')
  std::string train_name;       ///< its name, for logs
  bool loader = false;          ///< the data is read sample by sample (TrainSpec::train_samples)
  bool evaluates = false;       ///< TrainSpec::eval_data or eval_samples is set
  int64_t samples_per_rank = 0; ///< each epoch's samples on this rank (DistributedSampler's share)
  int64_t steps_per_epoch = 0;  ///< optimizer steps an epoch: samples_per_rank / step_samples(), rounded up
  int data_workers = 1;         ///< the loader's threads: --data-workers, or from the intra-op threads

  /// Samples per rank and optimizer step (batch x accumulate).
  int64_t step_samples() const { return batch * accumulate; }
  /// Where sharding was asked for: "--shard-optimizer" or "TrainSpec::shard_optimizer".
  std::string shard_source() const;
};

/// Resolves `spec` against `plan.config` into `plan` (spec and the settings above). Called once
/// per fit().
/// @throws train::ConfigError naming the flag or the spec's field for a setting out of range, a
/// spec without a model, data, loss or optimizer, or early stopping on a metric not evaluated.
void resolve_plan(RunPlan& plan, const TrainSpec& spec);

}  // namespace train::detail
