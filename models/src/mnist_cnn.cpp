// MnistCnn: the same layers, registration order and forward pass as the Python Net of PyTorch's mnist example.
#include "train/models/mnist_cnn.h"

#include "train/models/dropout.h"
#include "train/models/fused.h"

#include <torch/nn/functional/activation.h>

namespace train::models {

MnistCnn::MnistCnn(const ModelOptions& options) : dropout_(options.dropout) {
  conv1_ = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).stride(1)));
  conv2_ = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).stride(1)));
  dropout1_ = register_module("dropout1", torch::nn::Dropout(/*p=*/0.25));
  dropout2_ = register_module("dropout2", torch::nn::Dropout(/*p=*/0.5));
  fc1_ = register_module("fc1", torch::nn::Linear(9216, 128));
  fc2_ = register_module("fc2", torch::nn::Linear(128, 10));
}

torch::Tensor MnistCnn::forward(torch::Tensor x) {
  x = torch::relu(conv1_->forward(x));
  // max_pool(relu(x)) == relu(max_pool(x)) exactly, gradients included (ReLU is monotone and
  // both pick the same window element), so pool, ReLU and dropout1 run as one fused pass over
  // the conv2 output (models/src/fused.cpp), equal bit for bit to the composed ops.
  const bool drop = dropout_ && is_training();
  x = max_pool2_relu_dropout(conv2_->forward(x), dropout1_->options.p(), drop);
  x = torch::flatten(x, /*start_dim=*/1);
  x = torch::relu(fc1_->forward(x));
  if (drop) x = fast_dropout(x, dropout2_->options.p(), /*training=*/true);
  x = fc2_->forward(x);
  return torch::log_softmax(x, /*dim=*/1);
}

}  // namespace train::models
