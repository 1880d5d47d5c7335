// The stop agreement: what makes every rank stop at the same step. Preemption and cancel signals,
// the SLURM job's time limit, non-finite values (--nonfinite, watched by a NonFiniteWatch that stays
// inside), all summed over the ranks in one small collective. Private.
#pragma once

#include "train/config.h"
#include "train/preemption.h"
#include "step/step_observers.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <optional>
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
struct GradClip;
struct RollCallRecord;
struct StepParts;

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
  /// `read_later`: the flags are posted and read one check later, without host syncs. Logs when
  /// the SLURM job ends and how long before that the run checkpoints.
  void connect(ProcessGroup* pg, const at::Device& device, bool read_later, int64_t check_every);
  /// Watches `model`'s loss and gradients for non-finite values (config.run.nonfinite) around the
  /// step that `parts` make: a CUDA graph notes them in its replay (StepParts::watch), --nonfinite
  /// skip decides before each update (StepParts::before_update), and the watch's own observer
  /// joins `observers`. `clip`'s norms, where clipping computes them, are shared (may be null).
  void equip(const TrainConfig& config, torch::nn::Module& model, GradClip* clip, StepParts& parts,
             StepObservers& observers);

  /// Every rank after optimizer step `step`: the agreed request, where the ranks check at this step
  /// (every check_every steps, and at once after --nonfinite skip gave up); StopKind::none: train
  /// on. On a GPU this reads the agreement posted a check ago and posts the next.
  StopRequest poll(int64_t step);
  /// Every rank at an epoch's end or before a checkpoint: a non-finite request when any rank saw
  /// a non-finite value the agreement may not have carried yet; `at_epoch_end` also drains a
  /// posted agreement (the epoch ended first), and the next poll() returns a stop it asked for.
  StopRequest settle(bool at_epoch_end);
  /// Every rank, for an agreed request in epoch `epoch`: a non-finite one when any rank saw such a
  /// value since (the weights may be bad then, whatever else was asked), else `request`. A
  /// non-finite request's reason says where it was seen (step, epoch, rank, loss or gradient).
  StopRequest final_request(const StopRequest& request, int epoch);
  /// Steps whose update --nonfinite skip dropped; unset where the watch stops instead.
  std::optional<int64_t> skipped_steps() const;

  /// Rank 0: the SLURM job's --time-margin (seconds) when the job has a known end time, which a
  /// checkpoint must then fit before.
  std::optional<double> time_margin() const;
  /// Rank 0 after the stop's checkpoint: `scontrol requeue` where allowed; whether it was.
  bool requeue_job() const;

 private:
  at::Tensor nonfinite_flag() const;  // the agreement's non-finite slot (--nonfinite stop), or none
  bool due(int64_t step) const;
  StopRequest check(int64_t step);
  std::string deadline_line() const;

  std::unique_ptr<Preemption> preemption_;
  std::unique_ptr<NonFiniteWatch> nonfinite_;
  std::unique_ptr<StepObserver> observer_;  // the watch's before and after each step
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
  int64_t step_ = 0;           // the optimizer step running (the watch's observer sets it)
};

}  // namespace train::detail
