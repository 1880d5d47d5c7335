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

/// Hooks into the loop (Lightning's names). Every method is optional; all run on every rank.
class Callback {
 public:
  virtual ~Callback() = default;
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

}  // namespace train
