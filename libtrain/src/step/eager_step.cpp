// The eager training step: the step as plain LibTorch calls, on any device.
#include "step/train_step.h"

#include "comm/reducer.h"
#include "health/rollcall.h"
#include "optim/sharded_optimizer.h"
#include "step/grad_clip.h"
#include "trainer/user_code.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <optional>

namespace train::detail {

void at_phase(const StepParts& p, const char* phase) {
  if (p.context != nullptr) p.context->phase = phase;
}

Batch get_batch(const StepParts& p, const StepBatch& batch, int64_t start, int64_t len) {
  if (!batch.indices.defined()) {
    const bool whole = start == 0 && len == batch.batch.inputs.size(0);
    return whole ? batch.batch : Batch{batch.batch.inputs.narrow(0, start, len), batch.batch.targets.narrow(0, start, len)};
  }
  at_phase(p, "Dataset::get_batch");
  Batch b = p.data->get_batch(batch.indices.narrow(0, start, len));
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

at::Tensor forward_backward(const StepParts& p, const Batch& b, bool add_to_sum, double weight) {
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
    (weight == 1 ? loss : loss * weight).backward();
  } catch (...) {
    if (p.context != nullptr) p.context->batch = describe_batch(b);
    throw;
  }
  // One kernel: the double sum takes the float loss converted exactly, as a separate .to(kDouble)
  // would give it (a captured small model's step pays per kernel).
  if (add_to_sum) p.loss_sum->add_(loss.detach());
  return loss;
}

Unreduced::Unreduced(Reducer* r) : r_(r), previous_(r != nullptr && r->enabled()) {
  if (r_ != nullptr) r_->set_enabled(false);
}

Unreduced::~Unreduced() {
  if (r_ != nullptr) r_->set_enabled(previous_);
}

std::vector<std::pair<int64_t, int64_t>> micro_spans(const StepParts& p, int64_t len) {
  if (p.micro_batch <= 0 || p.micro_batch >= len) return {{0, len}};
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (int64_t off = 0; off < len; off += p.micro_batch) spans.emplace_back(off, std::min(p.micro_batch, len - off));
  return spans;
}

StepBatches batches_of(const StepParts& p, const StepBatch& batch) {
  if (batch.ready) batch.ready();
  StepBatches b;
  b.spans = micro_spans(p, batch.size());
  b.gather = [&p, batch, spans = b.spans](size_t i) { return get_batch(p, batch, spans[i].first, spans[i].second); };
  return b;
}

at::Tensor accumulate_backward(const StepParts& p, const StepBatches& b, bool add_to_sum) {
  if (b.spans.size() == 1) return forward_backward(p, b.gather(0), add_to_sum);
  int64_t len = 0;
  for (const auto& s : b.spans) len += s.second;
  at::Tensor total;
  for (size_t i = 0; i < b.spans.size(); ++i) {
    // Each micro-batch's mean loss weighted by its share: the gradients sum to the whole step's
    // mean loss's, as one batch of `len` samples would give them.
    const double weight = static_cast<double>(b.spans[i].second) / static_cast<double>(len);
    std::optional<Unreduced> off;
    if (i + 1 < b.spans.size()) off.emplace(p.reducer);  // only the last backward averages (the accumulated sum)
    const at::Tensor loss = forward_backward(p, b.gather(i), /*add_to_sum=*/false, weight);
    at::Tensor part = loss.detach() * weight;
    total = i == 0 ? part : total + part;
  }
  if (add_to_sum) p.loss_sum->add_(total);
  return total;
}

void update(const StepParts& p) {
  mark_phase(rollcall_of(p.process_group), Phase::optimizer);
  if (p.clip != nullptr) {
    at_phase(p, "--clip-grad-norm's clipping");
    if (p.shard != nullptr) {
      // Sharded, the averaged gradients exist only as this rank's chunks: no per-parameter norms
      // for the non-finite watch to share (it computes its own).
      p.shard->clip_grad_norm(p.clip->max_norm);
      p.clip->norms = at::Tensor();
    } else {
      p.clip->norms = clip_grad_norm(p.clip->params, p.clip->max_norm);
    }
  }
  at_phase(p, "the optimizer's step");
  if (p.shard != nullptr) {
    p.shard->step();
  } else {
    p.optimizer->step();
  }
}

at::Tensor step_on(const StepParts& p, const StepBatches& batches) {
  at_phase(p, "the optimizer's zero_grad");
  p.optimizer->zero_grad();
  if (p.before_update) {
    at::Tensor loss = accumulate_backward(p, batches, /*add_to_sum=*/false);
    at_phase(p, "--nonfinite skip's check");
    if (!p.before_update(loss)) return loss;  // dropped: no update, not in the epoch's loss
    p.loss_sum->add_(loss.detach());
    update(p);
    return loss;
  }
  at::Tensor loss = accumulate_backward(p, batches);
  update(p);
  return loss;
}

namespace {

class EagerStep : public TrainStep {
 public:
  explicit EagerStep(const StepParts& parts) : parts_(parts) {}
  at::Tensor run(const StepBatch& batch) override { return step_on(parts_, batches_of(parts_, batch)); }
  std::string describe() const override { return parts_.bf16 ? "eager, bf16 autocast" : "eager"; }

 private:
  StepParts parts_;
};

}  // namespace

std::unique_ptr<TrainStep> make_eager_step(const StepParts& parts) { return std::make_unique<EagerStep>(parts); }

}  // namespace train::detail
