// The CIFAR-10 CNN (LeNet-style, from the PyTorch CIFAR-10 tutorial).
#pragma once

#include "train/models/model.h"

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

namespace train::models {

/// conv 3->6 5x5, max-pool 2, conv 6->16 5x5, max-pool 2, fc 400->120->84->10 with ReLU; outputs
/// logits (trained with cross-entropy, as the seed does).
class CifarCnn : public Model {
 public:
  explicit CifarCnn(const ModelOptions& options = {});
  torch::Tensor forward(torch::Tensor x) override;
  OutputKind output_kind() const override { return OutputKind::logits; }

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr}, fc3_{nullptr};
};

}  // namespace train::models
