// The base of the optimizers a CUDA graph can replay (train::optim::Adadelta, FusedSGD, FusedAdam,
// FusedAdamW): their step reads its per-step state and its learning rates from the device, the
// rates from one device mirror of the parameter groups' rates that this base keeps.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/optim/optimizer.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace train::optim {
class DeviceStateOptimizer;
}  // namespace train::optim

namespace train::details {

/// Not API (spdlog's details/ convention): the device mirror of an optimizer's rates, one float32
/// scalar per parameter group, each holding what its group's rate was when last written. The
/// fused kernels read it, so a replayed CUDA graph follows a new rate once it is written here.
/// The one place where a changed rate is written to the device.
class DeviceRates {
 public:
  /// A rate to write: `tensor.fill_(value)`, or a caller's kernel that writes the same float.
  struct Write {
    at::Tensor tensor;  ///< float32 []
    double value = 0;
  };

  /// Group `group`'s copy on `device`, made holding `lr` the first time (or when it is asked for on
  /// another device); where it holds another rate, `lr` is written (a fill on the current stream)
  /// unless `refresh` is false (a step under capture reads what was last written, never a fill
  /// baked into the graph).
  const at::Tensor& get(size_t group, double lr, const c10::Device& device, bool refresh = true);
  /// Whether group `group` has its copy on `device`.
  bool has(size_t group, const c10::Device& device) const;
  /// Writes each group's rate in `groups` into its copy where it holds another (a fill on the
  /// current stream, no host wait).
  void sync(const std::vector<torch::optim::OptimizerParamGroup>& groups);
  /// The writes that bring every copy to its group's rate in `groups`, taken as done: the caller
  /// queues them before anything reads the copies. False, taking nothing, when more than `max`.
  bool take_writes(const std::vector<torch::optim::OptimizerParamGroup>& groups, size_t max,
                   std::vector<Write>* out);

 private:
  struct Rate {
    at::Tensor tensor;  // float32 [] on the group's device
    double value = 0;   // what it holds
  };
  static void write(Rate& rate, double lr);  // fills `rate` with `lr` where it holds another
  std::vector<Rate> rates_;                  // per group
};

/// `optimizer`'s mirror, for libtrain's own sources.
DeviceRates& rates_of(optim::DeviceStateOptimizer& optimizer);

}  // namespace train::details

namespace train::optim {

/// An optimizer whose step reads no host state that changes over a run: its step counts live on
/// the device, and on CUDA it reads each group's learning rate from device memory. The Trainer
/// captures such a step in a CUDA graph (`--cuda-graph`), and when the LR schedule changes the
/// rate it calls sync_lr() before the next replay.
class DeviceStateOptimizer : public torch::optim::Optimizer {
 public:
  /// True once a step has read the rates from the device (CUDA; Adadelta: its last step ran the
  /// fused kernel): then sync_lr() is all a captured step needs to follow a new rate. False on
  /// the CPU, and before the first step.
  bool lr_on_device() const { return lr_on_device_; }
  /// Copies each group's rate (`options().get_lr()`) into its device copy: a small kernel on the
  /// current stream where the rate changed, no host wait. Call it outside a graph capture.
  void sync_lr();

 protected:
  DeviceStateOptimizer(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
                       std::unique_ptr<torch::optim::OptimizerOptions> defaults)
      : Optimizer(param_groups, std::move(defaults)) {}
  /// Group `group`'s rate as a float32 tensor on `device` (made on first use). An eager step
  /// (`refresh`) writes the group's current rate into it where it changed; a step under capture
  /// reads what sync_lr() last wrote. Marks the rates as on the device.
  const at::Tensor& device_lr(size_t group, const c10::Device& device, bool refresh = true);
  /// Adadelta: whether its last step read the rates from the device.
  void set_lr_on_device(bool on) { lr_on_device_ = on; }

 private:
  friend details::DeviceRates& details::rates_of(DeviceStateOptimizer& optimizer);
  details::DeviceRates rates_;
  bool lr_on_device_ = false;
};

}  // namespace train::optim
