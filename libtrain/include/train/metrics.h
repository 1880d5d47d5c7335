// Where a run's numbers go: the Trainer hands each progress line, each epoch's end and what
// callbacks log (Trainer::log_metrics) to its metrics sinks on rank 0. Two come with libtrain, the
// JSON-lines file (--metrics) and TensorBoard event files (--tensorboard); TrainSpec takes your own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace train {

/// One set of numbers at one step: what a line of the --metrics file holds.
struct MetricsRecord {
  /// "train" (a progress line), "epoch" (an epoch's end), or the name a callback logged under.
  std::string event;
  int epoch = 0;
  std::int64_t step = 0;  ///< optimizer steps so far in the run (a resumed run goes on counting)
  std::vector<std::pair<std::string, double>> values;  ///< name -> value, in the order written
  double time = 0;        ///< wall-clock seconds since the Unix epoch
};

/// Receives a run's records on rank 0. A resumed run is the same run: open() tells the sink the
/// step the run starts from, and records an earlier attempt wrote after it are stale (they are
/// done again), so a sink that keeps history drops them.
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  /// Called once, before the first record, with the last step already done (0 for a fresh run).
  virtual void open(std::int64_t start_step) { (void)start_step; }
  /// One record; steps never go back within one event.
  virtual void write(const MetricsRecord& record) = 0;
};

/// The --metrics file: one JSON object per record ({"event", "epoch", "step", the values, "time"}),
/// each line flushed so a killed job keeps it. open() rewrites the file without the lines of steps
/// after the start step (and a torn last line), then appends.
/// @throws train::ConfigError naming `option` and `path` when the file can't be written (from open()).
std::unique_ptr<MetricsSink> make_jsonl_sink(const std::string& path, const std::string& option = "--metrics");

/// The --tensorboard folder: each value becomes a scalar tagged "<event>/<name>" (train/loss,
/// epoch/test_accuracy, ...) at the record's step, in a TensorBoard event file (see
/// tensorboard::EventFileWriter for how a resumed run keeps one unbroken line).
/// @throws train::ConfigError naming `option` and `dir` when the folder can't be written (from open()).
std::unique_ptr<MetricsSink> make_tensorboard_sink(const std::string& dir, const std::string& option = "--tensorboard");

}  // namespace train
