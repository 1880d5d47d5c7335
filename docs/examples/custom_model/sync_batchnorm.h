// A Callback that keeps BatchNorm's running statistics equal on every rank. DDP averages
// gradients and broadcasts buffers from rank 0 only at the start, so without it each rank's
// running mean and variance drift apart, and evaluation (which uses them) differs by rank.
#pragma once

#include <train/process_group.h>
#include <train/trainer.h>

#include <ATen/ops/cat.h>
#include <c10/core/GradMode.h>

#include <vector>

namespace example {

/// Averages every floating-point buffer of the model over the ranks after each optimizer step,
/// so the checkpoint rank 0 writes holds what every rank has, and a resumed run is exact.
class SyncBatchNormStats : public train::Callback {
 public:
  void on_train_start(train::Trainer& trainer) override {
    group_ = trainer.process_group();
    buffers_.clear();
    for (const auto& b : trainer.model()->named_buffers()) {
      if (b.value().is_floating_point()) buffers_.push_back(b.value());
    }
  }

  // Every rank runs it after every step (Trainer's contract), so the all-reduce is matched.
  void on_step_end(const train::StepInfo& info) override {
    (void)info;
    if (group_ == nullptr || buffers_.empty()) return;
    c10::NoGradGuard no_grad;
    std::vector<at::Tensor> flat;
    for (const at::Tensor& b : buffers_) flat.push_back(b.reshape({-1}));
    at::Tensor all = at::cat(flat);
    group_->allreduce_sum(all);
    all.div_(group_->size());
    int64_t offset = 0;
    for (at::Tensor& b : buffers_) {
      b.copy_(all.narrow(0, offset, b.numel()).view_as(b));
      offset += b.numel();
    }
  }

 private:
  train::ProcessGroup* group_ = nullptr;
  std::vector<at::Tensor> buffers_;
};

}  // namespace example
