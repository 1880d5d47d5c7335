// The fused optimizers (train/fused_optim.h) against Python's fused=True on the same inputs under
// the same per-step warm-up + cosine rate; their checkpoints; the built-in schedules against
// torch.optim.lr_scheduler; FusedAdam(W)'s update bucket by bucket (a captured multi-GPU step's)
// against the whole step.
#include "optim/fused_adam_buckets.h"
#include "test_util.h"
#include "train/base/error.h"
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

// What a captured step on several GPUs does with FusedAdam(W) (libtrain/src/fused_adam_buckets.h):
// the step counts advanced once, then each gradient bucket updated on its own, in any order and
// across parameter groups, gives step()'s bits. Run on the CPU (ATen's CPU fused kernels, rates
// exact in float: the bucket path reads the rate from a float tensor, step() on the CPU a double),
// and on CUDA where a GPU is present.
void buckets_equal_step(const std::string& name, const torch::Device& device) {
  using train::details::FusedAdamBuckets;
  torch::manual_seed(11);
  std::vector<torch::Tensor> a, b;
  for (const auto& s : kShapes) a.push_back(torch::randn(s).to(device).requires_grad_(true));
  for (const auto& t : a) b.push_back(t.detach().clone().requires_grad_(true));
  // Two groups: decay and a rate on the first, another rate and no decay on the second.
  auto groups = [&](const std::vector<torch::Tensor>& ps) {
    using torch::optim::AdamOptions, torch::optim::AdamWOptions;
    std::vector<torch::optim::OptimizerParamGroup> out;
    const std::vector<torch::Tensor> first{ps[0], ps[1]}, second{ps[2]};
    if (name == "adam") {
      out.emplace_back(first, std::make_unique<AdamOptions>(AdamOptions(0.015625).weight_decay(0.0078125)));
      out.emplace_back(second, std::make_unique<AdamOptions>(0.03125));
    } else {
      out.emplace_back(first, std::make_unique<AdamWOptions>(AdamWOptions(0.015625).weight_decay(0.0078125)));
      out.emplace_back(second, std::make_unique<AdamWOptions>(AdamWOptions(0.03125).weight_decay(0)));
    }
    return out;
  };
  std::unique_ptr<torch::optim::Optimizer> opt_a, opt_b;
  if (name == "adam") {
    opt_a = std::make_unique<train::optim::FusedAdam>(groups(a));
    opt_b = std::make_unique<train::optim::FusedAdam>(groups(b));
  } else {
    opt_a = std::make_unique<train::optim::FusedAdamW>(groups(a));
    opt_b = std::make_unique<train::optim::FusedAdamW>(groups(b));
  }
  auto grads = [](int k, const torch::Tensor& p) { return torch::sin(p.detach() * (k + 1)) * 0.1; };
  for (int k = 0; k < 5; ++k) {
    for (auto& p : a) p.mutable_grad() = grads(k, p);
    for (auto& p : b) p.mutable_grad() = grads(k, p);
    opt_a->step();
    if (k == 0) {
      opt_b->step();  // the state and the rates come from an eager step first
      continue;
    }
    FusedAdamBuckets::advance_steps(*opt_b, b);
    FusedAdamBuckets::update(*opt_b, {b[2], b[0]});  // a bucket across both groups
    FusedAdamBuckets::update(*opt_b, {b[1]});
  }
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i], b[i])) << name << " on " << device << ", param " << i;
    using State = train::optim::FusedAdamParamState;
    const auto& sa = static_cast<const State&>(*opt_a->state().at(a[i].unsafeGetTensorImpl()));
    const auto& sb = static_cast<const State&>(*opt_b->state().at(b[i].unsafeGetTensorImpl()));
    EXPECT_TRUE(torch::equal(sa.exp_avg(), sb.exp_avg()) && torch::equal(sa.exp_avg_sq(), sb.exp_avg_sq()) &&
                torch::equal(sa.step(), sb.step()))
        << name << " on " << device << ", the state of param " << i;
  }
  // A caller's kernel gets one group's tensors and options, never a mix.
  std::vector<FusedAdamBuckets::Tensors> tensors;
  EXPECT_FALSE(FusedAdamBuckets::describe(*opt_b, {b[0], b[2]}, &tensors).has_value());
  const auto hyper = FusedAdamBuckets::describe(*opt_b, {b[1], b[0]}, &tensors);
  ASSERT_TRUE(hyper.has_value());
  EXPECT_EQ(hyper->decoupled, name == "adamw");
  EXPECT_EQ(hyper->weight_decay, 0.0078125);
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_TRUE(tensors[0].param.is_same(b[1]));
  EXPECT_EQ(hyper->lr.item<double>(), 0.015625);
}

