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

/// What the three fused optimizers share: each parameter group's rate in device memory (the base's
/// mirror), and their parameters split as ATen's fused kernels take them.
class FusedOptimizer : public DeviceStateOptimizer {
 protected:
  using DeviceStateOptimizer::DeviceStateOptimizer;
  /// The parameters of group `group` that have gradients, split by device and dtype (ATen's fused
  /// kernels take one device and one dtype per call, as Python's optimizers group them).
  std::vector<std::vector<at::Tensor>> params_with_grads(size_t group) const;

 private:
  friend struct details::FusedAdamBuckets;
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

/// torch.optim.Adam(fused=True) and torch.optim.AdamW(fused=True), one implementation for both:
/// `Options` is torch::optim::AdamOptions (Adam: L2 weight decay added to the gradient,
/// `_fused_adam_`) or torch::optim::AdamWOptions (AdamW: decoupled weight decay, 1e-2 by default as
/// Python's, `_fused_adamw_`); bias correction from the device step count. Use FusedAdam or
/// FusedAdamW. Throws train::ConfigError for options torch.optim.Adam(W) refuses.
template <typename Options>
class FusedAdamBase : public FusedOptimizer {
 public:
  explicit FusedAdamBase(const std::vector<torch::optim::OptimizerParamGroup>& param_groups, Options defaults = {});
  explicit FusedAdamBase(std::vector<at::Tensor> params, Options defaults = {})
      : FusedAdamBase({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}
  at::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

extern template class FusedAdamBase<torch::optim::AdamOptions>;
extern template class FusedAdamBase<torch::optim::AdamWOptions>;

/// torch.optim.Adam(fused=True): L2 weight decay added to the gradient. Takes torch::optim::AdamOptions.
class FusedAdam : public FusedAdamBase<torch::optim::AdamOptions> {
 public:
  using FusedAdamBase::FusedAdamBase;
};

/// torch.optim.AdamW(fused=True): decoupled weight decay. Takes torch::optim::AdamWOptions.
class FusedAdamW : public FusedAdamBase<torch::optim::AdamWOptions> {
 public:
  using FusedAdamBase::FusedAdamBase;
};

}  // namespace train::optim
