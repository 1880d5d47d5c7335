// The run log: what a run tells the people and programs watching it. Progress lines (their loss
// read from the device without a sync; the log observes every step), the metrics sinks
// (--metrics, --tensorboard, the spec's), the epoch line, and the run record
// (train/base/run_record.h). Rank 0 writes. Private.
#pragma once

#include "step/step_observers.h"
#include "train/config.h"
#include "train/metrics.h"
#include "train/training_state.h"

#include <ATen/core/Tensor.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace train {
class ProcessGroup;
struct DistEnv;
struct EvalResult;
struct TrainSpec;
}  // namespace train

namespace train::detail {

class PendingValue;
class TrainDevice;

/// Rank 0's run record (train/base/run_record.h) at RunRecord::path_from_env(): written at the start
/// of training, at each point of the launch's start (LaunchTimes), after each durable checkpoint,
/// with the step's progress at most once a second, and at the end. A write that fails warns once
/// and never stops training. The progress is written by a thread of its own: the record lives in
/// the job's submit folder, often on a shared file system, whose lock and write the training
/// thread doesn't wait for (it only posts the step and its time).
class RunRecordWriter {
 public:
  /// `path` "" (no record) or the record's file; only rank 0 writes.
  RunRecordWriter(std::string path, int rank) : path_(std::move(path)), rank_(rank) {}
  /// Writes the progress still pending, then stops the writer thread.
  ~RunRecordWriter();
  RunRecordWriter(const RunRecordWriter&) = delete;
  RunRecordWriter& operator=(const RunRecordWriter&) = delete;
  /// Training starts: state "running", the run's folders (absolute), its world size and nodes.
  void start(const TrainConfig& config, const DistEnv& env);
  /// A checkpoint became durable.
  void checkpoint(const std::string& path, int64_t step, int epoch);
  /// The launch's points: data and model ready, the rendezvous about to begin.
  void connecting();
  /// The process group is up.
  void connected();
  /// The resume found `source` ("snapshot", "checkpoint" or "") at optimizer step `step`.
  void loaded(const std::string& source, int64_t step);
  /// An optimizer step ended: the launch's first one is recorded, later ones at most once a second
  /// (`force`: now, e.g. at a snapshot). Posts to the writer thread and returns.
  void progress(int64_t step, bool force = false);
  /// Waits until every progress posted so far is written.
  void flush();
  /// The run ended: "done", "preempted", "cancelled", "nonfinite" or "failed".
  void end(const std::string& state, std::optional<int64_t> step = std::nullopt, std::optional<int> epoch = std::nullopt);

 private:
  template <class Edit>
  void update(const Edit& edit);

  // The writer thread: writes the newest posted progress (an older one not yet written is
  // replaced: only the newest matters).
  struct Progress {
    int64_t step = 0;
    double time = 0;
    double first_step_time = 0;  // > 0: the launch's first step ended then
  };
  void write_progress_loop();

  std::string path_;
  int rank_;
  std::atomic<bool> warned_{false};
  bool trained_ = false;  // the launch's first step was recorded
  std::chrono::steady_clock::time_point last_progress_{};
  std::mutex mu_;
  std::condition_variable wake_;
  std::optional<Progress> pending_;
  bool writing_ = false, stopping_ = false;
  std::thread writer_;
};

/// The run's end state for the record: "done", "preempted", "cancelled" or "nonfinite".
std::string record_state(const TrainResult& result);

/// "Test set[ (evaluated)]: Average loss: ..., Accuracy: c/n (p%)".
std::string test_text(const EvalResult& eval, const std::string& evaluated);

class RunLog : public StepObserver {
 public:
  /// `device`: where the losses are read from (it outlives the log).
  RunLog(const LoggingConfig& config, const DistEnv& env, const TrainDevice& device);
  ~RunLog() override;

  /// Rank 0, before the first step: the sinks (--metrics, --tensorboard, the spec's) opened at
  /// `start_step` (a resumed run's records go on from there). `spec` outlives the log's use;
  /// `train_size`: its training data's samples.
  /// `evaluated`: what the test lines evaluate, e.g. "the weights' moving average, decay 0.999"
  /// ("" the weights).
  void open(const TrainSpec& spec, int64_t train_size, int64_t start_step, std::string evaluated);
  /// One record to every sink (rank 0; the others have none), stamped with the time.
  void write_metrics(MetricsRecord record);
  /// The run record (rank 0 writes it).
  RunRecordWriter& record() { return record_; }

  /// An epoch's steps begin at optimizer step `step`.
  void start_epoch(int64_t step);
  /// A step ended: the run record's progress, and every --log-interval steps (and at the epoch's
  /// last) a progress line, whose loss is read when the next line comes (at once on the CPU).
  void step_done(const StepDone& done) override;
  /// Prints the line still waiting for its loss.
  void flush();

  /// The epoch trained `images` samples over every rank in `epoch_seconds`: the epoch line
  /// ("Test set: ...") and its metrics record. `stragglers_text`: the straggler report's part
  /// (StragglerWatch); `skipped`: --nonfinite skip's count; `data_wait`: the seconds the loop
  /// waited for the loader's batches (data read sample by sample).
  void epoch_line(const Progress& p, const EvalResult& eval, double images, double epoch_seconds, double eval_seconds,
                  const std::string& stragglers_text, std::optional<int64_t> skipped,
                  std::optional<double> data_wait = std::nullopt);
  /// Samples per second over the epochs after the first (the first, when there is one), or 0.
  double steady_images_per_sec() const;

 private:
  struct PendingLine;
  void progress(const StepDone& done);
  void print_line(const PendingLine& line, double loss);
  std::string evaluated_;

  LoggingConfig config_;
  int rank_, world_size_;
  const TrainDevice& dev_;
  const TrainSpec* spec_ = nullptr;
  int64_t train_size_ = 0;
  std::vector<std::shared_ptr<MetricsSink>> sinks_;
  std::unique_ptr<PendingLine> pending_;  // a line waiting for its loss to arrive from the device
  // Since the last progress line (or the epoch's start): when, its step, the samples trained.
  struct { std::chrono::steady_clock::time_point time; int64_t step = 0; double images = 0; } since_line_;
  std::vector<double> epoch_ips_;  // samples/s of each epoch this process trained
  RunRecordWriter record_;
};

}  // namespace train::detail
