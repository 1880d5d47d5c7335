// The fused optimizers (train/fused_optim.h) against Python's fused=True on the same inputs under
// the same per-step warm-up + cosine rate; their checkpoints; the built-in schedules against
// torch.optim.lr_scheduler.
#include "test_util.h"
#include "train/error.h"
#include "train/fused_optim.h"
#include "train/trainer.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>

namespace {

torch::Tensor read_floats(const std::string& path, at::IntArrayRef shape) {
  std::ifstream f(path, std::ios::binary);
  auto t = torch::empty(shape, torch::kFloat);
  f.read(reinterpret_cast<char*>(t.data_ptr<float>()), t.numel() * sizeof(float));
  EXPECT_TRUE(bool(f)) << "short read of " << path;
  return t;
}

std::unique_ptr<train::optim::FusedOptimizer> make(const std::string& name, const std::vector<torch::Tensor>& ps,
                                                   double lr) {
  using namespace train::optim;
  if (name == "sgd") {
    return std::make_unique<FusedSGD>(ps, torch::optim::SGDOptions(lr).momentum(0.9).nesterov(true).weight_decay(5e-4));
  }
  if (name == "adam") return std::make_unique<FusedAdam>(ps, torch::optim::AdamOptions(lr).weight_decay(1e-2));
  return std::make_unique<FusedAdamW>(
      ps, torch::optim::AdamWOptions(lr).weight_decay(1e-2).amsgrad(name == "adamw-amsgrad"));
}

const std::vector<std::vector<int64_t>> kShapes = {{16, 3, 3, 3}, {16}, {10, 64}};

void compare_with_python(const std::string& name, const std::string& device) {
  const std::string py = train::test::venv_python();
  ASSERT_FALSE(py.empty()) << "the venv's python with torch is needed for this test; run scripts/setup.sh";
  const int steps = 6;
  train::test::TempDir d("fused");
  auto r = train::test::run_program({py, std::string(TRAIN_SOURCE_DIR) + "/tests/libtrain/py/fused_reference.py",
                                     d.path(), name, std::to_string(steps), device});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<torch::Tensor> params;
  for (size_t i = 0; i < kShapes.size(); ++i) {
    params.push_back(
        read_floats(d.file("param" + std::to_string(i) + ".bin"), kShapes[i]).to(device).requires_grad_(true));
  }
  const train::LrSchedule schedule = train::warmup_cosine(2);
  const train::ScheduleContext run{0.05, steps, steps};
  auto opt = make(name, params, schedule.rate(0, run));
  for (int k = 0; k < steps; ++k) {
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].mutable_grad() =
          read_floats(d.file("grad" + std::to_string(i) + "_" + std::to_string(k) + ".bin"), kShapes[i]).to(device);
    }
    opt->step();
    for (auto& group : opt->param_groups()) group.options().set_lr(schedule.rate(k + 1, run));
    opt->sync_lr();
  }
  for (size_t i = 0; i < params.size(); ++i) {
    auto want = read_floats(d.file("result" + std::to_string(i) + ".bin"), kShapes[i]);
    auto got = params[i].detach().cpu();
    // The same ATen kernel on the same inputs and rates: bit-identical.
    EXPECT_TRUE(torch::equal(got, want)) << name << " on " << device << ", param " << i << ": max abs diff "
                                         << (got - want).abs().max().item<float>();
  }
}

}  // namespace

TEST(FusedOptimizers, MatchPythonFusedOnTheCpu) {
  for (const char* name : {"sgd", "adam", "adamw", "adamw-amsgrad"}) compare_with_python(name, "cpu");
}

TEST(FusedOptimizers, MatchPythonFusedOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device here: the CUDA half runs on the GPU machine";
  for (const char* name : {"sgd", "adam", "adamw", "adamw-amsgrad"}) compare_with_python(name, "cuda");
}

