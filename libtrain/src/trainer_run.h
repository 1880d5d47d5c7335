// The Trainer's working state while fit() runs (Trainer::Run), shared by trainer.cpp (set-up and
// the loop) and trainer_end.cpp (resume, stops, checkpoints and the run's end). Private.
#pragma once

#include "train/trainer.h"


#include "train/adadelta.h"
#include "train/checkpoint.h"
#include "train/ddp.h"
#include "train/text.h"
#include "train/error.h"
#include "train/files.h"
#include "train/device.h"
#include "train/slurm_time.h"
#include "train/log.h"
#include "train/metrics.h"
#include "train/process_group.h"
#include "train/sampler.h"
#include "train/sha256.h"
#include "train/training_state.h"
#include "comm/comm_plan.h"
#include "comm/reducer.h"
#include "cpu_kernels.h"
#include "device/train_device.h"
#include "fault_injection.h"
#include "nonfinite.h"
#include "profile.h"
#include "rollcall.h"
#include "step/train_step.h"
#include "step_choice.h"
#include "straggler.h"
#include "user_code.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/serialize.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <future>
#include <limits>
#include <optional>
#include <thread>

#include <sched.h>
#include <unistd.h>

namespace train {
namespace detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

inline std::string fmt(const char* f, double v) { return text::format(f, v); }

}  // namespace detail

struct Trainer::Run {
  TrainConfig c;
  DistEnv env;
  int threads = 1;
  std::unique_ptr<detail::TrainDevice> dev;  // what differs between the CPU and a GPU
  at::Device device{at::kCPU};               // dev's

  // While fit() runs.
  const TrainSpec* spec = nullptr;
  int64_t batch = 0;   // per rank: --batch-size or the spec's
  int epochs = 0;      // --epochs or the spec's
  std::shared_ptr<ProcessGroup> pg;
  ModelHandle model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<CheckpointDir> ckdir;
  detail::CommPlan plan;  // how the gradients travel (connect())
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<Preemption> preemption;
  detail::RollCallRecord* where = nullptr;        // this rank's position (the process group's; null for one rank)
  std::unique_ptr<detail::RollCall> rollcall;     // while train() runs, with two ranks or more
  detail::StragglerReport stragglers;             // rank 0's, at every epoch's end
  int64_t wait_ns_at_epoch = 0, step_at_epoch = 0;  // where->wait_ns and the step when this process began the epoch
  detail::FaultInjection faults;  // a test's injected faults (TRAIN_FAULT_SIGNAL_AT_STEP, TRAIN_FAULT_NAN_AT_STEP)
  LossFn injected_loss;           // the loss with TRAIN_FAULT_NAN_AT_STEP's NaN
  std::unique_ptr<detail::NonFiniteWatch> nonfinite;  // --nonfinite (issue 24)
  detail::StepContext step_context;                   // what the step is doing, for an error's context
  std::vector<std::shared_ptr<MetricsSink>> metrics;  // rank 0: --metrics, --tensorboard, TrainSpec::metrics_sinks
  std::unique_ptr<detail::StepProfiler> profiler;  // --profile
  TrainingState state;
  TrainResult result;
  std::unique_ptr<detail::TrainStep> train_step;
  double last_step_lr = 0;  // the rate the last step ran with (EpochInfo::lr)
  double step_lr = -1;                 // the rate the step was last run (or captured) with
  std::vector<double> epoch_ips;       // images/s of each epoch this process trained
  // A progress line waits for its loss to arrive from the device instead of syncing.
  struct PendingLine {
    std::shared_ptr<detail::PendingValue> loss;
    int epoch = 0;
    int64_t step = 0, b = 0, batches = 0, seen = 0;
    double ips = 0, lr = 0, step_seconds = 0;
  };
  int64_t step_at_log = 0;  // the step of the last progress line (or the epoch's start)
  std::optional<PendingLine> pending_line;
  // Rank 0's checkpoint being written in the background (one at a time), and what it holds.
  std::future<std::pair<std::string, double>> checkpoint_write;  // path, seconds writing
  Progress checkpoint_progress;

  Progress& prog() { return state.progress; }
  const Progress& prog_const() const { return state.progress; }
  ScheduleContext schedule_run;  // what the LR schedule knows of the run (set in build_model)
  ScheduleContext schedule_context(double lr0) const;
  double next_lr(int64_t index) const;
  void follow_schedule(int64_t step);

  void setup(const TrainSpec& s);
  void connect();
  detail::StepChoice choose_step() const {
    detail::StepChoice choice = detail::choose_step(dev->gpu(), c.gpu.cuda_graph,
                                                    spec->lr_schedule.every == LrSchedule::Every::step, *optimizer);
    if (choice.graph && c.run.nonfinite == NonFinite::skip) {
      choice = {false, "--nonfinite skip decides on the host, between the backward and the update, whether to apply "
                       "each step's update (one sync a step)", c.gpu.cuda_graph == Switch::on};
    }
    return choice;
  }
  void build_model();
  std::string shape_json(double lr0) const;
  void resume();
  void apply_resumed(torch::serialize::InputArchive& archive, const std::string& path);
  void train();
  bool train_epoch();
  void make_step();
  Precision resolve_precision() const;
  bool check_stop(detail::Clock::time_point t0, double earlier_segments);
  bool end_run(const StopRequest& request, detail::Clock::time_point t0, double earlier_segments);
  at::Tensor run_step(const at::Tensor& order, int64_t start, int64_t len);
  // The stop agreement's non-finite slot (--nonfinite stop), or none.
  at::Tensor nonfinite_flag() const { return nonfinite->skip_mode() ? at::Tensor() : nonfinite->flag(); }
  void stop_nonfinite();
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
  // The stop flags travel in device memory, posted and read later without host syncs (GPUs with
  // NCCL or one rank); else ranks sum them on the host (shared memory on one machine).
  bool device_stop_flags() const {
    return dev->stop_flags_on_device(pg ? std::optional<Backend>(pg->backend()) : std::nullopt);
  }
  void log_progress(int64_t b, int64_t batches, int64_t start, const at::Tensor& loss, double& t_log_images,
                    detail::Clock::time_point& t_log);
  void print_line(const PendingLine& line, double loss);
  void flush_pending_line();
  void end_epoch(double epoch_seconds);
  std::string report_stragglers(double epoch_seconds);
  EvalResult evaluate(bool one_batch);
  void stop(const StopRequest& request);
  at::Tensor shared_loss_sum();
  void write_checkpoint(const Progress& p, const at::Tensor& loss_sum);
  void collect_checkpoint(bool wait);
  TrainResult finish();
  void write_metrics(MetricsRecord record) {
    record.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    for (const auto& sink : metrics) sink->write(record);
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
