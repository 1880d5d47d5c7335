// The eager training step: the step as plain LibTorch calls, on any device.
#include "step/train_step.h"

#include "rollcall.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/optim/optimizer.h>

namespace train::detail {

at::Tensor forward_backward(const StepParts& p, const Batch& b) {
  RollCallRecord* const where = rollcall_of(p.process_group);
  mark_phase(where, Phase::forward);
  at::Tensor loss;
  if (p.bf16) {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    try {
      at::Tensor out = p.model->forward(b.inputs);
      loss = (*p.loss)(out, b.targets, Reduction::mean).to(at::kFloat);
    } catch (...) {
      at::autocast::set_autocast_enabled(at::kCUDA, false);
      at::autocast::clear_cache();
      throw;
    }
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::clear_cache();
  } else {
    at::Tensor out = p.model->forward(b.inputs);
    loss = (*p.loss)(out, b.targets, Reduction::mean);
  }
  mark_phase(where, Phase::backward);
  loss.backward();
  *p.loss_sum += loss.detach().to(at::kDouble);
  return loss;
}

at::Tensor step_on(const StepParts& p, const Batch& batch) {
  p.optimizer->zero_grad();
  at::Tensor loss = forward_backward(p, batch);
  mark_phase(rollcall_of(p.process_group), Phase::optimizer);
  p.optimizer->step();
  return loss;
}

namespace {

class EagerStep : public TrainStep {
 public:
  explicit EagerStep(const StepParts& parts) : parts_(parts) {}
  at::Tensor run(const at::Tensor& order, int64_t start, int64_t len) override {
    return step_on(parts_, parts_.data->get_batch(order.narrow(0, start, len)));
  }
  std::string describe() const override { return parts_.bf16 ? "eager, bf16 autocast" : "eager"; }

 private:
  StepParts parts_;
};

}  // namespace

std::unique_ptr<TrainStep> make_eager_step(const StepParts& parts) { return std::make_unique<EagerStep>(parts); }

}  // namespace train::detail
