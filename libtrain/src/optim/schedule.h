// The learning rate's one owner while a run trains: it reads the base rate from the optimizer,
// computes each step's or epoch's rate (TrainSpec::lr_schedule), pushes it into the optimizer's
// parameter groups (the step's device copy follows), and keeps its state in checkpoints. Private.
#pragma once

#include "train/config.h"
#include "train/train_spec.h"

#include <cstdint>
#include <functional>
#include <string>

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace train::detail {

/// The run's length as a schedule sees it: `steps_per_epoch` optimizer steps an epoch (the run's
/// plan counts them), one with --dry-run; --max-steps caps the total. (The base rate is the
/// Schedule's to fill.)
ScheduleContext schedule_context(int64_t steps_per_epoch, int epochs, const RunConfig& run);

/// The rate of every step. Built once the optimizer exists; the rate it starts with is the
/// schedule's rate at index 0 (or the optimizer's own), until a checkpoint's record replaces it.
class Schedule {
 public:
  /// `schedule` over a run of `run`'s length; the base rate is `optimizer`'s first group's.
  /// `where` names the place ("at step 5 (epoch 1) on rank 1") for an error in the user's schedule.
  /// `rate_changed` is called each time the rate pushed into the optimizer changed (the step's
  /// TrainStep::lr_changed: a captured step follows it, or is captured again).
  Schedule(LrSchedule schedule, const ScheduleContext& run, torch::optim::Optimizer& optimizer,
           std::function<std::string()> where, std::function<void()> rate_changed = {});

  /// What the schedule knows of the run (ScheduleContext::base_lr is the optimizer's rate as built).
  const ScheduleContext& context() const { return run_; }
  /// The rate the next step runs with.
  double lr() const { return lr_; }
  /// The rate the last step ran with (StepInfo::lr, EpochInfo::lr, the progress lines); 0 before one.
  double last_step_lr() const { return last_step_lr_; }

  /// An epoch begins: the rate goes into the optimizer, and to the step where it changed.
  void start_epoch();
  /// Optimizer step `step` (counted from 1) ran with lr(); a per-step schedule moves on and pushes
  /// the next rate where it changed (a captured step's device copy, no recapture, no host wait).
  void after_step(int64_t step);
  /// Epoch `epoch` ended: an epoch schedule's next rate (pushed when the next epoch starts).
  void after_epoch(int epoch);

  /// The schedule's state into a checkpoint's record (TrainingState::save_schedule): "lr", the rate
  /// the next step runs with (a recurrence's whole state; a closed form's rate as computed for
  /// this run's length, so a resumed run gets the same bits whatever it is given).
  void save(torch::serialize::OutputArchive& record) const;
  /// The state save() wrote (TrainingState::load_schedule); pushed when the next epoch starts.
  /// @throws train::CheckpointError when the record has no "lr".
  void load(torch::serialize::InputArchive& record);

 private:
  double next(int64_t index) const;  // the user's schedule; its errors name `where_`
  void push();                       // lr_ into the optimizer and, where it changed, to the step

  LrSchedule schedule_;
  ScheduleContext run_;
  torch::optim::Optimizer* optimizer_;
  std::function<std::string()> where_;
  std::function<void()> rate_changed_;
  double lr_ = 0;             // the next step's rate
  double pushed_ = -1;        // the rate rate_changed_ last announced (-1: none yet)
  double last_step_lr_ = 0;
};

}  // namespace train::detail
