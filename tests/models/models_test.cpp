// Tests for the seeds' models and the model registry.
#include "train/base/error.h"
#include "train/models/cifar_cnn.h"
#include "train/models/dropout.h"
#include "train/models/fused.h"
#include "train/models/mnist_cnn.h"
#include "train/models/model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>

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

namespace {

// The composed ops the fused kernel replaces, as MnistCnn ran them before.
torch::Tensor composed_pool_relu_dropout(const torch::Tensor& x, double p, bool training) {
  auto y = torch::relu(torch::max_pool2d(x, 2));
  return training && p > 0 ? fast_dropout(y, p, true) : y;
}

bool bitwise_equal(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

}  // namespace

// Every version of the fused kernels runs every case: portable, and AVX2 and AVX-512 where this
// build and CPU have them (skipped with the reason otherwise).
class FusedPoolReluDropout : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const auto have = fused_kernels_available();
    if (std::find(have.begin(), have.end(), GetParam()) == have.end()) {
      GTEST_SKIP() << "the " << GetParam() << " fused kernels can't run here: this build and CPU have "
                   << ::testing::PrintToString(have);
    }
    force_fused_kernels(GetParam());
    std::cout << "[ fused kernels: " << fused_kernels_isa() << " ]" << std::endl;
  }
  void TearDown() override { force_fused_kernels("auto"); }
};

INSTANTIATE_TEST_SUITE_P(Kernels, FusedPoolReluDropout, ::testing::Values("portable", "avx2", "avx512"),
                         [](const auto& info) { return info.param; });

TEST_P(FusedPoolReluDropout, EqualsComposedOpsBitForBit) {
  struct Case {
    std::vector<int64_t> shape;
    double p;
    bool training;
    bool ties;
  };
  const std::vector<Case> cases = {
      {{8, 64, 24, 24}, 0.25, true, false},  // MnistCnn's conv2 output
      {{2, 3, 70, 66}, 0.5, true, false},    // rows longer than one 16-wide vector step
      {{3, 5, 7, 9}, 0.25, true, false},     // odd sizes: floor mode drops the last row/column
      {{4, 6, 10, 10}, 0.5, true, true},     // ties and exact zeros everywhere
      {{2, 3, 8, 8}, 0.0, true, false},      // no dropout
      {{2, 3, 8, 8}, 0.25, false, false},    // eval mode
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.shape) + " p=" + std::to_string(c.p));
    torch::manual_seed(5);
    auto base = c.ties ? torch::randint(-2, 3, c.shape).to(torch::kFloat) : torch::randn(c.shape);
    auto x1 = base.clone().requires_grad_(true);
    auto x2 = base.clone().requires_grad_(true);
    torch::manual_seed(99);
    auto y1 = composed_pool_relu_dropout(x1, c.p, c.training);
    const auto after1 = torch::randn({1});  // generator state after the op
    torch::manual_seed(99);
    auto y2 = max_pool2_relu_dropout(x2, c.p, c.training);
    const auto after2 = torch::randn({1});
    EXPECT_TRUE(bitwise_equal(y1, y2)) << "forward";
    EXPECT_TRUE(torch::equal(after1, after2)) << "the same generator draws";
    auto g = torch::randn(y1.sizes());
    y1.backward(g);
    y2.backward(g);
    EXPECT_TRUE(bitwise_equal(x1.grad(), x2.grad())) << "backward";
    EXPECT_GT(x2.grad().ne(0).sum().item<int64_t>(), 0) << "some gradient flows";
  }
}

TEST_P(FusedPoolReluDropout, NaNAndInfinityFollowATen) {
  auto base = torch::randn({2, 2, 4, 4});
  base.index_put_({0, 0, 0, 1}, std::numeric_limits<float>::quiet_NaN());
  base.index_put_({0, 1, 2, 2}, -std::numeric_limits<float>::infinity());
  base.index_put_({0, 1, 2, 3}, -std::numeric_limits<float>::infinity());
  base.index_put_({0, 1, 3, 2}, -std::numeric_limits<float>::infinity());
  base.index_put_({0, 1, 3, 3}, -std::numeric_limits<float>::infinity());
  base.index_put_({1, 0, 1, 1}, std::numeric_limits<float>::infinity());
  auto x1 = base.clone().requires_grad_(true);
  auto x2 = base.clone().requires_grad_(true);
  auto y1 = composed_pool_relu_dropout(x1, 0.0, false);
  auto y2 = max_pool2_relu_dropout(x2, 0.0, false);
  EXPECT_TRUE(std::isnan(y2[0][0][0][0].item<float>()));
  EXPECT_TRUE(torch::equal(y1.nan_to_num(-7), y2.nan_to_num(-7)));
  auto g = torch::ones(y1.sizes());
  y1.backward(g);
  y2.backward(g);
  EXPECT_TRUE(bitwise_equal(x1.grad(), x2.grad()));

  // Many NaNs, infinities and ties at random places, with dropout: the gradient lands on the
  // same window element (the last NaN, else the first maximum) as ATen's.
  torch::manual_seed(8);
  auto many = torch::randint(-1, 2, {4, 8, 10, 34}).to(torch::kFloat);
  const auto special = torch::rand(many.sizes());
  many.masked_fill_(special < 0.1, std::numeric_limits<float>::quiet_NaN());
  many.masked_fill_(special > 0.95, std::numeric_limits<float>::infinity());
  many.masked_fill_((special > 0.9) & (special <= 0.95), -std::numeric_limits<float>::infinity());
  auto m1 = many.clone().requires_grad_(true);
  auto m2 = many.clone().requires_grad_(true);
  torch::manual_seed(4);
  auto z1 = composed_pool_relu_dropout(m1, 0.25, true);
  torch::manual_seed(4);
  auto z2 = max_pool2_relu_dropout(m2, 0.25, true);
  EXPECT_TRUE(torch::equal(z1.isnan(), z2.isnan()));
  EXPECT_TRUE(torch::equal(z1.nan_to_num(-7, 1e30, -1e30), z2.nan_to_num(-7, 1e30, -1e30)));
  auto gz = torch::randn(z1.sizes());
  z1.backward(gz);
  z2.backward(gz);
  EXPECT_TRUE(torch::equal(m1.grad().isnan(), m2.grad().isnan()));
  EXPECT_TRUE(torch::equal(m1.grad().nan_to_num(-7), m2.grad().nan_to_num(-7)));
}

