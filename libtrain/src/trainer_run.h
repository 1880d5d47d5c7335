// The Trainer's working state while fit() runs (Trainer::Run): what the run is made of and the
// parts that own its concerns (the schedule, the stop agreement, the checkpoint session, the run
// log). Set-up in trainer.cpp, the loop in trainer_loop.cpp, stops and the end in trainer_end.cpp.
// Private.
#pragma once

#include "train/trainer.h"


#include "train/ddp.h"
#include "train/text.h"
#include "train/error.h"
#include "train/log.h"
#include "train/process_group.h"
#include "train/training_state.h"
#include "checkpoint_session.h"
#include "comm/comm_plan.h"
#include "device/train_device.h"
#include "early_stop.h"
#include "epoch_orders.h"
#include "fault_injection.h"
#include "nonfinite.h"
#include "profile.h"
#include "rollcall.h"
#include "run_log.h"
#include "schedule.h"
#include "optimizer_sharding.h"
#include "step/grad_clip.h"
#include "step/train_step.h"
#include "step_choice.h"
#include "stop_agreement.h"
#include "user_code.h"
#include "weight_average.h"

#include <chrono>
#include <memory>

namespace train {
namespace detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

inline std::string fmt(const char* f, double v) { return text::format(f, v); }

/// An epoch's training time: its segments between checkpoints (a checkpoint's own time is left out).
struct EpochTimer {
  Clock::time_point t0 = Clock::now();
  double earlier = 0;  // seconds of the segments before the last checkpoint
  double seconds() const { return earlier + seconds_since(t0); }
  void pause() { earlier += seconds_since(t0); }
  void resume() { t0 = Clock::now(); }
};

}  // namespace detail

struct Trainer::Run {
  // From the constructor.
  TrainConfig c;
  DistEnv env;
  int threads = 1;
  std::unique_ptr<detail::TrainDevice> dev;  // what differs between the CPU and a GPU
  std::unique_ptr<detail::RunLog> run_log;   // progress lines, metrics, the epoch line, the run record

  // What fit() trains, and with what.
  const TrainSpec* spec = nullptr;
  int64_t batch = 0;   // per rank: --batch-size or the spec's
  int epochs = 0;      // --epochs or the spec's
  int64_t accumulate = 1;  // --accumulate-steps or the spec's: micro-batches of `batch` per optimizer step
  std::unique_ptr<detail::GradClip> clip;  // --clip-grad-norm or the spec's; null: no clipping
  int64_t step_samples() const { return batch * accumulate; }  // per rank and optimizer step
  std::shared_ptr<ProcessGroup> pg;
  detail::RollCallRecord* where = nullptr;  // this rank's position (the process group's; null for one rank)
  detail::CommPlan plan;                    // how the gradients travel (connect())
  ModelHandle model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<detail::TrainStep> train_step;
  detail::OptimizerSharding sharding;  // ZeRO-1 (optimizer_sharding.h): --shard-optimizer or the spec's
  detail::StepContext step_context;  // what the step is doing, for an error's context
  detail::FaultInjection faults;     // a test's injected faults (fault_injection.h)
  LossFn injected_loss;              // the loss with TRAIN_FAULT_NAN_AT_STEP's NaN
  std::unique_ptr<detail::StepProfiler> profiler;  // --profile

  // The parts that own the run's concerns.
  std::unique_ptr<detail::Schedule> schedule;             // the learning rate
  std::unique_ptr<detail::StopAgreement> stops;           // signals, time limit, non-finite values
  std::unique_ptr<detail::CheckpointSession> checkpoints;  // when, write, keep, resume
  std::unique_ptr<detail::EpochOrders> orders;            // each epoch's samples, the next drawn ahead
  // The training controls (trainer_controls.cpp).
  Trainer* owner = nullptr;                                  // for the callbacks' hooks
  detail::EarlyStop early_stop;                              // TrainSpec::early_stopping, --early-stop-*
  std::unique_ptr<detail::WeightAverage> ema;                // TrainSpec::ema_decay, --ema-decay
  std::vector<OptimizerStepCallback*> optimizer_step_hooks;  // the spec's callbacks that have one
  TrainingState state;  // what a checkpoint holds (progress.lr is the schedule's, filled in when one is written)
  TrainResult result;

  Progress& prog() { return state.progress; }
  const at::Device& device() const { return dev->device(); }

  // Set-up (trainer.cpp).
  void setup(const TrainSpec& s);
  void setup_accumulation_and_clipping(const TrainSpec& s);
  void build_model();
  void connect();
  std::string resume();
  void make_step();
  detail::StepChoice choose_step() const;
  Precision resolve_precision() const;
  // The training controls (trainer_controls.cpp).
  void setup_controls();
  std::function<bool(const at::Tensor&)> update_gate();
  EvalResult evaluate_model(bool one_batch);
  TrainResult evaluate_checkpoint(const std::string& path);
  // The loop (trainer_loop.cpp).
  void train();
  bool train_epoch();
  at::Tensor run_step(const at::Tensor& order, int64_t start, int64_t len);
  bool after_step(detail::EpochTimer& timer);
  CheckpointDeadlines checkpoint_deadlines() const;
  void end_epoch(double epoch_seconds);
  EvalResult evaluate(bool one_batch);
  // Checkpoints, stops and the end (trainer_end.cpp).
  void write_checkpoint(Progress p, const at::Tensor& loss_sum);
  void take_snapshot();
  void checkpoint_saved(const std::string& path, const Progress& p);
  void end_run(const StopRequest& request, detail::EpochTimer& timer);
  void stop(const StopRequest& request);
  void stop_nonfinite();
  TrainResult finish();

  // "at step 5 (epoch 1) on rank 1", for an error in the user's code.
  std::string place(int64_t step) const {
    return "at step " + std::to_string(step) + " (epoch " + std::to_string(state.progress.epoch) + ") on rank " +
           std::to_string(env.rank);
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
    for (const auto& cb : spec->callbacks) {
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
