// CifarCnn: the CIFAR-10 tutorial's LeNet for 32x32 RGB images.
#include "train/models/cifar_cnn.h"

namespace train::models {

CifarCnn::CifarCnn(const ModelOptions& /*options: no dropout in this net*/) {
  conv1_ = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 6, 5)));
  conv2_ = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(6, 16, 5)));
  fc1_ = register_module("fc1", torch::nn::Linear(16 * 5 * 5, 120));
  fc2_ = register_module("fc2", torch::nn::Linear(120, 84));
  fc3_ = register_module("fc3", torch::nn::Linear(84, 10));
}

torch::Tensor CifarCnn::forward(torch::Tensor x) {
  x = torch::max_pool2d(torch::relu(conv1_->forward(x)), /*kernel_size=*/2);
  x = torch::max_pool2d(torch::relu(conv2_->forward(x)), /*kernel_size=*/2);
  x = torch::flatten(x, /*start_dim=*/1);
  x = torch::relu(fc1_->forward(x));
  x = torch::relu(fc2_->forward(x));
  return fc3_->forward(x);
}

}  // namespace train::models
