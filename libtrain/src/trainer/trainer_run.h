// The Trainer's working state while fit() runs (Trainer::Run): the run's plan and the parts that own
// its concerns, each with a narrow face: the device, the run log, the connection to the other ranks,
// the learner (model, optimizer, clipping, sharding), the step and the side work around it, the
// schedule (the rate's one owner), the stop agreement, checkpoints, the batch feed, the training
// controls. The parts are built in one place, in one order (trainer.cpp: Run::build); the loop is
// trainer_loop.cpp, stops and the end trainer_end.cpp. Private.
#pragma once

#include "train/trainer.h"

#include "checkpoint/checkpoint_session.h"
#include "comm/comm_plan.h"
#include "data/batch_feed.h"
#include "data/loader.h"
#include "device/train_device.h"
#include "health/fault_injection.h"
#include "health/rollcall.h"
#include "health/straggler_watch.h"
#include "log/run_log.h"
#include "optim/optimizer_sharding.h"
#include "optim/schedule.h"
#include "step/grad_clip.h"
#include "step/step_choice.h"
#include "step/train_step.h"
#include "stops/stop_agreement.h"
#include "train/base/error.h"
#include "train/base/log.h"
#include "train/base/text.h"
#include "train/ddp.h"
#include "train/process_group.h"
#include "train/training_state.h"
#include "trainer/early_stop.h"
#include "trainer/run_plan.h"
#include "step/step_observers.h"
#include "trainer/user_code.h"
#include "trainer/weight_average.h"

#include <chrono>
#include <memory>
#include <vector>

namespace train {
namespace detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// An epoch's training time: its segments between checkpoints (a checkpoint's own time is left out).
struct EpochTimer {
  Clock::time_point t0 = Clock::now();
  double earlier = 0;  // seconds of the segments before the last checkpoint
  double seconds() const { return earlier + seconds_since(t0); }
  void pause() { earlier += seconds_since(t0); }
  void resume() { t0 = Clock::now(); }
};

/// How this rank reaches the others: the communication plan, the process group (null for one
/// process), this rank's roll-call record, DDP's reducer, the roll-call watchdog of a stalled run,
/// and the epoch line's straggler report.
struct Connection {
  CommPlan plan;
  std::shared_ptr<ProcessGroup> pg;
  RollCallRecord* where = nullptr;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<RollCall> rollcall;
  StragglerWatch stragglers;
};

/// What learns: the model, its optimizer, --clip-grad-norm (null: none), ZeRO-1's sharding.
struct Learner {
  ModelHandle model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<GradClip> clip;
  OptimizerSharding sharding;
};

/// The step and the side work around it: the step itself, what it is doing (for an error's
/// context), a test's injected faults and the loss with its NaN, and the observers of every step.
struct StepRunner {
  std::unique_ptr<TrainStep> step;
  StepContext context;
  FaultInjection faults;
  LossFn injected_loss;
  StepObservers observers;
};

/// The training controls: early stopping, the weights' moving average, the callbacks' hooks
/// before the optimizer's step, and the Trainer they are handed.
struct Controls {
  Trainer* owner = nullptr;
  EarlyStop early_stop;
  std::unique_ptr<WeightAverage> ema;
  std::vector<OptimizerStepCallback*> optimizer_step_hooks;
};

}  // namespace detail

struct Trainer::Run {
  detail::RunPlan plan;                                    // the flags and the spec, resolved once
  std::unique_ptr<detail::TrainDevice> dev;                // what differs between the CPU and a GPU
  std::unique_ptr<detail::RunLog> run_log;                 // progress lines, metrics, the run record
  detail::Connection comm;                                 // the process group, DDP
  detail::Learner learner;                                 // model, optimizer, clipping, sharding
  detail::StepRunner steps;                                // the step and its observers
  std::unique_ptr<detail::Schedule> schedule;              // the learning rate
  std::unique_ptr<detail::StopAgreement> stops;            // signals, time limit, non-finite values
  std::unique_ptr<detail::CheckpointSession> checkpoints;  // when, write, keep, resume, snapshots
  std::unique_ptr<detail::BatchFeed> feed;                 // each step's batch
  detail::Controls controls;                               // early stopping, EMA, optimizer-step hooks
  TrainingState state;  // what a checkpoint holds
  TrainResult result;
  int64_t skipped_before = 0;  // --bad-samples skip: samples replaced before this process's loader (a resumed run's)

  Progress& prog() { return state.progress; }
  const TrainConfig& config() const { return plan.config; }
  const DistEnv& env() const { return plan.env; }
  const at::Device& device() const { return dev->device(); }

  // Set-up (trainer.cpp), in the order fit() calls it.
  void build(const TrainSpec& spec);
  void build_model();
  void connect();
  std::string resume();
  void start_ddp();
  void make_step();
  void build_observers(detail::StepParts& parts);
  detail::StepChoice choose_step() const;
  // The training controls (trainer_controls.cpp).
  void setup_controls();
  void gate_updates(detail::StepParts& parts);
  std::string evaluated() const;
  EvalResult evaluate_model(bool one_batch);
  TrainResult evaluate_checkpoint(const std::string& path);
  // The loop (trainer_loop.cpp).
  void train();
  void make_feed();
  detail::LoaderFeed* loader() const;
  bool train_epoch();
  at::Tensor run_step(const detail::StepBatch& batch);
  bool after_step(detail::EpochTimer& timer);
  CheckpointDeadlines checkpoint_deadlines() const;
  void end_epoch(double images, double epoch_seconds);
  void note_memory();
  EvalResult evaluate(bool one_batch);
  // Checkpoints, stops and the end (trainer_end.cpp).
  int64_t skipped_samples();
  void write_checkpoint(Progress p, const at::Tensor& loss_sum);
  void take_snapshot();
  void checkpoint_saved(const std::string& path, const Progress& p);
  void end_run(const StopRequest& request, detail::EpochTimer& timer);
  void stop(const StopRequest& request);
  void stop_nonfinite(const StopRequest& request);
  void shut_down();
  TrainResult finish();

  // "at step 5 (epoch 1) on rank 1", for an error in the user's code.
  std::string place(int64_t step) const {
    return "at step " + std::to_string(step) + " (epoch " + std::to_string(state.progress.epoch) + ") on rank " +
           std::to_string(plan.env.rank);
  }
  // Runs the user's `fn`; what it throws comes out as a train::UserCodeError naming `part`.
  template <typename Fn>
  auto user_code(const char* part, Fn&& fn) -> decltype(fn()) {
    try {
      return fn();
    } catch (...) {
      detail::throw_user_error(part, place(state.progress.step), "", std::current_exception());
    }
  }
  void for_callbacks(const char* hook, const std::function<void(Callback&)>& fn) {
    for (const auto& cb : plan.spec->callbacks) {
      try {
        fn(*cb);
      } catch (...) {
        detail::throw_user_error(std::string("a callback's ") + hook, place(state.progress.step), "",
                                 std::current_exception());
      }
    }
  }
};

}  // namespace train
