// Fused, capturable SGD, Adam and AdamW: ATen's multi-tensor kernels (what Python runs with
// `fused=True`), with the step counts and the learning rates in device memory. A CUDA graph that
// captured one of their steps replays it exactly, and follows a per-step LR schedule through
// sync_lr(), with no recapture and no host wait.
#pragma once

#include "train/device_state_optimizer.h"

#include <ATen/core/Tensor.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include <vector>

namespace train::details {
struct FusedAdamBuckets;  // libtrain's CUDA step: the update one gradient bucket at a time (private)
}  // namespace train::details

namespace train::optim {

/// What the three fused optimizers share: each parameter group's rate in device memory.
class FusedOptimizer : public torch::optim::Optimizer, public DeviceStateOptimizer {
 public:
  bool lr_on_device() const override { return lr_on_device_; }
  void sync_lr() override;

 protected:
  FusedOptimizer(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
                 std::unique_ptr<torch::optim::OptimizerOptions> defaults)
      : Optimizer(param_groups, std::move(defaults)) {}
  /// Group `group`'s rate as a float32 tensor on `device` (created on first use; an eager step
  /// refreshes it from the group's options, a step under capture reads what sync_lr() wrote).
  const at::Tensor& device_lr(size_t group, const c10::Device& device);
  /// The parameters of group `group` that have gradients, split by device and dtype (ATen's fused
  /// kernels take one device and one dtype per call, as Python's optimizers group them).
  std::vector<std::vector<at::Tensor>> params_with_grads(size_t group) const;

 private:
  friend struct details::FusedAdamBuckets;
  struct Rate {
    at::Tensor tensor;  // float32 [] on the group's device
    double value = 0;   // what it holds
  };
  std::vector<Rate> rates_;  // per group
  bool lr_on_device_ = false;
};

/// torch.optim.SGD(fused=True): momentum, dampening, nesterov and weight decay as torch::optim::SGD
/// (its options and per-parameter state, so its checkpoints read as SGD's), the update one ATen
/// `_fused_sgd_` kernel per device and dtype. Where it differs from torch::optim::SGD: the fused
/// kernel evaluates the same formula in registers, so the last bit of a result can differ;
/// against Python's fused SGD it matches bit for bit.
/// Throws train::ConfigError for a negative lr, momentum or weight decay, or nesterov without
/// momentum or with dampening.
class FusedSGD : public FusedOptimizer {
 public:
  explicit FusedSGD(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
                    torch::optim::SGDOptions defaults);
  explicit FusedSGD(std::vector<at::Tensor> params, torch::optim::SGDOptions defaults)
      : FusedSGD({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}
  at::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

/// Per-parameter state of FusedAdam and FusedAdamW: the moments, and the step count as a float32
/// tensor on the parameter's device (as Python's fused Adam keeps it).
struct FusedAdamParamState : public torch::optim::OptimizerCloneableParamState<FusedAdamParamState> {
  TORCH_ARG(at::Tensor, step);
  TORCH_ARG(at::Tensor, exp_avg);
  TORCH_ARG(at::Tensor, exp_avg_sq);
  TORCH_ARG(at::Tensor, max_exp_avg_sq);  ///< amsgrad only

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

/// torch.optim.Adam(fused=True): L2 weight decay added to the gradient, bias correction from the
/// device step count (`_fused_adam_`). Takes torch::optim::AdamOptions.
/// Throws train::ConfigError for options torch.optim.Adam refuses.
class FusedAdam : public FusedOptimizer {
 public:
  explicit FusedAdam(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
                     torch::optim::AdamOptions defaults = {});
  explicit FusedAdam(std::vector<at::Tensor> params, torch::optim::AdamOptions defaults = {})
      : FusedAdam({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}
  at::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

/// torch.optim.AdamW(fused=True): decoupled weight decay (`_fused_adamw_`). Takes
/// torch::optim::AdamWOptions (weight decay 1e-2 by default, as Python's).
/// Throws train::ConfigError for options torch.optim.AdamW refuses.
class FusedAdamW : public FusedOptimizer {
 public:
  explicit FusedAdamW(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
                      torch::optim::AdamWOptions defaults = {});
  explicit FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions defaults = {})
      : FusedAdamW({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}
  at::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

}  // namespace train::optim
