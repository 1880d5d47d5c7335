// The run record: a small JSON file per SLURM job (or per local run) that `train` and
// `trainctl run` keep up to date, and that `trainctl status`/`logs` read instead of scraping
// train's human-readable log lines. No LibTorch: train, trainctl and tests share it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace train {

/// One restart of the training step inside an allocation, as `trainctl run` logs it.
struct RestartEntry {
  int number = 0;                       ///< 1 for the first restart
  std::string cause;                    ///< "lost rank", "node failed health check", ...
  std::vector<std::string> nodes;       ///< the node(s) blamed (and excluded, when `excluded`)
  bool excluded = false;                ///< the next launch left `nodes` out (srun --exclude)
  int exit_code = 0;                    ///< the step's exit status that caused it
  int64_t resumed_step = -1;            ///< the step the next launch resumed from (-1: unknown yet)
  double seconds = 0;                   ///< from the failure to the relaunch's first step (0: unknown yet)
  double time = 0;                      ///< Unix time of the failure
};

/// What a run is and where its files are. Fields a writer doesn't know stay empty.
struct RunRecord {
  std::string job_id;                   ///< SLURM_JOB_ID, or "" for a run outside SLURM
  std::string state;                    ///< "running", "done", "preempted", "cancelled", "failed", "nonfinite", "restarting"
  std::string checkpoint_dir;           ///< absolute; "" without --checkpoint-dir
  std::string tensorboard_dir;          ///< absolute; "" without --tensorboard
  std::string metrics_file;             ///< absolute; "" without --metrics
  int world_size = 0;
  std::vector<std::string> nodes;       ///< the nodes of the current (or last) launch
  int64_t step = 0;                     ///< the last step train reported
  int epoch = 0;
  std::string last_checkpoint;          ///< the newest checkpoint written (absolute path)
  std::vector<RestartEntry> restarts;   ///< in order; owned by `trainctl run`
  double updated = 0;                   ///< Unix time of the last write

  /// Where a job's record lives: `<work_dir>/.train/runs/<job_id>.json` (work_dir: the job's
  /// submit dir, SLURM_SUBMIT_DIR / scontrol's WorkDir). TRAIN_RUN_RECORD overrides it for a run.
  static std::string path_for(const std::string& work_dir, const std::string& job_id);
  /// The record of this process's run from the environment (TRAIN_RUN_RECORD, else
  /// SLURM_SUBMIT_DIR + SLURM_JOB_ID), or "" when neither is set.
  static std::string path_from_env();
  /// Reads a record; std::nullopt when the file is missing. Throws train::ConfigError naming the
  /// file when it exists but is not a run record.
  static std::optional<RunRecord> load(const std::string& path);
  /// Writes atomically (temporary file + rename), creating the folder. Returns "" or the error text.
  std::string save(const std::string& path) const;
  /// Reads the record at `path` (or starts an empty one), lets `edit` change it, saves it. Writers
  /// change only their own fields: train the run's, `trainctl run` `restarts` and `state` between launches.
  static std::string update(const std::string& path, const std::function<void(RunRecord&)>& edit);
};

}  // namespace train
