// A module's parameters once each. LibTorch's `named_parameters()` lists a tensor registered in two
// modules (a tied weight: an embedding and the output layer) under both names; PyTorch's
// `parameters()` leaves the second out. The optimizer, the gradients' norm (clipping, the
// non-finite check) and DDP's buckets take each tensor once, as in PyTorch: twice, a tied weight
// would take two updates a step and count twice in a norm. Private.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace train::detail {

/// `module`'s named parameters (recursively, in registration order), each tensor under its first
/// name only.
inline std::vector<std::pair<std::string, at::Tensor>> unique_named_parameters(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::unordered_set<const void*> seen;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (seen.insert(item.value().unsafeGetTensorImpl()).second) out.emplace_back(item.key(), item.value());
  }
  return out;
}

/// `module`'s parameters, each tensor once (the order of its first name).
inline std::vector<at::Tensor> unique_parameters(const torch::nn::Module& module) {
  std::vector<at::Tensor> out;
  for (auto& [name, p] : unique_named_parameters(module)) out.push_back(std::move(p));
  return out;
}

}  // namespace train::detail
