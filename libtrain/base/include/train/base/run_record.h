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

/// One launch of train within a job, as rank 0 saw it: when it reached each point of its start.
/// Times are Unix seconds; 0 means "not reached (yet)". `trainctl run` copies a relaunch's into its
/// restart entry, and the goodput benchmark (scripts/bench/goodput.py) reads them.
struct LaunchTimes {
  int number = 0;            ///< TRAIN_RESTART_COUNT: 0 for the job's first launch
  double started = 0;        ///< train's process started (from /proc: before LibTorch loaded)
  double connecting = 0;     ///< data loaded, model built: the rendezvous begins
  double connected = 0;      ///< the process group is up (after --health-check, when on)
  double loaded = 0;         ///< the state to resume from is loaded (or none was found)
  std::string source;        ///< "snapshot", "checkpoint", or "" (a fresh start)
  int64_t resumed_step = 0;  ///< the optimizer step it resumed from
  double training = 0;       ///< its first optimizer step ended
};

/// One restart of the training step inside an allocation, as `trainctl run` logs it.
struct RestartEntry {
  int number = 0;                       ///< 1 for the first restart
  std::string cause;                    ///< "lost rank", "node failed health check", ...
  std::vector<std::string> nodes;       ///< the node(s) blamed (and excluded, when `excluded`)
  bool excluded = false;                ///< the next launch left `nodes` out (srun --exclude)
  int exit_code = 0;                    ///< the step's exit status that caused it
  int64_t resumed_step = -1;            ///< the step the next launch resumed from (-1: unknown yet)
  double seconds = 0;                   ///< from the failure to the relaunch's first step (0: unknown yet)
  double time = 0;                      ///< Unix time of the failure (trainctl run's first sight of it)
  int64_t failed_step = -1;             ///< the run's last reported step before the failure (RunRecord::progress_step)
  double failed_step_time = 0;          ///< when train reported it (Unix time)
  double relaunched = 0;                ///< Unix time srun was started again
  LaunchTimes launch;                   ///< the relaunch's start, once it trains
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
  int64_t progress_step = 0;            ///< the newest step train reported: at most once a second, and at snapshots
  double progress_time = 0;             ///< Unix time of progress_step
  LaunchTimes launch;                   ///< the current (or last) launch's start
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
  /// Reads the record at `path` (or starts an empty one), lets `edit` change it, saves it, holding
  /// an flock on `path`.lock so that train and `trainctl run` don't overwrite each other's edits.
  /// Writers change only their own fields: train the run's, `trainctl run` `restarts` and `state`
  /// between launches.
  static std::string update(const std::string& path, const std::function<void(RunRecord&)>& edit);
};

/// Unix time this process started (its exec, from /proc/self/stat), or now when /proc can't tell.
double process_start_time();

}  // namespace train
