// InMemoryDataset: rows gathered with index_select on the device the data lives on.
#include "train/data.h"

#include "train/base/error.h"

#include <ATen/ops/index_select.h>

namespace train {

InMemoryDataset::InMemoryDataset(at::Tensor inputs, at::Tensor targets, std::string name)
    : inputs_(std::move(inputs)), targets_(std::move(targets)), name_(std::move(name)) {
  if (!inputs_.defined() || !targets_.defined() || inputs_.dim() < 1 || targets_.dim() < 1 ||
      inputs_.size(0) != targets_.size(0)) {
    const auto rows = [](const at::Tensor& t) {
      return t.defined() && t.dim() > 0 ? std::to_string(t.size(0)) : std::string("no");
    };
    throw ConfigError("InMemoryDataset " + name_ + ": expected inputs and targets with the same number of rows, found " +
                          rows(inputs_) + " and " + rows(targets_) + ".",
                      "pass inputs [N, ...] and targets [N].");
  }
}

Batch InMemoryDataset::get_batch(const at::Tensor& indices) {
  return {inputs_.index_select(0, indices), targets_.index_select(0, indices)};
}

void InMemoryDataset::to(const at::Device& device) {
  inputs_ = inputs_.to(device);
  targets_ = targets_.to(device);
}

}  // namespace train
