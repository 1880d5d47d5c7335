// ResNet18: the CIFAR variant of ResNet-18 (see the header).
#include "train/models/resnet18.h"

#include <ATen/ops/adaptive_avg_pool2d.h>
#include <ATen/ops/flatten.h>
#include <ATen/ops/max_pool2d.h>
#include <ATen/ops/relu.h>

namespace train::models {
namespace {

// Images from this size take torchvision's ImageNet stem (ModelOptions::image_size).
constexpr int64_t kImageNetStemFrom = 64;

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

}  // namespace

BasicBlock::BasicBlock(int64_t in_channels, int64_t channels, int64_t stride) {
  conv1_ = register_module("conv1", conv(in_channels, channels, 3, stride));
  bn1_ = register_module("bn1", torch::nn::BatchNorm2d(channels));
  conv2_ = register_module("conv2", conv(channels, channels, 3, 1));
  bn2_ = register_module("bn2", torch::nn::BatchNorm2d(channels));
  shortcut_ = register_module("shortcut", torch::nn::Sequential());
  if (stride != 1 || in_channels != channels) {
    shortcut_->push_back(conv(in_channels, channels, 1, stride));
    shortcut_->push_back(torch::nn::BatchNorm2d(channels));
  }
}

torch::Tensor BasicBlock::forward(const torch::Tensor& x) {
  torch::Tensor out = at::relu(bn1_->forward(conv1_->forward(x)));
  out = bn2_->forward(conv2_->forward(out));
  return at::relu(out + (shortcut_->is_empty() ? x : shortcut_->forward(x)));
}

ResNet18::ResNet18(const ModelOptions& options, int64_t num_classes) {
  // No dropout in this net. The stem's conv keeps its name in both variants.
  imagenet_stem_ = options.image_size >= kImageNetStemFrom;
  if (options.num_classes > 0) num_classes = options.num_classes;
  conv1_ = register_module("conv1", imagenet_stem_ ? conv(3, 64, 7, 2) : conv(3, 64, 3, 1));
  bn1_ = register_module("bn1", torch::nn::BatchNorm2d(64));
  int64_t in = 64;
  const int64_t widths[] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    for (int b = 0; b < 2; ++b) {
      const int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
      auto block = std::make_shared<BasicBlock>(in, widths[stage], stride);
      blocks_.push_back(register_module("layer" + std::to_string(stage + 1) + "_" + std::to_string(b), block));
      in = widths[stage];
    }
  }
  fc_ = register_module("fc", torch::nn::Linear(512, num_classes));
}

torch::Tensor ResNet18::forward(torch::Tensor x) {
  x = at::relu(bn1_->forward(conv1_->forward(x)));
  if (imagenet_stem_) x = at::max_pool2d(x, /*kernel_size=*/{3, 3}, /*stride=*/{2, 2}, /*padding=*/{1, 1});
  for (const auto& block : blocks_) x = block->forward(x);
  x = at::flatten(at::adaptive_avg_pool2d(x, {1, 1}), /*start_dim=*/1);
  return fc_->forward(x);
}

}  // namespace train::models
