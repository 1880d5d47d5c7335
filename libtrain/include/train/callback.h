// Callback: the hooks a program plugs into the Trainer's loop (Lightning's names), on their own so
// that a part that only hooks in (augment.h's checkpoint callback) needn't include the Trainer.
#pragma once

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstdint>
#include <string>

namespace train {

class Trainer;
struct StepInfo;     // trainer.h
struct EvalResult;   // trainer.h
struct EpochInfo;    // trainer.h
struct TrainResult;  // config.h

/// Hooks into the loop (Lightning's names). Every method is optional; all run on every rank, in
/// this order: on_train_start (the model, optimizer and process group exist; nothing resumed yet),
/// on_load_checkpoint (on resume), then for each step [OptimizerStepCallback's
/// on_before_optimizer_step,] on_step_end, at each epoch's end on_evaluation and on_epoch_end,
/// on_save_checkpoint / on_checkpoint_saved whenever a checkpoint is written, and on_train_end.
class Callback {
 public:
  virtual ~Callback() = default;
  /// First of all hooks: the Trainer's model(), optimizer() and process_group() are set (keep the
  /// Trainer for later hooks); a resumed checkpoint is loaded after it (on_load_checkpoint).
  virtual void on_train_start(Trainer& trainer) { (void)trainer; }
  virtual void on_step_end(const StepInfo& info) { (void)info; }
  virtual void on_evaluation(const EvalResult& result) { (void)result; }
  virtual void on_epoch_end(const EpochInfo& info) { (void)info; }
  /// Rank 0, after a checkpoint file was written.
  virtual void on_checkpoint_saved(const std::string& path, int64_t step) { (void)path, (void)step; }
  /// Your own state, saved into every checkpoint (rank 0) under keys of your choice.
  virtual void on_save_checkpoint(torch::serialize::OutputArchive& archive) { (void)archive; }
  /// Your state back on resume (every rank), from the archive on_save_checkpoint wrote.
  virtual void on_load_checkpoint(torch::serialize::InputArchive& archive) { (void)archive; }
  virtual void on_train_end(const TrainResult& result) { (void)result; }
};

/// A Callback with one more hook, between the gradients' average over the ranks and the
/// optimizer's step: e.g. clip or inspect the gradients (trainer.model()->parameters()). It runs
/// on the host at every step, which a replayed CUDA graph can't do: a run with one trains
/// eagerly (a log line says why). A step --nonfinite skip drops doesn't call it.
class OptimizerStepCallback : public Callback {
 public:
  /// Every rank, every step, after the backward (the gradients are averaged) and before the
  /// optimizer's step. What it throws ends the run as a callback's error.
  virtual void on_before_optimizer_step(Trainer& trainer) = 0;
};

}  // namespace train
