// The choice between the CUDA-graph step and the eager step (libtrain/src/step_choice.cpp): an
// optimizer whose step reads host state is never captured, and the reason is given. Pure
// decisions: they run on any CPU, no GPU needed.
#include "step/step_choice.h"

#include "train/adadelta.h"
#include "train/fused_optim.h"

#include <gtest/gtest.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/torch.h>

#include <memory>

using train::detail::capture_refusal;
using train::Precision;
using train::Switch;
using train::detail::choose_step;

namespace {

std::vector<at::Tensor> params() { return {torch::zeros({3}, torch::requires_grad())}; }

// A user's own optimizer: libtrain can't know what its step reads.
class MyOptimizer : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
};

}  // namespace

TEST(StepChoice, CapturesOnlyOptimizersWhoseStateLivesOnTheDevice) {
  EXPECT_EQ(capture_refusal(train::optim::Adadelta(params())), "");
  EXPECT_EQ(capture_refusal(train::optim::FusedSGD(params(), torch::optim::SGDOptions(0.1).momentum(0.9))), "");
  EXPECT_EQ(capture_refusal(train::optim::FusedAdam(params())), "");
  EXPECT_EQ(capture_refusal(train::optim::FusedAdamW(params())), "");
  EXPECT_EQ(capture_refusal(torch::optim::SGD(params(), torch::optim::SGDOptions(0.1).momentum(0.9))), "");

  const std::string adamw = capture_refusal(torch::optim::AdamW(params()));
  EXPECT_NE(adamw.find("torch::optim::AdamW"), std::string::npos) << adamw;
  EXPECT_NE(adamw.find("bias correction"), std::string::npos) << adamw;
  EXPECT_NE(adamw.find("train::optim::FusedAdamW"), std::string::npos) << adamw;  // the way out
  const std::string adam = capture_refusal(torch::optim::Adam(params()));
  EXPECT_NE(adam.find("torch::optim::Adam "), std::string::npos) << adam;
  EXPECT_NE(capture_refusal(torch::optim::Adagrad(params())).find("Adagrad"), std::string::npos);
  EXPECT_NE(capture_refusal(torch::optim::LBFGS(params())).find("closure"), std::string::npos);
  // Unknown to libtrain, even a subclass of a safe one: its step() may read host state.
  const std::string rms = capture_refusal(torch::optim::RMSprop(params()));
  EXPECT_NE(rms.find("RMSprop"), std::string::npos) << rms;
  const std::string mine = capture_refusal(MyOptimizer(params(), torch::optim::SGDOptions(0.1)));
  EXPECT_NE(mine.find("MyOptimizer"), std::string::npos) << mine;
  EXPECT_NE(mine.find("not an optimizer libtrain knows"), std::string::npos) << mine;
}

// --cuda-graph on with AdamW: eager, and a warning that says why; auto: eager with an info line.
TEST(StepChoice, HostStateOptimizerFallsBackToEagerAndSaysWhy) {
  torch::optim::AdamW adamw(params());
  for (Switch flag : {Switch::on, Switch::automatic}) {
    auto c = choose_step(/*cuda=*/true, flag, /*lr_every_step=*/false, adamw);
    EXPECT_FALSE(c.graph) << train::choice_name(flag);
    EXPECT_NE(c.why_eager.find("bias correction"), std::string::npos) << c.why_eager;
    EXPECT_EQ(c.warn, flag == Switch::on);
  }
  // The fused AdamW, per-step schedule and all: captured.
  train::optim::FusedAdamW fused(params());
  EXPECT_TRUE(choose_step(true, Switch::on, /*lr_every_step=*/true, fused).graph);
  train::optim::Adadelta adadelta(params());
  auto g = choose_step(true, Switch::automatic, false, adadelta);
  EXPECT_TRUE(g.graph);
  EXPECT_EQ(g.why_eager, "");
  // A per-step schedule stays in the graph where the optimizer reads its rate from the device
  // (Adadelta, the fused ones); torch::optim::SGD bakes it in: eager, naming the fix.
  EXPECT_TRUE(choose_step(true, Switch::on, /*lr_every_step=*/true, adadelta).graph);
  torch::optim::SGD sgd(params(), torch::optim::SGDOptions(0.1));
  auto s = choose_step(true, Switch::on, /*lr_every_step=*/true, sgd);
  EXPECT_FALSE(s.graph);
  EXPECT_NE(s.why_eager.find("every step"), std::string::npos) << s.why_eager;
  EXPECT_NE(s.why_eager.find("FusedSGD"), std::string::npos) << s.why_eager;
  EXPECT_TRUE(choose_step(true, Switch::automatic, /*lr_every_step=*/false, sgd).graph);
  // Nobody asked for a graph: eager, nothing to explain.
  for (auto c : {choose_step(false, Switch::automatic, false, adamw), choose_step(true, Switch::off, false, adamw)}) {
    EXPECT_FALSE(c.graph);
    EXPECT_EQ(c.why_eager, "");
  }
}

// --precision auto never switches a user's model to bf16 unasked: only a spec that sets
// auto_bf16_batch (the built-in MNIST recipe) gets bf16, from that batch up, on a GPU with bf16.
TEST(StepChoice, PrecisionAutoIsBf16OnlyWhereTheSpecAsks) {
  using train::detail::resolve_precision;
  // A user's spec: fp32 at any batch, and the log says how to ask for more.
  for (int64_t batch : {64, 512, 4096}) {
    auto p = resolve_precision(/*cuda=*/true, /*bf16_supported=*/true, Precision::automatic, std::nullopt, batch);
    EXPECT_EQ(p.precision, Precision::fp32) << batch;
    EXPECT_NE(p.why.find("auto_bf16_batch"), std::string::npos) << p.why;
  }
  // The MNIST recipe's threshold.
  EXPECT_EQ(resolve_precision(true, true, Precision::automatic, int64_t{512}, 512).precision, Precision::bf16);
  EXPECT_EQ(resolve_precision(true, true, Precision::automatic, int64_t{512}, 511).precision, Precision::fp32);
  EXPECT_EQ(resolve_precision(true, /*bf16_supported=*/false, Precision::automatic, int64_t{512}, 1024).precision, Precision::fp32);
  // The flag wins; the CPU is fp32.
  EXPECT_EQ(resolve_precision(true, true, Precision::bf16, std::nullopt, 64).precision, Precision::bf16);
  EXPECT_EQ(resolve_precision(true, true, Precision::tf32, int64_t{512}, 1024).precision, Precision::tf32);
  EXPECT_EQ(resolve_precision(false, false, Precision::automatic, int64_t{512}, 4096).precision, Precision::fp32);
}
