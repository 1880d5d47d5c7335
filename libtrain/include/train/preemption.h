// Preemption, cancellation and time limits for a job: which signals mean "checkpoint and requeue",
// which mean "checkpoint and stop", the SLURM job's end time, and `scontrol requeue`.
#pragma once

#include "train/base/env.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace train {

class ProcessGroup;

/// Exit status after a checkpoint for a preemption signal or the time limit (EX_TEMPFAIL: "try
/// again later"); the job was requeued when it could be.
constexpr int kExitPreempted = 75;

/// What a stop request means.
enum class StopKind {
  none,        ///< keep training
  preempt,     ///< a preemption signal: checkpoint, requeue, exit kExitPreempted
  time_limit,  ///< the job's end time is near (or its time-limit SIGTERM came): same as preempt
  cancel,      ///< SIGTERM/SIGINT (scancel, Ctrl-C): checkpoint, never requeue, exit 128 + signal
  nonfinite,   ///< a rank saw a non-finite loss or gradient: no checkpoint, exit kExitNonFinite
};

/// "none", "preempt", "time_limit" or "cancel".
std::string to_string(StopKind kind);

/// A decision every rank agrees on (Preemption::poll).
struct StopRequest {
  StopKind kind = StopKind::none;
  std::string reason;  ///< e.g. "signal SIGUSR2", "the job's time limit", "SIGTERM (cancelled)"
  int signal = 0;      ///< the signal behind a cancel (for the exit status), else 0
  bool requeue() const { return kind == StopKind::preempt || kind == StopKind::time_limit; }
};

/// How a run reacts to signals and time limits.
struct PreemptionOptions {
  /// Signals that mean "checkpoint, requeue, resume later" (--preempt-signals; USR2 by default,
  /// the signal the generated job scripts ask SLURM for with --signal).
  std::vector<int> requeue_signals;
  /// Signals that mean "checkpoint and stop for good" (a plain scancel sends SIGTERM; Ctrl-C is
  /// SIGINT). A signal listed in requeue_signals is not a stop signal.
  std::vector<int> stop_signals;
  /// Checkpoint this long before the SLURM job's end time.
  double time_margin_sec = 60;
};

/// Signal handlers and the job's end time for one rank. Construct one per run (it installs the
/// handlers; the destructor restores the previous ones). Only one may live at a time.
///
/// SIGTERM is ambiguous under SLURM: scancel sends it, and so does the time limit. A SIGTERM that
/// arrives within 10 s of the job's end time (or after it) counts as the time limit and
/// requeues; any other is a cancel.
class Preemption {
 public:
  /// @param env this rank; rank 0 asks squeue for the job's end time when env.job_id is set.
  Preemption(PreemptionOptions options, const DistEnv& env);
  ~Preemption();
  Preemption(const Preemption&) = delete;
  Preemption& operator=(const Preemption&) = delete;

  /// This rank's flags, as counts to sum over ranks: {requeue signal, stop signal, deadline}.
  std::vector<int64_t> local_flags() const;

  /// The decision from flags summed over every rank (local_flags() of each, and optionally a
  /// fourth: the ranks that saw a non-finite value, which wins over the others).
  StopRequest decide(const std::vector<int64_t>& summed) const;

  /// Sums the flags over the process group (every rank must call it at the same step; pass
  /// nullptr for a single process) and decides. `device` is where the group's tensors live.
  /// `nonfinite`, if given: an int64 scalar on `device`, > 0 when this rank saw a non-finite
  /// loss or gradient; it travels in the same all-reduce.
  StopRequest poll(ProcessGroup* process_group, const at::Device& device, const at::Tensor& nonfinite = {}) const;

  /// The same agreement without blocking the host, for CUDA runs (it works on the CPU too, where
  /// the copies are done at once): post() starts the flags' copy
  /// back to pinned host memory, after their all-reduce on the device with an NCCL group (both on a
  /// side stream that waits for the current stream and that later work doesn't wait for, unless
  /// a CUDA graph calls NCCL on the group's communicator: then on the current stream);
  /// collect(), called by every rank at the same later step, waits for that copy (long done by
  /// then), sums it over any other group (Gloo) on the host, and decides. Returns StopKind::none
  /// when nothing was posted.
  void post(ProcessGroup* process_group, const at::Device& device, const at::Tensor& nonfinite = {});
  StopRequest collect();

  /// The SLURM job's end time (epoch seconds) as squeue reported it at start; 0 when unknown or
  /// when the job has no time limit. Rank 0 only (0 on the others).
  int64_t job_end_time() const { return end_time_; }

  /// Whether squeue said at start that the SLURM job has no time limit (UNLIMITED). Rank 0 only.
  bool job_has_no_time_limit() const { return no_time_limit_; }

  /// Runs `scontrol requeue` for this job (or array task); logs and returns false on failure.
  bool requeue_job() const;

 private:
  PreemptionOptions options_;
  DistEnv env_;
  int64_t end_time_ = 0;
  bool no_time_limit_ = false;
  std::vector<std::pair<int, void*>> previous_;  // signal, saved struct sigaction
  at::Tensor posted_;                            // pinned host copy of the (summed) flags
  ProcessGroup* posted_group_ = nullptr;         // sums posted_ on the host at collect(), or null
  std::shared_ptr<void> posted_event_;           // what collect() waits for: that copy (not on the CPU)
  bool posted_pending_ = false;                  // post() ran and collect() has not
};

/// Parses a signal list ("USR1,USR2,TERM", "SIGUSR2", "none") into signal numbers.
/// @throws train::ConfigError for an unknown name.
std::vector<int> parse_signal_list(const std::string& list, const std::string& flag = "--preempt-signals");

}  // namespace train
