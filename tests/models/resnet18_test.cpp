// Tests for the CIFAR-10 ResNet-18 (models/include/train/models/resnet18.h).
#include "train/models/model.h"
#include "train/models/resnet18.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

using namespace train::models;

TEST(ResNet18, RegisteredWithCifarInputAndLogitsOut) {
  const ModelInfo& info = model_info("resnet18");
  EXPECT_EQ(info.channels, 3);
  EXPECT_EQ(info.height, 32);
  EXPECT_EQ(info.width, 32);
  torch::manual_seed(0);
  auto m = make_model("resnet18");
  m->eval();
  auto out = m->forward(torch::randn({2, 3, 32, 32}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(m->output_kind(), OutputKind::logits);
}

TEST(ResNet18, ParameterCountMatchesThePythonDefinition) {
  // scripts/bench/peers.py's ResNet18 (the kuangliu/pytorch-cifar definition) counts 11,173,962
  // parameters with 10 classes; tests/bench/peers_test.sh checks the Python side.
  auto m = make_model("resnet18");
  int64_t count = 0, tensors = 0;
  for (const auto& p : m->parameters()) count += p.numel(), ++tensors;
  EXPECT_EQ(count, 11173962);
  EXPECT_EQ(tensors, 62);  // 21 convs + fc weight, bias + 20 batch norms x 2
  int64_t buffers = 0;
  for (const auto& b : m->buffers()) buffers += b.numel();
  EXPECT_GT(buffers, 0) << "batch norm running statistics";
}

TEST(ResNet18, ShortCpuTrainingRunLowersTheLoss) {
  torch::manual_seed(1);
  auto m = make_model("resnet18");
  m->train();
  const torch::Tensor x = torch::randn({4, 3, 32, 32});
  const torch::Tensor y = torch::arange(4);
  torch::optim::SGD opt(m->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(5e-4));
  double first = 0, last = 0;
  for (int step = 0; step < 6; ++step) {
    opt.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(m->forward(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_TRUE(std::isfinite(last));
  EXPECT_LT(last, first * 0.7) << "first loss " << first << ", after 6 steps " << last;
}
