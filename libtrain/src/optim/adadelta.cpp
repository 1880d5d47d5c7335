// Adadelta: the update order and in-place ops follow torch/optim/adadelta.py so results match bitwise.
#include "train/adadelta.h"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_sqrt.h>

#include "train/base/error.h"


#include <torch/autograd.h>

namespace train::optim {

void AdadeltaOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(rho);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(maximize);
}

void AdadeltaOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, rho);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, maximize);
}

void AdadeltaParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(square_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(acc_delta);
}

void AdadeltaParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, square_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, acc_delta);
}

Adadelta::Adadelta(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
                   AdadeltaOptions defaults)
    : DeviceStateOptimizer(param_groups, std::make_unique<AdadeltaOptions>(defaults)) {
  auto bad = [](const std::string& what, double v, const std::string& expect) {
    throw ConfigError("Adadelta " + what + ": expected " + expect + ", found " +
                          std::to_string(v) + ".",
                      "check --lr and the optimizer options.");
  };
  if (defaults.lr() < 0) bad("lr", defaults.lr(), "lr >= 0");
  if (defaults.rho() < 0 || defaults.rho() > 1) bad("rho", defaults.rho(), "0 <= rho <= 1");
  if (defaults.eps() < 0) bad("eps", defaults.eps(), "eps >= 0");
  if (defaults.weight_decay() < 0) bad("weight_decay", defaults.weight_decay(), ">= 0");
}

torch::Tensor Adadelta::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  bool all_fused = !param_groups_.empty();
  for (size_t gi = 0; gi < param_groups_.size(); ++gi) {
    auto& group = param_groups_[gi];
    const auto& o = static_cast<const AdadeltaOptions&>(group.options());
    std::vector<torch::Tensor> with_grads;
    for (auto& p : group.params()) {
      if (p.grad().defined()) with_grads.push_back(p);
    }
    if (!with_grads.empty() && kernel_update(gi, with_grads, o, /*launch=*/true)) continue;
    all_fused = false;
    if (foreach_update(group, o)) continue;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      torch::Tensor grad = o.maximize() ? -p.grad() : p.grad();
      auto& st = state_for(p);
      st.step(st.step() + 1);
      if (o.weight_decay() != 0) grad = grad.add(p, o.weight_decay());
      auto& square_avg = st.square_avg();
      auto& acc_delta = st.acc_delta();
      square_avg.mul_(o.rho()).addcmul_(grad, grad, 1 - o.rho());
      torch::Tensor std_ = square_avg.add(o.eps()).sqrt_();
      torch::Tensor delta = acc_delta.add(o.eps()).sqrt_();
      delta.div_(std_).mul_(grad);
      acc_delta.mul_(o.rho()).addcmul_(delta, delta, 1 - o.rho());
      p.add_(delta, -o.lr());
    }
  }
  set_lr_on_device(all_fused);
  return loss;
}

AdadeltaParamState& Adadelta::state_for(const torch::Tensor& p) {
  auto& slot = state_[p.unsafeGetTensorImpl()];
  if (!slot) {
    auto st = std::make_unique<AdadeltaParamState>();
    st->square_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    st->acc_delta(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    slot = std::move(st);
  }
  return static_cast<AdadeltaParamState&>(*slot);
}

bool Adadelta::update_bucket(const std::vector<torch::Tensor>& params) { return bucket_update(params, nullptr); }

bool Adadelta::bucket_update(const std::vector<torch::Tensor>& subset, const KernelLaunch* launch) {
  torch::NoGradGuard no_grad;
  std::vector<std::vector<torch::Tensor>> per_group(param_groups_.size());
  for (const auto& p : subset) {
    bool found = false;
    for (size_t gi = 0; gi < param_groups_.size() && !found; ++gi) {
      for (const auto& q : param_groups_[gi].params()) {
        if (q.is_same(p)) {
          found = q.grad().defined();
          if (found) per_group[gi].push_back(q);
          break;
        }
      }
    }
    if (!found) return false;
  }
  auto options = [&](size_t gi) -> const AdadeltaOptions& {
    return static_cast<const AdadeltaOptions&>(param_groups_[gi].options());
  };
  size_t groups = 0;
  for (size_t gi = 0; gi < per_group.size(); ++gi) {
    if (per_group[gi].empty()) continue;
    ++groups;
    if (!kernel_update(gi, per_group[gi], options(gi), /*launch=*/false)) return false;
  }
  if (launch != nullptr && groups != 1) return false;
  for (size_t gi = 0; gi < per_group.size(); ++gi) {
    if (per_group[gi].empty()) continue;
    kernel_update(gi, per_group[gi], options(gi), /*launch=*/true, launch);
    for (auto& p : per_group[gi]) p.unsafeGetTensorImpl()->bump_version();
  }
  set_lr_on_device(true);
  return true;
}


// On CUDA, one kernel per operation for the whole group (torch's foreach ops) instead of one per
// parameter: the same elementwise arithmetic in a tenth of the launches. The CPU keeps the
// per-parameter loop, whose results the recorded CPU runs pin down.
bool Adadelta::foreach_update(torch::optim::OptimizerParamGroup& group, const AdadeltaOptions& o) {
  std::vector<torch::Tensor> params, grads, square_avgs, acc_deltas;
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    if (!p.is_cuda() || p.grad().is_sparse()) return false;
    params.push_back(p);
  }
  if (params.empty()) return false;
  for (auto& p : params) {
    auto& st = state_for(p);
    st.step(st.step() + 1);  // bookkeeping only: Adadelta's update does not use it
    square_avgs.push_back(st.square_avg());
    acc_deltas.push_back(st.acc_delta());
    grads.push_back(o.maximize() ? -p.grad() : p.grad());
  }
  if (o.weight_decay() != 0) grads = at::_foreach_add(grads, params, o.weight_decay());
  at::_foreach_mul_(square_avgs, o.rho());
  at::_foreach_addcmul_(square_avgs, grads, grads, 1 - o.rho());
  std::vector<torch::Tensor> std_ = at::_foreach_add(square_avgs, o.eps());
  at::_foreach_sqrt_(std_);
  std::vector<torch::Tensor> delta = at::_foreach_add(acc_deltas, o.eps());
  at::_foreach_sqrt_(delta);
  at::_foreach_div_(delta, std_);
  at::_foreach_mul_(delta, grads);
  at::_foreach_mul_(acc_deltas, o.rho());
  at::_foreach_addcmul_(acc_deltas, delta, delta, 1 - o.rho());
  at::_foreach_add_(params, delta, -o.lr());
  return true;
}

void Adadelta::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<AdadeltaParamState, AdadeltaOptions>(archive, *this);
}

void Adadelta::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<AdadeltaParamState, AdadeltaOptions>(archive, *this);
}

}  // namespace train::optim