TEST_P(FusedPoolReluDropout, NoGradPathAndOtherDtypesFallBack) {
  auto x = torch::randn({2, 3, 6, 6});
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(bitwise_equal(max_pool2_relu_dropout(x, 0.0, false), torch::relu(torch::max_pool2d(x, 2))));
  }
  auto xd = x.to(torch::kDouble);
  EXPECT_TRUE(torch::equal(max_pool2_relu_dropout(xd, 0.0, false), torch::relu(torch::max_pool2d(xd, 2))));
  // Thread count doesn't change anything.
  at::set_num_threads(1);
  torch::manual_seed(3);
  auto a = max_pool2_relu_dropout(x, 0.25, true);
  at::set_num_threads(2);
  torch::manual_seed(3);
  auto b = max_pool2_relu_dropout(x, 0.25, true);
  EXPECT_TRUE(bitwise_equal(a, b));
}

namespace {

// Random input for the version-against-portable test: normal values, ties (small integers) and,
// with `specials`, NaN, +inf and -inf at random places.
torch::Tensor pool_input(const std::vector<int64_t>& shape, bool ties, bool specials) {
  auto x = ties ? torch::randint(-2, 3, shape).to(torch::kFloat) : torch::randn(shape);
  if (specials) {
    const auto u = torch::rand(shape);
    x.masked_fill_(u < 0.05, std::numeric_limits<float>::quiet_NaN());
    x.masked_fill_((u >= 0.05) & (u < 0.1), -std::numeric_limits<float>::infinity());
    x.masked_fill_(u > 0.97, std::numeric_limits<float>::infinity());
  }
  return x;
}

// Output and input gradient of one fused call with the given version, from a fixed generator state.
std::pair<torch::Tensor, torch::Tensor> fused_run(const std::string& isa, const torch::Tensor& x, double p,
                                                  bool training, const torch::Tensor& g) {
  force_fused_kernels(isa);
  auto xi = x.clone().requires_grad_(true);
  torch::manual_seed(77);
  auto y = max_pool2_relu_dropout(xi, p, training);
  y.backward(g);
  force_fused_kernels("auto");
  return {y.detach(), xi.grad()};
}

}  // namespace

// Every vector version gives the portable version's bits, output and gradient, NaN payloads
// included: row lengths 1 to 40 outputs (every tail of the 8- and 16-wide steps), odd input
// sizes, rows whose first flat index isn't a multiple of 4 (the dropout hash's block), ties,
// NaN and infinities, with and without dropout.
TEST_P(FusedPoolReluDropout, EveryVersionGivesThePortableBits) {
  torch::manual_seed(11);
  int cases = 0;
  for (int64_t w = 2; w <= 81; w += (w < 36 ? 1 : 5)) {
    for (int64_t h : {2, 3, 6}) {
      const bool ties = (w + h) % 3 == 0, specials = (w + h) % 2 == 0;
      const double p = w % 4 == 0 ? 0.0 : (w % 4 == 1 ? 0.25 : 0.5);
      const bool training = w % 5 != 0;
      SCOPED_TRACE("w=" + std::to_string(w) + " h=" + std::to_string(h) + " p=" + std::to_string(p) +
                   (training ? " train" : " eval") + (ties ? " ties" : "") + (specials ? " NaN/inf" : ""));
      const auto x = pool_input({2, 3, h, w}, ties, specials);
      const auto g = torch::randn({2, 3, h / 2, w / 2});
      const auto [y0, g0] = fused_run("portable", x, p, training, g);
      const auto [y1, g1] = fused_run(GetParam(), x, p, training, g);
      EXPECT_TRUE(bitwise_equal(y0, y1)) << "forward";
      EXPECT_TRUE(bitwise_equal(g0, g1)) << "backward";
      ++cases;
    }
  }
  EXPECT_GT(cases, 100);
}

TEST(FusedKernels, ForcingAVersionThisCpuLacksIsAConfigError) {
  EXPECT_THROW(force_fused_kernels("sse9"), train::ConfigError);
  const auto have = fused_kernels_available();
  ASSERT_FALSE(have.empty());
  EXPECT_EQ(have.front(), "portable");
  for (const std::string isa : {"avx2", "avx512"}) {
    if (std::find(have.begin(), have.end(), isa) != have.end()) continue;
    EXPECT_THROW(force_fused_kernels(isa), train::ConfigError) << isa;
  }
  force_fused_kernels("portable");
  EXPECT_EQ(fused_kernels_isa(), "portable");
  force_fused_kernels("auto");
  if (std::getenv("TRAIN_FUSED_KERNELS") == nullptr && std::getenv("TRAIN_CPU_KERNELS") == nullptr) {
    EXPECT_EQ(fused_kernels_isa(), have.back()) << "auto: the best version this CPU has";
  }
}
