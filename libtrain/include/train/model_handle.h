// A model as the Trainer and the training step see it: the module and its forward. Any LibTorch
// module fits through wrap_model().
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>

namespace train {

/// A model as the Trainer sees it: the module (parameters, train()/eval(), to()) and its forward.
struct ModelHandle {
  std::shared_ptr<torch::nn::Module> module;
  std::function<at::Tensor(const at::Tensor&)> forward;
};

/// Wraps a module held by shared_ptr (e.g. std::make_shared<MyNetImpl>()) whose forward takes one tensor.
template <class M>
ModelHandle wrap_model(std::shared_ptr<M> module) {
  return {module, [module](const at::Tensor& x) { return module->forward(x); }};
}

/// Wraps a LibTorch module holder (TORCH_MODULE(MyNet), torch::nn::Sequential, ...).
template <class M>
ModelHandle wrap_model(const torch::nn::ModuleHolder<M>& holder) {
  return wrap_model(holder.ptr());
}

}  // namespace train
