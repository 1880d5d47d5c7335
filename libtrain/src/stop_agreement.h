// The stop agreement: what makes every rank stop at the same step. Preemption and cancel signals,
// the SLURM job's time limit, non-finite values (--nonfinite), all summed over the ranks in one
// small collective; and the roll-call watchdog that ends a stalled run. Private.
#pragma once

#include "train/config.h"
#include "train/preemption.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace train {
class ProcessGroup;
}  // namespace train

namespace train::detail {

class FaultInjection;
class NonFiniteWatch;
class RollCall;
struct RollCallRecord;

class StopAgreement {
 public:
  /// Installs the signal handlers (`config.preempt_signals` requeue; SIGTERM and SIGINT cancel)
  /// and, on rank 0 of a SLURM job, reads the job's end time. One may live at a time per process.
  /// `faults`: a test's injected faults (may be null); `config.requeue` and a SLURM job id allow
  /// `scontrol requeue`.
  StopAgreement(const CheckpointConfig& config, const DistEnv& env, const FaultInjection* faults = nullptr);
  ~StopAgreement();
  StopAgreement(const StopAgreement&) = delete;
  StopAgreement& operator=(const StopAgreement&) = delete;

  /// The ranks agree over `pg` (null: one process) on `device`, every `check_every` steps;
  /// `read_later`: the flags are posted and read one check later, without host syncs.
  void connect(ProcessGroup* pg, const at::Device& device, bool read_later, int64_t check_every);
  /// Watches `model`'s loss and gradients for non-finite values (config.run.nonfinite).
  void watch(const TrainConfig& config, torch::nn::Module& model);
  /// The non-finite watch (watch() first).
  NonFiniteWatch& nonfinite() { return *nonfinite_; }

  /// Whether the ranks check after optimizer step `step` (every check_every steps, and at once
  /// after --nonfinite skip gave up).
  bool due(int64_t step) const;
  /// Every rank at the same step: the agreed request (StopKind::none: train on). On a GPU this
  /// reads the agreement posted a check ago and posts the next.
  StopRequest check(int64_t step);
  /// Every rank at an epoch's end or before a checkpoint: a non-finite request when any rank saw
  /// a non-finite value the agreement may not have carried yet; `at_epoch_end` also drains a
  /// posted agreement (the epoch ended first), and the next check() returns a stop it asked for.
  StopRequest settle(bool at_epoch_end);
  /// Every rank, for an agreed request: a non-finite one when any rank saw such a value since
  /// (the weights may be bad then, whatever else was asked), else `request`.
  StopRequest final_request(const StopRequest& request);

  /// Every rank, after a non-finite stop: where it was seen (step, epoch, rank, loss or gradient).
  std::string nonfinite_reason(int epoch);
  /// "SLURM job ends ...; checkpointing 60 s before it", or "" outside SLURM.
  std::string deadline_line() const;
  /// Rank 0: whether the SLURM job has a known end time (then --time-margin is a deadline).
  bool has_deadline() const;
  /// Rank 0 after the stop's checkpoint: `scontrol requeue` where allowed; whether it was.
  bool requeue_job() const;

  /// The watchdog of a run of two ranks or more (stall_timeout / timeout from `config`; a stalled
  /// NCCL run dumps its flight recorder into `dump_dir`).
  void start_rollcall(const DistributedConfig& config, const std::string& dump_dir);
  void stop_rollcall();

 private:
  at::Tensor nonfinite_flag() const;  // the agreement's non-finite slot (--nonfinite stop), or none

  std::unique_ptr<Preemption> preemption_;
  std::unique_ptr<NonFiniteWatch> nonfinite_;
  std::unique_ptr<RollCall> rollcall_;
  const FaultInjection* faults_;
  ProcessGroup* pg_ = nullptr;
  RollCallRecord* where_ = nullptr;
  at::Device device_{at::kCPU};
  bool read_later_ = false;
  StopRequest drained_;        // an agreed stop that an epoch's end collected: the next check's answer
  int64_t check_every_ = 1;
  bool may_requeue_ = false;   // --no-requeue not given, and a SLURM job to requeue
  double time_margin_sec_ = 0;
  int64_t max_skips_ = 0;      // --nonfinite-max-skips, for the reason
};

}  // namespace train::detail
