// The eager training step: the step as plain LibTorch calls, on any device.
#include "step/train_step.h"

#include "rollcall.h"
#include "user_code.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/optim/optimizer.h>

namespace train::detail {

void at_phase(const StepParts& p, const char* phase) {
  if (p.context != nullptr) p.context->phase = phase;
}

Batch get_batch(const StepParts& p, const at::Tensor& order, int64_t start, int64_t len) {
  at_phase(p, "Dataset::get_batch");
  Batch b = p.data->get_batch(order.narrow(0, start, len));
  if (p.context != nullptr) check_batch_shape(b, len, *p.context);  // sizes only: no device sync
  return b;
}

namespace {

at::Tensor forward_and_loss(const StepParts& p, const Batch& b) {
  if (p.context != nullptr && !p.context->batch_checked) {
    at_phase(p, "the first batch's check");
    check_batch(b, p.context->class_indices);
    p.context->batch_checked = true;
  }
  at_phase(p, "the model's forward");
  at::Tensor out = p.model->forward(b.inputs);
  if (p.context != nullptr && !p.context->output_checked) {
    at_phase(p, "the first batch's check");
    check_output(out, b, p.context->class_indices);
    p.context->output_checked = true;
  }
  at_phase(p, "the loss");
  return (*p.loss)(out, b.targets, Reduction::mean);
}

}  // namespace

at::Tensor forward_backward(const StepParts& p, const Batch& b, bool add_to_sum) {
  RollCallRecord* const where = rollcall_of(p.process_group);
  mark_phase(where, Phase::forward);
  at::Tensor loss;
  try {
    if (p.bf16) {
      at::autocast::set_autocast_enabled(at::kCUDA, true);
      at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
      try {
        loss = forward_and_loss(p, b).to(at::kFloat);
      } catch (...) {
        at::autocast::set_autocast_enabled(at::kCUDA, false);
        at::autocast::clear_cache();
        throw;
      }
      at::autocast::set_autocast_enabled(at::kCUDA, false);
      at::autocast::clear_cache();
    } else {
      loss = forward_and_loss(p, b);
    }
    at_phase(p, "the backward pass");
    mark_phase(where, Phase::backward);
    loss.backward();
  } catch (...) {
    if (p.context != nullptr) p.context->batch = describe_batch(b);
    throw;
  }
  if (add_to_sum) *p.loss_sum += loss.detach().to(at::kDouble);
  return loss;
}

at::Tensor step_on(const StepParts& p, const Batch& batch) {
  at_phase(p, "the optimizer's zero_grad");
  p.optimizer->zero_grad();
  if (p.before_update) {
    at::Tensor loss = forward_backward(p, batch, /*add_to_sum=*/false);
    at_phase(p, "--nonfinite skip's check");
    if (!p.before_update(loss)) return loss;  // dropped: no update, not in the epoch's loss
    *p.loss_sum += loss.detach().to(at::kDouble);
    mark_phase(rollcall_of(p.process_group), Phase::optimizer);
    at_phase(p, "the optimizer's step");
    p.optimizer->step();
    return loss;
  }
  at::Tensor loss = forward_backward(p, batch);
  mark_phase(rollcall_of(p.process_group), Phase::optimizer);
  at_phase(p, "the optimizer's step");
  p.optimizer->step();
  return loss;
}

namespace {

class EagerStep : public TrainStep {
 public:
  explicit EagerStep(const StepParts& parts) : parts_(parts) {}
  at::Tensor run(const at::Tensor& order, int64_t start, int64_t len) override {
    return step_on(parts_, get_batch(parts_, order, start, len));
  }
  std::string describe() const override { return parts_.bf16 ? "eager, bf16 autocast" : "eager"; }

 private:
  StepParts parts_;
};

}  // namespace

std::unique_ptr<TrainStep> make_eager_step(const StepParts& parts) { return std::make_unique<EagerStep>(parts); }

}  // namespace train::detail
