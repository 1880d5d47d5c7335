// Adadelta against torch.optim.Adadelta from the venv's Python torch, on the same inputs.
#include "test_util.h"
#include "train/adadelta.h"
#include "train/base/error.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

namespace {

torch::Tensor read_floats(const std::string& path, at::IntArrayRef shape) {
  std::ifstream f(path, std::ios::binary);
  auto t = torch::empty(shape, torch::kFloat);
  f.read(reinterpret_cast<char*>(t.data_ptr<float>()), t.numel() * sizeof(float));
  EXPECT_TRUE(bool(f)) << "short read of " << path;
  return t;
}

void compare_with_python(int steps, double lr, double rho, double eps, double wd) {
  const std::string py = train::test::venv_python();
  ASSERT_FALSE(py.empty()) << "the venv's python with torch is needed for this test; run scripts/setup.sh";
  train::test::TempDir d("adadelta");
  auto r = train::test::run_program({py, std::string(TRAIN_SOURCE_DIR) + "/tests/libtrain/py/adadelta_reference.py",
                                     d.path(), std::to_string(steps), std::to_string(lr), std::to_string(rho),
                                     std::to_string(eps), std::to_string(wd)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::vector<int64_t>> shapes = {{32, 1, 3, 3}, {32}, {10, 128}};
  std::vector<torch::Tensor> params;
  for (size_t i = 0; i < shapes.size(); ++i) {
    params.push_back(read_floats(d.file("param" + std::to_string(i) + ".bin"), shapes[i]).requires_grad_(true));
  }
  train::optim::Adadelta opt(params, train::optim::AdadeltaOptions(lr).rho(rho).eps(eps).weight_decay(wd));
  for (int k = 0; k < steps; ++k) {
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].mutable_grad() = read_floats(d.file("grad" + std::to_string(i) + "_" + std::to_string(k) + ".bin"), shapes[i]);
    }
    opt.step();
  }
  for (size_t i = 0; i < params.size(); ++i) {
    auto want = read_floats(d.file("result" + std::to_string(i) + ".bin"), shapes[i]);
    auto got = params[i].detach();
    // Same ops in the same order on the same inputs: bit-identical.
    EXPECT_TRUE(torch::equal(got, want)) << "param " << i << " max abs diff "
                                         << (got - want).abs().max().item<float>();
  }
}

}  // namespace

TEST(Adadelta, MatchesTorchDefaults) { compare_with_python(6, 1.0, 0.9, 1e-6, 0.0); }
TEST(Adadelta, MatchesTorchWithWeightDecay) { compare_with_python(4, 0.5, 0.95, 1e-5, 0.01); }

TEST(Adadelta, RejectsBadOptions) {
  std::vector<torch::Tensor> p{torch::zeros({2}, torch::requires_grad())};
  EXPECT_THROW(train::optim::Adadelta(p, train::optim::AdadeltaOptions(-1.0)), train::ConfigError);
  EXPECT_THROW(train::optim::Adadelta(p, train::optim::AdadeltaOptions(1.0).rho(1.5)), train::ConfigError);
}

TEST(Adadelta, StateSurvivesSaveAndLoad) {
  torch::manual_seed(0);
  auto a = torch::randn({5}, torch::requires_grad());
  auto b = a.detach().clone().requires_grad_(true);
  train::optim::Adadelta oa({a}), ob({b});
  for (int k = 0; k < 3; ++k) {
    auto g = torch::randn({5});
    a.mutable_grad() = g.clone();
    b.mutable_grad() = g.clone();
    oa.step();
    ob.step();
  }
  train::test::TempDir d("adasave");
  torch::serialize::OutputArchive out;
  oa.save(out);
  out.save_to(d.file("opt.pt"));
  train::optim::Adadelta oc({b});
  torch::serialize::InputArchive in;
  in.load_from(d.file("opt.pt"));
  oc.load(in);
  auto g = torch::randn({5});
  a.mutable_grad() = g.clone();
  b.mutable_grad() = g.clone();
  oa.step();
  oc.step();
  EXPECT_TRUE(torch::equal(a, b));
}

// update_bucket (a captured step's update of one gradient bucket) refuses, changing nothing, where
// the fused CUDA kernel can't run: CPU tensors, a parameter without a gradient, one the
// optimizer doesn't hold. The full step still works afterwards, bit for bit like a fresh one.
TEST(Adadelta, StepFusedRefusesWhatTheKernelCantTakeAndChangesNothing) {
  torch::manual_seed(0);
  auto a = torch::randn({4, 3}, torch::requires_grad());
  auto b = torch::randn({3}, torch::requires_grad());
  auto a2 = a.detach().clone().requires_grad_(true);
  auto b2 = b.detach().clone().requires_grad_(true);
  train::optim::Adadelta opt({a, b}), fresh({a2, b2});
  const auto before = a.detach().clone();
  const auto version = a._version();

  EXPECT_FALSE(opt.update_bucket({a}));  // no gradient yet
  a.mutable_grad() = torch::randn({4, 3});
  b.mutable_grad() = torch::randn({3});
  a2.mutable_grad() = a.grad().clone();
  b2.mutable_grad() = b.grad().clone();
  EXPECT_FALSE(opt.update_bucket({a, b}));  // CPU tensors: no fused kernel
  auto stranger = torch::randn({2}, torch::requires_grad());
  stranger.mutable_grad() = torch::ones({2});
  EXPECT_FALSE(opt.update_bucket({stranger}));  // not one of the optimizer's parameters
  EXPECT_TRUE(torch::equal(a, before));
  EXPECT_EQ(a._version(), version);
  EXPECT_FALSE(opt.lr_on_device());

  opt.step();
  fresh.step();
  EXPECT_TRUE(torch::equal(a, a2));
  EXPECT_TRUE(torch::equal(b, b2));
  EXPECT_FALSE(torch::equal(a, before));
}
