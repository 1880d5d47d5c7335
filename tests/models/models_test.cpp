// Tests for the seeds' models and the model registry.
#include "train/error.h"
#include "train/models/cifar_cnn.h"
#include "train/models/dropout.h"
#include "train/models/mnist_cnn.h"
#include "train/models/model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

using namespace train::models;

TEST(MnistCnn, ShapesAndParameterOrder) {
  auto m = make_model("mnist");
  auto out = m->forward(torch::randn({3, 1, 28, 28}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{3, 10}));
  // log-softmax rows sum to 1 in probability space
  EXPECT_TRUE(torch::allclose(out.exp().sum(1), torch::ones({3}), 1e-5, 1e-5));
  std::vector<std::string> names;
  int64_t count = 0;
  for (const auto& p : m->named_parameters()) {
    names.push_back(p.key());
    count += p.value().numel();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                             "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(count, 1199882);  // the seeds' Net: 320 + 18496 + 1179776 + 1290
  EXPECT_EQ(m->output_kind(), OutputKind::log_probs);
}

TEST(MnistCnn, NoDropoutIsDeterministicInTrainMode) {
  ModelOptions o;
  o.dropout = false;
  auto m = make_model("mnist", o);
  m->train();
  auto x = torch::randn({2, 1, 28, 28});
  EXPECT_TRUE(torch::equal(m->forward(x), m->forward(x)));
  auto with = make_model("mnist");
  with->train();
  EXPECT_FALSE(torch::equal(with->forward(x), with->forward(x)));
}

TEST(CifarCnn, Shapes) {
  auto m = make_model("cifar10");
  auto out = m->forward(torch::randn({2, 3, 32, 32}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 10}));
  int64_t count = 0;
  for (const auto& p : m->parameters()) count += p.numel();
  EXPECT_EQ(count, 62006);  // the tutorial LeNet
  EXPECT_EQ(m->output_kind(), OutputKind::logits);
}

TEST(Registry, UnknownNameListsKnownOnes) {
  try {
    make_model("resnet9000");
    FAIL() << "expected ConfigError";
  } catch (const train::ConfigError& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("resnet9000"), std::string::npos);
    EXPECT_NE(w.find("mnist"), std::string::npos);
    EXPECT_NE(w.find("cifar10"), std::string::npos);
  }
}

namespace {
class Tiny : public Model {
 public:
  Tiny() { fc_ = register_module("fc", torch::nn::Linear(784, 10)); }
  torch::Tensor forward(torch::Tensor x) override { return fc_->forward(x.flatten(1)); }
  OutputKind output_kind() const override { return OutputKind::logits; }
  torch::nn::Linear fc_{nullptr};
};
}  // namespace

TEST(Registry, UserModelsCanBeAdded) {
  ModelInfo info;
  info.name = "tiny";
  info.description = "a linear model";
  info.make = [](const ModelOptions&) { return std::make_shared<Tiny>(); };
  register_model(info);
  auto names = model_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "tiny"), names.end());
  EXPECT_EQ(make_model("tiny")->forward(torch::zeros({1, 1, 28, 28})).size(1), 10);
  ModelInfo bad;
  EXPECT_THROW(register_model(bad), train::ConfigError);
}

TEST(FastDropout, KeepsOneMinusPScaledAndReproducible) {
  auto x = torch::ones({256, 1024}, torch::requires_grad());
  torch::manual_seed(11);
  auto a = train::models::fast_dropout(x, 0.25, true);
  torch::manual_seed(11);
  auto b = train::models::fast_dropout(x, 0.25, true);
  EXPECT_TRUE(torch::equal(a, b)) << "same seed, same mask";
  auto c = train::models::fast_dropout(x, 0.25, true);
  EXPECT_FALSE(torch::equal(a, c)) << "the generator advances";
  const double kept = (a > 0).to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(kept, 0.75, 0.005);
  EXPECT_TRUE(torch::allclose(a.masked_select(a > 0), torch::full({1}, 1.0f / 0.75f)));
  // The gradient is the same mask.
  a.sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), a.detach()));
  // Eval mode and p = 0 are the identity; thread count doesn't change the mask.
  EXPECT_TRUE(torch::equal(train::models::fast_dropout(x, 0.5, false), x));
  at::set_num_threads(1);
  torch::manual_seed(11);
  auto d = train::models::fast_dropout(x, 0.25, true);
  at::set_num_threads(2);
  EXPECT_TRUE(torch::equal(a.detach(), d.detach()));
}
