// The example's model: a small ResNet (a stem, two residual blocks, global average pooling and a
// linear classifier) for 1-channel images, written with LibTorch's module API.
#pragma once

#include <ATen/ops/adaptive_avg_pool2d.h>
#include <ATen/ops/relu.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

namespace example {

/// Two 3x3 convolutions with BatchNorm and a shortcut (a 1x1 projection when the shape changes).
struct ResidualBlockImpl : torch::nn::Module {
  ResidualBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)),
        bn1(out),
        conv2(torch::nn::Conv2dOptions(out, out, 3).padding(1).bias(false)),
        bn2(out) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    if (stride != 1 || in != out) {
      shortcut = register_module(
          "shortcut", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                                            torch::nn::BatchNorm2d(out)));
    }
  }

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = at::relu(bn1(conv1(x)));
    y = bn2(conv2(y));
    return at::relu(y + (shortcut ? shortcut->forward(x) : x));
  }

  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Sequential shortcut{nullptr};
};
TORCH_MODULE(ResidualBlock);

/// ResNet for [N, 1, H, W] images; outputs logits [N, classes].
struct TinyResNetImpl : torch::nn::Module {
  explicit TinyResNetImpl(int64_t classes, int64_t width = 16)
      : stem(torch::nn::Conv2dOptions(1, width, 3).padding(1).bias(false)),
        stem_bn(width),
        block1(width, width, /*stride=*/1),
        block2(width, 2 * width, /*stride=*/2),
        fc(2 * width, classes) {
    register_module("stem", stem);
    register_module("stem_bn", stem_bn);
    register_module("block1", block1);
    register_module("block2", block2);
    register_module("fc", fc);
  }

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = at::relu(stem_bn(stem(x)));
    y = block2(block1(y));
    y = at::adaptive_avg_pool2d(y, {1, 1}).flatten(1);
    return fc(y);
  }

  torch::nn::Conv2d stem;
  torch::nn::BatchNorm2d stem_bn;
  ResidualBlock block1, block2;
  torch::nn::Linear fc;
};
TORCH_MODULE(TinyResNet);

}  // namespace example
