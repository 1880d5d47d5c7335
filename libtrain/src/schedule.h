// The learning rate's one owner while a run trains: it reads the base rate from the optimizer,
// computes each step's or epoch's rate (TrainSpec::lr_schedule), and pushes it into the
// optimizer's parameter groups and the step's device copy. Private.
#pragma once

#include "train/config.h"
#include "train/train_spec.h"

#include <cstdint>
#include <functional>
#include <string>

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace train::detail {

class TrainStep;

/// The run's length as a schedule sees it: every rank takes ceil(samples / ranks) samples
/// (DistributedSampler pads), in batches of `batch`; --dry-run takes one batch an epoch; --max-steps
/// caps the total. (The base rate is the Schedule's to fill.)
ScheduleContext schedule_context(int64_t samples, int world_size, int rank, int64_t batch, int epochs,
                                 const RunConfig& run);

/// The rate of every step. Built once the optimizer exists; the rate it starts with is the
/// schedule's rate at index 0 (or the optimizer's own), until a checkpoint's rate replaces it.
class Schedule {
 public:
  /// `schedule` over a run of `run`'s length; the base rate is `optimizer`'s first group's.
  /// `where` names the place ("at step 5 (epoch 1) on rank 1") for an error in the user's schedule.
  Schedule(LrSchedule schedule, const ScheduleContext& run, torch::optim::Optimizer& optimizer,
           std::function<std::string()> where);

  /// The schedule moves after every optimizer step (else after every epoch).
  bool per_step() const { return schedule_.every == LrSchedule::Every::step; }
  /// What the schedule knows of the run (ScheduleContext::base_lr is the optimizer's rate as built).
  const ScheduleContext& context() const { return run_; }
  /// The rate the next step runs with: what a checkpoint saves as Progress::lr.
  double lr() const { return lr_; }
  /// The rate the last step ran with (StepInfo::lr, EpochInfo::lr, the progress lines); 0 before one.
  double last_step_lr() const { return last_step_lr_; }

  /// A resumed checkpoint's rate (Progress::lr) replaces the start's.
  void resume(double lr) { lr_ = lr; }
  /// The step whose device copy of the rate follows it (TrainStep::lr_changed); null: none.
  void drive(TrainStep* step) { step_ = step; }

  /// An epoch begins: the rate goes into the optimizer, and into the step where it changed.
  void start_epoch();
  /// Optimizer step `step` (counted from 1) ran with lr(); a per-step schedule moves on and pushes
  /// the next rate where it changed (a captured step's device copy, no recapture, no host wait).
  void after_step(int64_t step);
  /// Epoch `epoch` ended: an epoch schedule's next rate (pushed when the next epoch starts).
  void after_epoch(int epoch);

 private:
  double next(int64_t index) const;  // the user's schedule; its errors name `where_`
  void push();                       // lr_ into the optimizer and, where it changed, the step

  LrSchedule schedule_;
  ScheduleContext run_;
  torch::optim::Optimizer* optimizer_;
  TrainStep* step_ = nullptr;
  std::function<std::string()> where_;
  double lr_ = 0;             // the next step's rate
  double pushed_ = -1;        // the rate the step last followed (-1: none yet)
  double last_step_lr_ = 0;
};

}  // namespace train::detail
