// The device mirror of the optimizers' rates and their shared base (train/device_state_optimizer.h),
// and the step's questions about them (device_rates.h).
#include "optim/device_rates.h"

#include <ATen/ops/full.h>
#include <c10/core/GradMode.h>

namespace train::details {

const at::Tensor& DeviceRates::get(size_t group, double lr, const c10::Device& device, bool refresh) {
  if (rates_.size() <= group) rates_.resize(group + 1);
  Rate& rate = rates_[group];
  if (!rate.tensor.defined() || rate.tensor.device() != device) {
    rate.tensor = at::full({}, lr, at::TensorOptions().dtype(at::kFloat).device(device));
    rate.value = lr;
  } else if (refresh) {
    write(rate, lr);  // an eager step after the rate changed without a sync
  }
  return rate.tensor;
}

bool DeviceRates::has(size_t group, const c10::Device& device) const {
  return group < rates_.size() && rates_[group].tensor.defined() && rates_[group].tensor.device() == device;
}

void DeviceRates::write(Rate& rate, double lr) {
  if (rate.value == lr) return;
  at::NoGradGuard no_grad;
  rate.tensor.fill_(lr);
  rate.value = lr;
}

void DeviceRates::sync(const std::vector<torch::optim::OptimizerParamGroup>& groups) {
  for (size_t g = 0; g < rates_.size() && g < groups.size(); ++g) {
    if (rates_[g].tensor.defined()) write(rates_[g], groups[g].options().get_lr());
  }
}

bool DeviceRates::take_writes(const std::vector<torch::optim::OptimizerParamGroup>& groups, size_t max,
                              std::vector<Write>* out) {
  std::vector<Write> writes;
  for (size_t g = 0; g < rates_.size() && g < groups.size(); ++g) {
    const double now = groups[g].options().get_lr();
    if (rates_[g].tensor.defined() && rates_[g].value != now) writes.push_back({rates_[g].tensor, now});
  }
  if (writes.size() > max) return false;
  for (size_t g = 0; g < rates_.size() && g < groups.size(); ++g) {
    if (rates_[g].tensor.defined()) rates_[g].value = groups[g].options().get_lr();
  }
  *out = std::move(writes);
  return true;
}

DeviceRates& rates_of(optim::DeviceStateOptimizer& optimizer) { return optimizer.rates_; }

}  // namespace train::details

namespace train::optim {

void DeviceStateOptimizer::sync_lr() { rates_.sync(param_groups_); }

const at::Tensor& DeviceStateOptimizer::device_lr(size_t group, const c10::Device& device, bool refresh) {
  lr_on_device_ = true;
  return rates_.get(group, param_groups_[group].options().get_lr(), device, refresh);
}

DeviceStateOptimizer* device_state(torch::optim::Optimizer& optimizer) {
  return dynamic_cast<DeviceStateOptimizer*>(&optimizer);
}

const DeviceStateOptimizer* device_state(const torch::optim::Optimizer& optimizer) {
  return dynamic_cast<const DeviceStateOptimizer*>(&optimizer);
}

bool take_rate_writes(DeviceStateOptimizer& optimizer, size_t max, std::vector<details::DeviceRates::Write>* out) {
  return details::rates_of(optimizer).take_writes(optimizer.param_groups(), max, out);
}

}  // namespace train::optim
