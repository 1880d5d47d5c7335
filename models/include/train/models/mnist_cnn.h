// The MNIST CNN (pytorch/examples mnist): two convolutions, max-pool, two linear layers.
#pragma once

#include "train/models/model.h"

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

namespace train::models {

/// conv 1->32 3x3, conv 32->64 3x3, max-pool 2, dropout 0.25, fc 9216->128, dropout 0.5,
/// fc 128->10, log-softmax. Parameters register in the same order as the Python seed, so a given
/// torch::manual_seed gives the same initial weights as the Python reference.
class MnistCnn : public Model {
 public:
  explicit MnistCnn(const ModelOptions& options = {});
  torch::Tensor forward(torch::Tensor x) override;
  OutputKind output_kind() const override { return OutputKind::log_probs; }

 private:
  bool dropout_;
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::Dropout dropout1_{nullptr}, dropout2_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

}  // namespace train::models
