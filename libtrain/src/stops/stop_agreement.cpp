// The stop agreement (stop_agreement.h): one collective of flags summed over the ranks every few
// steps, without host syncs on a GPU, and what each agreed stop means.
#include "stops/stop_agreement.h"

#include "health/fault_injection.h"
#include "stops/nonfinite.h"
#include "health/rollcall.h"
#include "step/train_step.h"
#include "train/base/log.h"
#include "train/base/slurm_time.h"
#include "train/process_group.h"
#include "train/base/text.h"

#include <csignal>
#include <ctime>
#include <optional>
#include <utility>

namespace train::detail {
namespace {

PreemptionOptions preemption_options(const CheckpointConfig& c) {
  PreemptionOptions o;
  o.requeue_signals = parse_signal_list(c.preempt_signals);
  o.stop_signals = {SIGTERM, SIGINT};
  o.time_margin_sec = c.time_margin_sec;
  return o;
}

StopRequest nonfinite_request() { return {StopKind::nonfinite, "a non-finite loss or gradient", 0}; }

}  // namespace

StopAgreement::StopAgreement(const CheckpointConfig& config, const DistEnv& env, const FaultInjection* faults)
    : preemption_(std::make_unique<Preemption>(preemption_options(config), env)),
      faults_(faults),
      may_requeue_(config.requeue && !env.job_id.empty()),
      time_margin_sec_(config.time_margin_sec) {}

StopAgreement::~StopAgreement() = default;

void StopAgreement::connect(ProcessGroup* pg, const at::Device& device, bool read_later, int64_t check_every) {
  pg_ = pg;
  where_ = rollcall_of(pg);
  device_ = device;
  read_later_ = read_later;
  check_every_ = check_every;
  if (const std::string line = deadline_line(); !line.empty()) log::info(line);
}

namespace {

// The watch around each step: the step's number before it, its loss noted after it (unless a CUDA
// graph's replay noted it already, or --nonfinite skip decided before the update).
class WatchObserver : public StepObserver {
 public:
  WatchObserver(NonFiniteWatch& watch, int64_t& step) : watch_(watch), step_(step) {}
  void before_step(int64_t step) override {
    step_ = step;
    watch_.step_begins(step);
  }
  void after_step(int64_t step, at::Tensor& loss) override {
    // A graph's replay noted the step itself, unless a test put a NaN on its result afterwards.
    if (!watch_.skip_mode() && (!watch_.noted_in_graph() || injected_nan_(step))) watch_.after_step(loss, step);
  }
  std::function<bool(int64_t)> injected_nan_;

 private:
  NonFiniteWatch& watch_;
  int64_t& step_;  // the step running, for --nonfinite skip's decision
};

}  // namespace

void StopAgreement::equip(const TrainConfig& config, torch::nn::Module& model, GradClip* clip, StepParts& parts,
                          StepObservers& observers) {
  const int rank = pg_ ? pg_->rank() : 0;
  const int world = pg_ ? pg_->size() : 1;
  nonfinite_ = std::make_unique<NonFiniteWatch>(config, model, device_, rank, world);
  max_skips_ = config.run.nonfinite_max_skips;
  nonfinite_->share_norms(clip);
  if (nonfinite_->skip_mode()) {
    parts.before_update = [this](const at::Tensor& loss) { return nonfinite_->before_update(loss, step_, pg_); };
  } else {
    parts.watch = nonfinite_.get();
  }
  auto observer = std::make_unique<WatchObserver>(*nonfinite_, step_);
  observer->injected_nan_ = [faults = faults_](int64_t step) { return faults != nullptr && faults->nan_at(step); };
  observers.add(observer.get());
  observer_ = std::move(observer);
}

at::Tensor StopAgreement::nonfinite_flag() const {
  return !nonfinite_ || nonfinite_->skip_mode() ? at::Tensor() : nonfinite_->flag();
}

StopRequest StopAgreement::poll(int64_t step) { return due(step) ? check(step) : StopRequest{}; }

bool StopAgreement::due(int64_t step) const {
  return step % check_every_ == 0 || (nonfinite_ && nonfinite_->gave_up());
}

// CPU ranks agree through one small all-reduce now. CUDA ranks read the flags they posted
// `check_every` steps ago (long done on the device, so the host never waits; summed by NCCL on
// the device, or now by Gloo on the host), then post the next.
StopRequest StopAgreement::check(int64_t step) {
  mark_phase(where_, Phase::stop_check);
  if (faults_ && faults_->skips_collective(step)) return {};
  if (nonfinite_ && nonfinite_->gave_up()) return nonfinite_request();  // every rank dropped the same steps
  if (!read_later_) return preemption_->poll(pg_, device_, nonfinite_flag());
  StopRequest request = drained_.kind != StopKind::none ? std::exchange(drained_, {}) : preemption_->collect();
  if (request.kind == StopKind::none) preemption_->post(pg_, device_, nonfinite_flag());
  return request;
}

StopRequest StopAgreement::settle(bool at_epoch_end) {
  // The last posted agreement, which the epoch's end came before: a stop it asks for is the next
  // check's answer (every rank drained the same sums).
  if (at_epoch_end && read_later_ && drained_.kind == StopKind::none) drained_ = preemption_->collect();
  if (!nonfinite_) return {};
  if ((at_epoch_end && nonfinite_->gave_up()) || nonfinite_->any_rank(pg_)) return nonfinite_request();
  return {};
}

StopRequest StopAgreement::final_request(const StopRequest& request, int epoch) {
  StopRequest r = request;
  if (r.kind != StopKind::nonfinite) {
    if (!nonfinite_ || !nonfinite_->any_rank(pg_)) return r;
    r = nonfinite_request();
  }
  r.reason = nonfinite_->describe(epoch, pg_);
  if (nonfinite_->gave_up()) {
    r.reason += " " + std::to_string(max_skips_) + " steps in a row were skipped (--nonfinite-max-skips).";
  }
  return r;
}

std::optional<int64_t> StopAgreement::skipped_steps() const {
  if (!nonfinite_ || !nonfinite_->skip_mode()) return std::nullopt;
  return nonfinite_->skipped();
}

std::optional<double> StopAgreement::time_margin() const {
  if (preemption_->job_end_time() <= 0) return std::nullopt;
  return time_margin_sec_;
}

std::string StopAgreement::deadline_line() const {
  if (preemption_->job_end_time() > 0) {
    return "SLURM job ends " + describe_end_time(preemption_->job_end_time(), std::time(nullptr)) +
           "; checkpointing " + text::format("%.0f", time_margin_sec_) + " s before it";
  }
  if (preemption_->job_has_no_time_limit()) {
    return "SLURM job has no time limit: no checkpoint before a deadline (signals and --checkpoint-every still apply)";
  }
  return "";
}

bool StopAgreement::requeue_job() const { return may_requeue_ && preemption_->requeue_job(); }

}  // namespace train::detail
