// The learning rate's one owner (schedule.h): the user's schedule called with the run's length,
// its rate pushed into the optimizer (the step's device copy follows), its state in checkpoints.
#include "optim/schedule.h"

#include "train/base/error.h"
#include "trainer/user_code.h"

#include <ATen/ops/tensor.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <exception>

namespace train::detail {

ScheduleContext schedule_context(int64_t steps_per_epoch, int epochs, const RunConfig& run) {
  ScheduleContext ctx;
  ctx.steps_per_epoch = run.dry_run ? 1 : steps_per_epoch;
  ctx.total_steps = static_cast<int64_t>(epochs) * ctx.steps_per_epoch;
  if (run.max_steps) ctx.total_steps = std::min(ctx.total_steps, *run.max_steps);
  return ctx;
}

Schedule::Schedule(LrSchedule schedule, const ScheduleContext& run, torch::optim::Optimizer& optimizer,
                   std::function<std::string()> where, std::function<void()> rate_changed)
    : schedule_(std::move(schedule)), run_(run), optimizer_(&optimizer), where_(std::move(where)),
      rate_changed_(std::move(rate_changed)) {
  run_.base_lr = optimizer.param_groups().at(0).options().get_lr();
  lr_ = schedule_.rate ? next(0) : run_.base_lr;
}

double Schedule::next(int64_t index) const {
  try {
    return schedule_.rate ? schedule_.rate(index, run_) : schedule_.next(index, lr_);
  } catch (...) {
    throw_user_error("the LR schedule", where_ ? where_() : std::string(), "", std::current_exception());
  }
}

void Schedule::push() {
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr_);
  if (lr_ == pushed_) return;
  if (rate_changed_) rate_changed_();  // a captured step follows the new rate, or is captured again
  pushed_ = lr_;
}

void Schedule::start_epoch() { push(); }

void Schedule::after_step(int64_t step) {
  last_step_lr_ = lr_;
  if (schedule_.every != LrSchedule::Every::step) return;
  lr_ = next(step);
  if (lr_ != pushed_) push();
}

void Schedule::after_epoch(int epoch) {
  if (schedule_.every == LrSchedule::Every::epoch) lr_ = next(epoch);
}

void Schedule::save(torch::serialize::OutputArchive& record) const {
  record.write("lr", at::tensor({lr_}, at::TensorOptions().dtype(at::kDouble)));
}

void Schedule::load(torch::serialize::InputArchive& record) {
  at::Tensor lr;
  if (!record.try_read("lr", lr)) {
    throw CheckpointError("checkpoint: expected the LR schedule's rate (schedule/lr), found it missing.",
                          "the file was written by another program or version; resume with --resume never "
                          "or point --checkpoint-dir at a fresh folder.");
  }
  lr_ = lr.cpu().item<double>();
}

}  // namespace train::detail
