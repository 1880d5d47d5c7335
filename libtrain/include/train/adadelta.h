// Adadelta for LibTorch, matching torch.optim.Adadelta step for step (LibTorch ships none).
#pragma once

#include "train/device_state_optimizer.h"

#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>

#include <vector>

namespace train::details {
struct AdadeltaKernel;  // libtrain's CUDA step: the fused kernel inside its own (private)
}  // namespace train::details

namespace train::optim {

/// Hyper-parameters of torch.optim.Adadelta, with its defaults.
struct AdadeltaOptions : public torch::optim::OptimizerCloneableOptions<AdadeltaOptions> {
  AdadeltaOptions(double lr = 1.0) : lr_(lr) {}
  TORCH_ARG(double, lr) = 1.0;
  TORCH_ARG(double, rho) = 0.9;
  TORCH_ARG(double, eps) = 1e-6;
  TORCH_ARG(double, weight_decay) = 0;
  TORCH_ARG(bool, maximize) = false;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

/// Per-parameter state: the running averages of squared gradients and of squared updates.
struct AdadeltaParamState
    : public torch::optim::OptimizerCloneableParamState<AdadeltaParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, square_avg);
  TORCH_ARG(torch::Tensor, acc_delta);

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

/// Adadelta (Zeiler 2012) exactly as torch.optim.Adadelta computes it (single-tensor path):
///   square_avg = rho * square_avg + (1 - rho) * g^2
///   delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g
///   acc_delta = rho * acc_delta + (1 - rho) * delta^2
///   p -= lr * delta
/// Throws train::ConfigError for a negative lr, eps or weight decay, or rho outside [0, 1].
class Adadelta : public DeviceStateOptimizer {
 public:
  explicit Adadelta(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
                    AdadeltaOptions defaults = {});
  explicit Adadelta(std::vector<torch::Tensor> params, AdadeltaOptions defaults = {})
      : Adadelta({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}

  /// One update of every parameter that has a gradient (parameters without one are skipped), by
  /// one of three paths with the same arithmetic: on CUDA libtrain's fused kernel (one launch a
  /// group, where it was built and every tensor is float32 with the parameter's dense strides),
  /// else torch's foreach ops; on the CPU the per-parameter loop of torch.optim.Adadelta.
  /// lr_on_device() is true after a step that ran the fused kernel only (it reads the rates from
  /// the device; a captured step then follows a new rate after sync_lr()).
  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  /// CUDA: one update of just these parameters (each one of this optimizer's, with a gradient)
  /// as the fused kernel, on the current stream, bumping their version counters (autograd then
  /// refuses a backward that still needs an updated value). False, with nothing changed, where
  /// the fused kernel doesn't apply (no CUDA kernel built, a tensor it can't take, or no eager
  /// fused step before: the rate isn't on the device yet). A captured step uses it to update each
  /// gradient bucket as soon as its average is done.
  bool update_bucket(const std::vector<torch::Tensor>& params);

 private:
  friend struct details::AdadeltaKernel;
  struct KernelLaunch;  // a caller's kernel that applies the update (libtrain's peer all-reduce)
  // The state of `p`, created (zeros) on its first update.
  AdadeltaParamState& state_for(const torch::Tensor& p);
  // The fused kernel's update of `params` (all of group `group_index`, all with gradients): with
  // launch=false only whether it applies; with `launcher`, handed to the caller's kernel.
  bool kernel_update(size_t group_index, const std::vector<torch::Tensor>& params, const AdadeltaOptions& options,
                     bool launch, const KernelLaunch* launcher = nullptr);
  // update_bucket, optionally through a caller's kernel (then all of `params` share one group).
  bool bucket_update(const std::vector<torch::Tensor>& params, const KernelLaunch* launcher);
  // The update of a group of CUDA parameters with torch's foreach ops; false when it doesn't apply.
  bool foreach_update(torch::optim::OptimizerParamGroup& group, const AdadeltaOptions& options);
};

}  // namespace train::optim