// A checkpoint in the middle: the loaded optimizer continues bit for bit (step counts included).
TEST(FusedOptimizers, SaveAndLoadContinueExactly) {
  for (const char* name : {"sgd", "adam", "adamw-amsgrad"}) {
    torch::manual_seed(7);
    std::vector<torch::Tensor> a, b;
    for (const auto& s : kShapes) a.push_back(torch::randn(s).requires_grad_(true));
    for (const auto& t : a) b.push_back(t.detach().clone().requires_grad_(true));
    auto opt_a = make(name, a, 0.01);
    auto grads = [](int k, const torch::Tensor& p) { return torch::sin(p.detach() * (k + 1)) * 0.1; };
    for (int k = 0; k < 3; ++k) {
      for (auto& p : a) p.mutable_grad() = grads(k, p);
      opt_a->step();
    }
    std::stringstream saved;
    {
      torch::serialize::OutputArchive out;
      opt_a->save(out);
      out.save_to(saved);
    }
    for (size_t i = 0; i < a.size(); ++i) b[i].detach().copy_(a[i].detach());
    auto opt_b = make(name, b, 0.01);
    torch::serialize::InputArchive in;
    in.load_from(saved);
    opt_b->load(in);
    for (int k = 3; k < 6; ++k) {
      for (auto& p : a) p.mutable_grad() = grads(k, p);
      for (auto& p : b) p.mutable_grad() = grads(k, p);
      opt_a->step();
      opt_b->step();
    }
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << name << ", param " << i;
  }
}

TEST(FusedOptimizers, RejectBadOptions) {
  std::vector<torch::Tensor> p{torch::zeros({2}, torch::requires_grad())};
  using namespace train::optim;
  EXPECT_THROW(FusedSGD(p, torch::optim::SGDOptions(-1)), train::ConfigError);
  EXPECT_THROW(FusedSGD(p, torch::optim::SGDOptions(0.1).nesterov(true)), train::ConfigError);  // no momentum
  EXPECT_THROW(FusedAdamW(p, torch::optim::AdamWOptions(0.1).betas({0.9, 1.0})), train::ConfigError);
  EXPECT_THROW(FusedAdam(p, torch::optim::AdamOptions(0.1).eps(-1)), train::ConfigError);
}

// The rate on the CPU never goes to the device: a captured step can't follow it there.
TEST(FusedOptimizers, RateStaysOnTheHostOnTheCpu) {
  std::vector<torch::Tensor> p{torch::ones({3}, torch::requires_grad())};
  train::optim::FusedAdamW opt(p, torch::optim::AdamWOptions(0.1));
  p[0].mutable_grad() = torch::ones({3});
  opt.step();
  EXPECT_FALSE(opt.lr_on_device());
}

TEST(Schedules, OneCycleMatchesTorchOneCycleLR) {
  const std::string py = train::test::venv_python();
  ASSERT_FALSE(py.empty()) << "the venv's python with torch is needed for this test; run scripts/setup.sh";
  for (int64_t total : {10, 37}) {
    auto r = train::test::run_program({py, std::string(TRAIN_SOURCE_DIR) + "/tests/libtrain/py/schedule_reference.py",
                                       "0.1", std::to_string(total), "0.3", "25", "10000"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::istringstream lines(r.out);
    const train::LrSchedule s = train::one_cycle(0.3, 25, 1e4);
    const train::ScheduleContext run{0.1, total, total};
    int64_t step = 0;
    for (std::string line; std::getline(lines, line); ++step) {
      EXPECT_EQ(s.rate(step, run), std::stod(line)) << "total " << total << ", step " << step;
    }
    EXPECT_EQ(step, total);
  }
}

TEST(Schedules, WarmupCosineAndLinearShapes) {
  const train::ScheduleContext run{0.2, 100, 25};
  for (const train::LrSchedule& s : {train::warmup_cosine(10, 0.1), train::linear_decay(10, 0.1)}) {
    EXPECT_EQ(s.every, train::LrSchedule::Every::step);
    EXPECT_EQ(s.rate(0, run), 0.0) << s.description;
    EXPECT_DOUBLE_EQ(s.rate(5, run), 0.1) << s.description;
    EXPECT_DOUBLE_EQ(s.rate(10, run), 0.2) << s.description;
    EXPECT_DOUBLE_EQ(s.rate(100, run), 0.02) << s.description;
    EXPECT_DOUBLE_EQ(s.rate(500, run), 0.02) << s.description;  // past the end: the final rate
    for (int64_t k = 10; k < 100; ++k) EXPECT_GT(s.rate(k, run), s.rate(k + 1, run)) << s.description << " at " << k;
  }
  EXPECT_THROW(train::warmup_cosine(-1), train::ConfigError);
  EXPECT_THROW(train::linear_decay(0, 2.0), train::ConfigError);
  EXPECT_THROW(train::one_cycle(1.5), train::ConfigError);
}
