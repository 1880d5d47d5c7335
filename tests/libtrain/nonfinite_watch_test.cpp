// The non-finite watch (libtrain/src/nonfinite.h) on its own: the eager note names the first step
// and the gradient that held a NaN; in a CUDA graph, the note captured with the step names the
// same step from its device counter, across an eager step in between (the counter is set again)
// and a second capture. The graph test needs a CUDA GPU and says so when it skips.
#include "nonfinite.h"

#include "gpu_count.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <limits>

namespace {

using train::detail::NonFiniteWatch;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A model of two parameters with gradients set by hand: "a.weight" [3, 2] and "a.bias" [3].
struct Fixture {
  explicit Fixture(const at::Device& device) : model(torch::nn::LinearOptions(2, 3)) {
    model->to(device);
    for (auto& p : model->parameters()) p.mutable_grad() = torch::zeros_like(p);
    loss = torch::zeros({}, torch::TensorOptions().device(device));
  }
  torch::nn::Linear model;
  at::Tensor loss;
};

train::TrainConfig stop_config() {
  train::TrainConfig c;
  c.run.nonfinite = train::NonFinite::stop;
  return c;
}

TEST(NonFiniteWatch, TheEagerNoteNamesTheFirstStepAndTheGradient) {
  Fixture f(at::kCPU);
  NonFiniteWatch watch(stop_config(), *f.model, at::kCPU, 0, 1);
  for (int64_t step = 1; step <= 5; ++step) {
    watch.step_begins(step);
    if (step >= 3) f.model->bias.mutable_grad()[1] = kNaN;  // from step 3 on
    watch.after_step(f.loss, step);
  }
  EXPECT_EQ(watch.flag().item<int64_t>(), 1);
  const std::string why = watch.describe(1, nullptr);
  EXPECT_NE(why.find("the gradient of parameter 'bias' at step 3"), std::string::npos) << why;
}

TEST(NonFiniteWatch, TheNoteInACudaGraphNamesTheReplaysOwnStep) {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 1) GTEST_SKIP() << "needs a CUDA GPU, found " << gpus << ": run it on a GPU node (docs/gpu.md)";
  const at::Device dev(at::kCUDA, 0);
  c10::cuda::CUDAGuard guard(dev);
  c10::cuda::CUDAStreamGuard on(c10::cuda::getStreamFromPool(false, 0));  // capture needs a non-default stream
  Fixture f(dev);
  NonFiniteWatch watch(stop_config(), *f.model, dev, 0, 1);
  auto capture = [&] {
    auto g = std::make_unique<at::cuda::CUDAGraph>();
    c10::cuda::getCurrentCUDAStream().synchronize();
    g->capture_begin();
    watch.note_in_capture(f.loss);
    g->capture_end();
    return g;
  };
  auto graph = capture();
  auto replay = [&](int64_t step) {
    watch.step_begins(step);
    watch.before_replay();
    graph->replay();
    EXPECT_TRUE(watch.noted_in_graph());
  };
  replay(10);
  replay(11);
  watch.step_begins(12);  // an eager step (e.g. the epoch's last, smaller batch)
  watch.after_step(f.loss, 12);
  EXPECT_FALSE(watch.noted_in_graph());
  graph = capture();  // captured again (a new rate): the counter is set at the next replay
  replay(13);
  EXPECT_EQ(watch.flag().item<int64_t>(), 0) << "all finite so far";
  f.model->weight.mutable_grad()[2][1] = kNaN;
  replay(14);
  replay(15);
  EXPECT_EQ(watch.flag().item<int64_t>(), 1);
  const std::string why = watch.describe(1, nullptr);
  EXPECT_NE(why.find("the gradient of parameter 'weight' at step 14"), std::string::npos) << why;
  // The loss before any gradient, at the step it turned: a fresh watch, the NaN in the loss.
  NonFiniteWatch second(stop_config(), *f.model, dev, 0, 1);
  f.model->weight.mutable_grad().zero_();
  auto g2 = std::make_unique<at::cuda::CUDAGraph>();
  c10::cuda::getCurrentCUDAStream().synchronize();
  g2->capture_begin();
  second.note_in_capture(f.loss);
  g2->capture_end();
  for (int64_t step = 20; step <= 22; ++step) {
    if (step == 21) f.loss.fill_(kNaN);
    second.step_begins(step);
    second.before_replay();
    g2->replay();
  }
  const std::string why2 = second.describe(1, nullptr);
  EXPECT_NE(why2.find("the loss at step 21"), std::string::npos) << why2;
}

}  // namespace
