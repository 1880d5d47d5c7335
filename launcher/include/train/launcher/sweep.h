// `trainctl sweep` and `trainctl sweep-report`: a hyperparameter grid (--param lr=0.1,0.5) as one
// SLURM job array, its index file (task id -> parameters, DIR/sweep.json), and the table of final
// metrics per combination read back from the tasks' run folders. No LibTorch. See docs/workflow.md.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace train {

/// The index file of a sweep, in its --output-dir.
constexpr char kSweepIndexFile[] = "sweep.json";
/// The batch script of a sweep, in its --output-dir.
constexpr char kSweepScriptFile[] = "sweep.sh";
/// Each task's metrics (train --metrics), in its run folder.
constexpr char kSweepMetricsFile[] = "metrics.jsonl";
/// Each task's log (the array's default --output), in its run folder; train's done line ends it.
constexpr char kSweepLogFile[] = "train.out";
/// Most tasks one sweep may have: SLURM's default MaxArraySize (1001) allows indices 0-1000.
constexpr int kMaxSweepTasks = 1001;

/// One swept parameter: train's flag (without "--") and the values it takes.
struct SweepParam {
  std::string name;                 ///< e.g. "lr", passed to train as --lr
  std::vector<std::string> values;  ///< in the order given, e.g. {"0.1", "0.5"}
};

/// One combination of the grid: (name, value) pairs, in the order the parameters were given.
using SweepPoint = std::vector<std::pair<std::string, std::string>>;

/// Parses a --param value: NAME=V1,V2,... NAME is a flag name (letters, digits, '-', '_', starting
/// with a letter; a leading "--" is dropped); values are non-empty, distinct, without spaces or
/// control characters.
/// @throws train::ConfigError naming the value, with what was expected and found, and a hint.
SweepParam parse_sweep_param(const std::string& text);

/// Every combination of the parameters (the first varies slowest), as the job array's tasks 0..N-1.
/// @throws train::ConfigError for no parameters, a parameter given twice, or more than
///   kMaxSweepTasks combinations.
std::vector<SweepPoint> sweep_grid(const std::vector<SweepParam>& params);

/// train's arguments for a combination: {"--lr", "0.1", "--batch-size", "64"}.
std::vector<std::string> sweep_point_args(const SweepPoint& point);

/// What a sweep's index file records.
struct SweepIndex {
  std::string job_name;                  ///< the array's job name
  std::string job_id;                    ///< the array's job id once submitted, else ""
  std::string output_dir;                ///< the sweep's folder (absolute)
  std::vector<std::string> param_names;  ///< the swept parameters, in order
  std::vector<SweepPoint> tasks;         ///< task i's combination
  std::vector<std::string> train_args;   ///< the arguments every task shares
};

/// The folder of task `task` of a sweep: DIR/task-N.
std::string sweep_task_dir(const std::string& output_dir, int task);

/// The index as JSON text (the content of DIR/sweep.json).
std::string render_sweep_index(const SweepIndex& index);

/// Parses an index file's text; `path` names it in messages.
/// @throws train::ConfigError when it is not a sweep index.
SweepIndex parse_sweep_index(const std::string& text, const std::string& path);

/// A task's outcome, read from its metrics file.
struct SweepResult {
  int task = 0;
  SweepPoint params;
  /// "done" (a done line), "epoch N" (epochs but no done line yet), "preempted", or "no metrics".
  std::string status;
  std::map<std::string, double> metrics;  ///< the numbers of the last done line, else of the last epoch line
};

/// A task's result from the text of its metrics file (JSON lines; lines that aren't JSON are skipped).
SweepResult parse_task_metrics(int task, const SweepPoint& params, const std::string& metrics_text);

/// Reads DIR/sweep.json, and every task's metrics file and log (for train's done line).
/// @throws train::ConfigError when DIR holds no sweep index.
std::pair<SweepIndex, std::vector<SweepResult>> read_sweep(const std::string& output_dir);

/// The table sweep-report prints: one row per task (task, parameters, status, metrics), columns
/// aligned. The metric columns are test_accuracy, test_loss, train_loss, epochs and images_per_sec
/// where any row has them.
std::string render_sweep_table(const SweepIndex& index, const std::vector<SweepResult>& results);

/// The same table as CSV (for plotting), with a header line.
std::string render_sweep_csv(const SweepIndex& index, const std::vector<SweepResult>& results);

}  // namespace train
