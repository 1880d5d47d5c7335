// Non-finite losses and gradients (nonfinite.h).
#include "stops/nonfinite.h"

#include "step/grad_clip.h"
#include "train/base/log.h"
#include "train/process_group.h"
#include "optim/unique_params.h"

#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/module.h>

#include <algorithm>

namespace train::detail {

namespace {

// The ranks' sum of a one-element count, read on the host. A group other than NCCL's sums host
// memory: the count is copied there once, not there and back before the read.
int64_t ranks_sum(ProcessGroup* pg, at::Tensor t) {
  if (pg != nullptr && pg->backend() != Backend::nccl) t = t.cpu();
  if (pg != nullptr) pg->allreduce_sum(t);
  return t.cpu().item<int64_t>();
}

}  // namespace

NonFiniteWatch::NonFiniteWatch(const TrainConfig& c, torch::nn::Module& model, const at::Device& device, int rank,
                               int world_size)
    : skip_(c.run.nonfinite == NonFinite::skip), max_skips_(c.run.nonfinite_max_skips), device_(device), rank_(rank),
      world_size_(world_size) {
  params_ = unique_named_parameters(model);
  stride_ = static_cast<int64_t>(params_.size()) + 1;
  first_ = at::full(c10::IntArrayRef{}, -1, at::TensorOptions().dtype(at::kLong).device(device));
  step_dev_ = at::zeros({}, first_.options());  // here, not in a capture: a graph's pool would own it
  init_kernel();
}

bool NonFiniteWatch::clip_norms_fit(size_t grads) const {
  return clip_ != nullptr && clip_->norms.defined() && clip_->norms.dim() == 1 &&
         clip_->norms.size(0) == static_cast<int64_t>(grads);
}

at::Tensor NonFiniteWatch::bad_values(const at::Tensor& loss, bool shared_norms) {
  norms_in_.clear();
  with_grad_.clear();
  norms_in_.push_back(loss.detach().to(at::kFloat).reshape({}));
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& g = params_[i].second.grad();
    if (!g.defined()) continue;
    norms_in_.push_back(g);
    with_grad_.push_back(static_cast<int>(i));
  }
  at::Tensor values;
  if (shared_norms && clip_norms_fit(with_grad_.size())) {
    // The clipping's norms of the same gradients (a norm is finite exactly when its tensor is),
    // and the loss itself (finite exactly when its absolute value is).
    values = at::cat({norms_in_.front().reshape({1}), clip_->norms.to(at::kFloat)});
  } else {
    std::vector<at::Tensor> norms = at::_foreach_norm(norms_in_, 2);
    for (auto& n : norms) {
      if (n.scalar_type() != at::kFloat) n = n.to(at::kFloat);
    }
    values = at::stack(norms);
  }
  norms_in_.clear();  // the gradients are not held past the step
  return values.isfinite().logical_not();
}

at::Tensor NonFiniteWatch::record(const at::Tensor& bad, const at::Tensor& code) {
  at::Tensor any = bad.any();
  first_.copy_(at::where(first_.lt(0).logical_and(any), code, first_));
  return any;
}

at::Tensor NonFiniteWatch::note(const at::Tensor& loss, int64_t step, bool shared_norms) {
  const at::Tensor bad = bad_values(loss, shared_norms);
  // The first non-finite entry: the loss (0) before any gradient (1 + its position).
  return record(bad, bad.to(at::kInt).argmax().to(at::kLong) + step * stride_);
}

// One kernel where it can (the ~13 ATen kernels below cost a small model's step ~30 us of GPU time).
void NonFiniteWatch::note_in_capture(const at::Tensor& loss) {
  if (!note_kernel(loss, /*step=*/nullptr)) {
    const at::Tensor bad = bad_values(loss, /*shared_norms=*/true);
    record(bad, bad.to(at::kInt).argmax().to(at::kLong) + step_dev_ * stride_);
    step_dev_.add_(1);
  }
  counter_next_ = -1;  // capturing ran nothing: the first replay sets the counter
}

void NonFiniteWatch::before_replay() {
  if (counter_next_ != pending_step_) step_dev_.fill_(pending_step_);
  counter_next_ = pending_step_ + 1;
  noted_ = true;
}

// The kernel too, with the host's step: no caller reads the flag that note() returns here (the
// skip mode's before_update does, and keeps the ATen ops: it syncs with the host anyway).
void NonFiniteWatch::after_step(const at::Tensor& loss, int64_t step) {
  if (!note_kernel(loss, &step)) note(loss, step, /*shared_norms=*/true);
}

at::Tensor NonFiniteWatch::flag() const { return first_.ge(0).to(at::kLong); }

bool NonFiniteWatch::any_rank(ProcessGroup* pg) {
  if (skip_) return false;
  return ranks_sum(pg, flag().reshape({1})) > 0;
}

bool NonFiniteWatch::before_update(const at::Tensor& loss, int64_t step, ProcessGroup* pg) {
  if (in_a_row_ == 0) first_.fill_(-1);  // the message names the first of the steps in a row
  // Every rank drops the same steps (the gradients are averaged, but a loss is each rank's own).
  if (ranks_sum(pg, note(loss, step).to(at::kLong).reshape({1})) == 0) {
    in_a_row_ = 0;
    return true;
  }
  ++in_a_row_;
  ++skipped_;
  log::warn("--nonfinite skip: a non-finite loss or gradient at step " + std::to_string(step) +
            " on a rank: its update is dropped (" + std::to_string(in_a_row_) + " in a row, at most " +
            std::to_string(max_skips_) + ")");
  return false;
}

std::string NonFiniteWatch::describe(int epoch, ProcessGroup* pg) {
  at::Tensor all = at::zeros({world_size_}, at::TensorOptions().dtype(at::kLong).device(device_));
  all[rank_] = first_ + 1;  // 0: none
  if (pg != nullptr) pg->allreduce_sum(all);
  all = all.cpu();
  std::string ranks, parts;
  int64_t first_step = -1;
  for (int r = 0; r < world_size_; ++r) {
    const int64_t v = all[r].item<int64_t>() - 1;
    if (v < 0) continue;
    const int64_t step = v / stride_, at = v % stride_;
    std::string what = "the loss";
    if (at > 0) {
      const size_t k = static_cast<size_t>(at - 1);
      what = "the gradient of parameter '" +
             (k < with_grad_.size() ? params_[static_cast<size_t>(with_grad_[k])].first : std::string("?")) + "'";
    }
    ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    parts += (parts.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " + what + " at step " +
             std::to_string(step);
    first_step = first_step < 0 ? step : std::min(first_step, step);
  }
  if (first_step < 0) return "a non-finite loss or gradient (epoch " + std::to_string(epoch) + ")";
  return "a non-finite (NaN or infinite) value at step " + std::to_string(first_step) + " (epoch " +
         std::to_string(epoch) + ") on rank" + (ranks.find(',') != std::string::npos ? "s " : " ") + ranks + ": " +
         parts + ".";
}

}  // namespace train::detail