TEST(FusedOptimizers, BucketByBucketUpdatesGiveTheStepsBits) {
  for (const char* name : {"adam", "adamw"}) buckets_equal_step(name, torch::kCPU);
  if (!torch::cuda::is_available()) {
    std::printf("[CUDA] not run: no CUDA GPU here (the CPU's kernels ran)\n");
    return;
  }
  for (const char* name : {"adam", "adamw"}) buckets_equal_step(name, torch::kCUDA);
}

// Where the bucket-by-bucket update applies: FusedAdam(W) over CUDA parameters with state and a
// rate on the device; elsewhere it says why.
TEST(FusedOptimizers, BucketByBucketUpdatesSayWhyTheyDontApply) {
  using train::details::FusedAdamBuckets;
  std::vector<torch::Tensor> p{torch::ones({4}, torch::requires_grad())};
  std::string why;
  train::optim::FusedSGD sgd(p, torch::optim::SGDOptions(0.1));
  EXPECT_FALSE(FusedAdamBuckets::applies(sgd, p, &why));
  EXPECT_NE(why.find("not a FusedAdam or FusedAdamW"), std::string::npos) << why;
  train::optim::FusedAdamW adamw(p, torch::optim::AdamWOptions(0.1));
  EXPECT_FALSE(FusedAdamBuckets::applies(adamw, p, &why));
  EXPECT_NE(why.find("not a dense float32 CUDA tensor"), std::string::npos) << why;
  std::vector<torch::Tensor> other{torch::ones({4}, torch::requires_grad())};
  EXPECT_FALSE(FusedAdamBuckets::applies(adamw, other, &why));
  EXPECT_NE(why.find("trains a tensor that the step does not average"), std::string::npos) << why;
  EXPECT_FALSE(FusedAdamBuckets::applies(adamw, {other[0], p[0]}, &why));
  EXPECT_NE(why.find("is not the optimizer's"), std::string::npos) << why;
  // A tensor trained beside the averaged parameters (step() would update it): not bucket by
  // bucket. A frozen one (no gradient ever) is no obstacle.
  const torch::Tensor extra = torch::zeros({2}, torch::requires_grad());
  const torch::Tensor frozen = torch::zeros({2});
  train::optim::FusedAdamW with_extra(std::vector<torch::Tensor>{p[0], extra}, torch::optim::AdamWOptions(0.1));
  EXPECT_FALSE(train::details::updates_only(with_extra, p));
  train::optim::FusedAdamW with_frozen(std::vector<torch::Tensor>{p[0], frozen}, torch::optim::AdamWOptions(0.1));
  EXPECT_TRUE(train::details::updates_only(with_frozen, p));
  EXPECT_TRUE(train::details::updates_only(with_extra, {extra, p[0]}));
  EXPECT_FALSE(FusedAdamBuckets::applies(with_frozen, p, &why));
  EXPECT_NE(why.find("not a dense float32 CUDA tensor"), std::string::npos) << why << " (past the check above)";
  train::optim::FusedAdamW amsgrad(p, torch::optim::AdamWOptions(0.1).amsgrad(true));
  p[0].mutable_grad() = torch::ones({4});
  amsgrad.step();
  std::vector<FusedAdamBuckets::Tensors> tensors;
  EXPECT_FALSE(FusedAdamBuckets::describe(amsgrad, p, &tensors).has_value()) << "no amsgrad in a caller's kernel";
  if (!torch::cuda::is_available()) {
    std::printf("[CUDA] the no-state-yet case not run: no CUDA GPU here\n");
    return;
  }
  std::vector<torch::Tensor> q{torch::ones({4}, torch::TensorOptions().device(torch::kCUDA)).requires_grad_(true)};
  train::optim::FusedAdamW fresh(q, torch::optim::AdamWOptions(0.1));
  EXPECT_FALSE(FusedAdamBuckets::applies(fresh, q, &why));
  EXPECT_NE(why.find("no eager step before"), std::string::npos) << why;
  q[0].mutable_grad() = torch::ones({4}, torch::TensorOptions().device(torch::kCUDA));
  fresh.step();
  EXPECT_TRUE(FusedAdamBuckets::applies(fresh, q, &why)) << why;
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
