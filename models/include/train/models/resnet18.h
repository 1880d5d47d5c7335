// ResNet-18: four stages of two BasicBlocks (64, 128, 256, 512 channels), global average pooling and
// one linear layer, after a stem: the CIFAR variant's 3x3 conv without max-pool (as the usual CIFAR-10
// scripts, e.g. kuangliu/pytorch-cifar; 11,173,962 parameters with 10 classes) for small images, or
// torchvision's ImageNet stem (7x7 stride-2 conv, 3x3 stride-2 max-pool) from 64 px.
#pragma once

#include "train/models/model.h"

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

namespace train::models {

/// Two 3x3 conv + batch-norm layers with a residual connection; a 1x1 conv + batch norm on the
/// shortcut where the stride or the channel count changes.
class BasicBlock : public torch::nn::Module {
 public:
  BasicBlock(int64_t in_channels, int64_t channels, int64_t stride);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  torch::nn::Sequential shortcut_{nullptr};  ///< empty: identity
};

/// Input float32 [N, 3, H, W] (32 x 32 for CIFAR; 224 x 224 for ImageNet); output logits
/// [N, num_classes] (cross-entropy).
class ResNet18 : public Model {
 public:
  /// `num_classes` when options.num_classes is 0; the ImageNet stem when options.image_size >= 64.
  explicit ResNet18(const ModelOptions& options = {}, int64_t num_classes = 10);
  torch::Tensor forward(torch::Tensor x) override;
  OutputKind output_kind() const override { return OutputKind::logits; }

 private:
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  std::vector<std::shared_ptr<BasicBlock>> blocks_;
  torch::nn::Linear fc_{nullptr};
  bool imagenet_stem_ = false;
};

}  // namespace train::models
