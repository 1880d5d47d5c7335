// The checkpoint time budget: how long a checkpoint takes against the deadlines it must beat
// (the job script's time-limit signal lead, --time-margin before the time limit, SLURM's KillWait
// after a SIGTERM), with messages that name the setting to change. No LibTorch: train checks
// it at start and after each checkpoint, trainctl preflight before the job trains.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace train {

/// The deadlines a checkpoint has to fit in, each in seconds; unset ones are not checked.
struct CheckpointDeadlines {
  /// The job script's time-limit signal comes this long before the limit (`#SBATCH
  /// --signal=USR2@N`; the generated scripts export it as TRAIN_SIGNAL_LEAD).
  std::optional<double> signal_lead_sec;
  /// --time-margin: train checkpoints this long before the job's end time (jobs with a time limit).
  std::optional<double> time_margin_sec;
  /// SLURM's KillWait: the time between a SIGTERM (scancel, the time limit) and the SIGKILL.
  std::optional<double> kill_wait_sec;
};

/// The deadlines of this process's job: TRAIN_SIGNAL_LEAD, `time_margin_sec` when the job has a
/// time limit, and `kill_wait_sec` (from `scontrol show config`, read by the caller; unset outside SLURM).
CheckpointDeadlines deadlines_from_env(std::optional<double> time_margin_sec, std::optional<double> kill_wait_sec);

/// SLURM's KillWait from `scontrol show config`'s text ("KillWait = 30 sec"); unset if absent.
std::optional<double> parse_kill_wait(const std::string& scontrol_show_config);

/// One warning for each deadline shorter than `checkpoint_sec` (with a safety factor of 1.5), each
/// naming the deadline, both times, `how` (e.g. "measured: the last checkpoint" or "estimated: 14 MB
/// at 80 MB/s on /scratch/ck") and the setting to change, with a suggested value. Empty: it fits.
std::vector<std::string> check_checkpoint_budget(double checkpoint_sec, const CheckpointDeadlines& deadlines,
                                                 const std::string& how);

/// Seconds to write `bytes` at `bytes_per_sec`.
double estimate_checkpoint_seconds(int64_t bytes, double bytes_per_sec);

/// Measures the write speed of the file system under `dir`: writes `bytes` to a probe file,
/// fsyncs and removes it. Returns bytes per second, or 0 when the probe could not be written.
double measure_write_speed(const std::string& dir, int64_t bytes);

}  // namespace train
