// The non-finite watch (libtrain/src/nonfinite.h) on its own: the eager note names the first step
// and the gradient that held a NaN; in a CUDA graph, the note captured with the step names the
// same step from its device counter, across an eager step in between (the counter is set again)
// and a second capture. On CUDA the note is one kernel of libtrain's own: it notes the same codes
// as the ATen ops on the same inputs, eagerly and in a graph's replays. The GPU tests need a CUDA
// GPU and say so when they skip.
#include "stops/nonfinite.h"

#include "gpu_count.h"
#include "step/grad_clip.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace {

using train::detail::NonFiniteWatch;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

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

// Parameters of every dtype the kernel reads: a float one whose gradient is transposed (dense but
// not contiguous), a half one, one without a gradient, a bfloat16, a double, a float one of
// several blocks; then `extra` small ones (over 96: more gradients than one launch holds).
struct Mixed : torch::nn::Module {
  Mixed(const at::Device& dev, int extra) {
    add("w", {3, 2}, at::kFloat, dev).mutable_grad() = torch::zeros({2, 3}, opts(at::kFloat, dev)).t();
    add("h", {5}, at::kHalf, dev);
    register_parameter("frozen", torch::zeros({3}, opts(at::kFloat, dev)));
    add("bf", {4}, at::kBFloat16, dev);
    add("d", {3}, at::kDouble, dev);
    add("big", {5000}, at::kFloat, dev);
    for (int i = 0; i < extra; ++i) add("p" + std::to_string(i), {2}, at::kFloat, dev);
  }
  static at::TensorOptions opts(at::ScalarType t, const at::Device& dev) {
    return torch::TensorOptions().dtype(t).device(dev);
  }
  at::Tensor& add(const std::string& name, at::IntArrayRef shape, at::ScalarType t, const at::Device& dev) {
    at::Tensor& p = register_parameter(name, torch::zeros(shape, opts(t, dev)));
    p.mutable_grad() = torch::zeros_like(p);
    return p;
  }
  at::Tensor grad(const std::string& name) { return named_parameters()[name].grad(); }
  int64_t with_grad() { return static_cast<int64_t>(parameters().size()) - 1; }
};

// What a case changes, in place: a captured graph reads the same memory at every replay.
struct Inputs {
  Mixed& model;
  at::Tensor loss;   // a scalar of the run's loss dtype
  at::Tensor norms;  // the clipping's norms, in the clipping's cases
  void reset() {     // every value finite
    for (const auto& p : model.parameters()) {
      if (p.grad().defined()) p.grad().fill_(0.25);
    }
    loss.fill_(0.5);
    if (norms.defined()) norms.fill_(1.0);
  }
};

// Sets t's last element to v, converted as a copy converts (a double beyond float's range becomes
// an infinite float, where fill_ would refuse it).
void put_last(at::Tensor t, double v) {
  while (t.dim() > 0) t = t.select(0, t.size(0) - 1);
  t.copy_(torch::full({}, v, torch::TensorOptions().dtype(at::kDouble)));
}

struct Case {
  std::string name;
  std::function<void(Inputs&)> change;
  bool clip = false;
  at::ScalarType norms = at::kFloat;  // the clipping's norms' dtype
};

std::vector<Case> value_cases() {
  return {
      {"all finite", [](Inputs&) {}},
      {"a NaN loss", [](Inputs& in) { in.loss.fill_(kNaN); }},
      {"an infinite loss", [](Inputs& in) { in.loss.fill_(-kInf); }},
      {"a loss beyond float's range", [](Inputs& in) { put_last(in.loss, 1e300); }},
      {"a NaN amid a gradient of several blocks", [](Inputs& in) { in.model.grad("big")[2500] = kNaN; }},
      {"1e30s in a float gradient: its sum of squares overflows",
       [](Inputs& in) { in.model.grad("big").fill_(1e30); }},
      {"1e18s in a float gradient: its sum of squares stays finite",
       [](Inputs& in) { in.model.grad("w").fill_(1e18); }},
      {"a half gradient whose norm is over half's largest", [](Inputs& in) { in.model.grad("h").fill_(60000); }},
      {"a half gradient whose norm is under half's largest", [](Inputs& in) { in.model.grad("h").fill_(20000); }},
      {"1e30s in a bfloat16 gradient", [](Inputs& in) { in.model.grad("bf").fill_(1e30); }},
      {"1e20s in a double gradient: a norm float holds", [](Inputs& in) { in.model.grad("d").fill_(1e20); }},
      {"1e200s in a double gradient: a norm beyond float", [](Inputs& in) { in.model.grad("d").fill_(1e200); }},
      {"two bad gradients: the first", [](Inputs& in) {
         put_last(in.model.grad("h"), kInf);
         in.model.grad("big")[0] = kNaN;
       }},
      {"a bad loss and a bad gradient: the loss", [](Inputs& in) {
         in.loss.fill_(kNaN);
         in.model.grad("d")[1] = kNaN;
       }},
  };
}

// The clipping's norms stand for the gradients (the watch reads them instead).
std::vector<Case> clip_cases() {
  return {
      {"clipping: finite norms", [](Inputs&) {}, true},
      {"clipping: a NaN norm", [](Inputs& in) { put_last(in.norms, kNaN); }, true},
      {"clipping: an infinite half norm", [](Inputs& in) { in.norms[1] = kInf; }, true, at::kHalf},
      {"clipping: a double norm beyond float", [](Inputs& in) { in.norms[2] = 1e200; }, true, at::kDouble},
      {"clipping: a NaN gradient, its norm finite", [](Inputs& in) { in.model.grad("big")[7] = kNaN; }, true},
      {"clipping: a NaN loss and a NaN norm", [](Inputs& in) {
         in.loss.fill_(kNaN);
         in.norms[0] = kNaN;
       }, true},
  };
}

// Two watches of one model: one notes with the kernel, the other with the ATen ops.
struct Pair {
  Pair(Mixed& m, const at::Device& dev, const train::detail::GradClip* clip)
      : kernel(stop_config(), m, dev, 0, 1), aten(stop_config(), m, dev, 0, 1) {
    aten.allow_kernel(false);
    if (clip != nullptr) {
      kernel.share_norms(clip);
      aten.share_norms(clip);
    }
  }
  void step(const at::Tensor& loss, int64_t step, at::cuda::CUDAGraph* graph) {
    kernel.step_begins(step);
    aten.step_begins(step);
    if (graph != nullptr) {
      kernel.before_replay();
      aten.before_replay();
      graph->replay();
    } else {
      kernel.after_step(loss, step);
      aten.after_step(loss, step);
    }
  }
  void expect_same(const std::string& what) {
    EXPECT_TRUE(kernel.last_note_fused()) << what << ": the kernel didn't run";
    EXPECT_FALSE(aten.last_note_fused()) << what;
    EXPECT_EQ(kernel.first_code(), aten.first_code()) << what;
  }
  NonFiniteWatch kernel, aten;
};

// One case on a fresh model: a step with every value finite, an eager one, the case's step, then
// the case with a NaN loss (a code already noted stays). Eager steps, or a captured graph's
// replays around the eager step (which sets the device counter again), as the trainer runs them.
void run_case(const Case& c, at::ScalarType loss_dtype, int extra, bool graph) {
  const at::Device dev(at::kCUDA, 0);
  auto model = std::make_shared<Mixed>(dev, extra);
  Inputs in{*model, torch::zeros({}, Mixed::opts(loss_dtype, dev)), at::Tensor()};
  train::detail::GradClip clip;
  if (c.clip) clip.norms = in.norms = torch::ones({model->with_grad()}, Mixed::opts(c.norms, dev));
  Pair pair(*model, dev, c.clip ? &clip : nullptr);
  in.reset();
  std::unique_ptr<at::cuda::CUDAGraph> g;
  if (graph) {
    g = std::make_unique<at::cuda::CUDAGraph>();
    c10::cuda::getCurrentCUDAStream().synchronize();
    g->capture_begin();
    pair.kernel.note_in_capture(in.loss);
    pair.aten.note_in_capture(in.loss);
    g->capture_end();
  }
  const std::string what = c.name + " (a " + c10::toString(loss_dtype) + " loss, " +
                           std::to_string(model->with_grad()) + " gradients, " + (graph ? "replays" : "eager") +
                           "), step ";
  auto step = [&](int64_t s, at::cuda::CUDAGraph* on) {
    pair.step(in.loss, s, on);
    pair.expect_same(what + std::to_string(s));
  };
  step(10, g.get());
  step(11, nullptr);
  c.change(in);
  step(12, g.get());
  in.loss.fill_(kNaN);
  step(13, g.get());
}

// Every case with each loss dtype; then, on a model with more gradients than one launch holds,
// bad gradients in either launch.
void run_cases(bool graph) {
  std::vector<Case> all = value_cases();
  for (const Case& c : clip_cases()) all.push_back(c);
  const Mixed names(at::kCPU, 0);
  for (const auto& item : names.named_parameters()) {
    if (!item.value().grad().defined()) continue;
    all.push_back({"an infinity in gradient " + item.key(),
                   [name = item.key()](Inputs& in) { put_last(in.model.grad(name), kInf); }});
  }
  for (const at::ScalarType loss_dtype : {at::kFloat, at::kDouble, at::kBFloat16}) {
    for (const Case& c : all) run_case(c, loss_dtype, /*extra=*/0, graph);
  }
  constexpr int kExtra = 120;
  std::vector<Case> many = value_cases();
  for (const int i : {0, kExtra / 2, kExtra - 1}) {
    const std::string name = "p" + std::to_string(i);
    many.push_back({"a NaN in gradient " + name, [name](Inputs& in) { put_last(in.model.grad(name), kNaN); }});
  }
  many.push_back({"bad gradients in both launches: the first", [](Inputs& in) {
                    in.model.grad("p10")[0] = kInf;
                    in.model.grad("p" + std::to_string(kExtra - 1))[1] = kNaN;
                  }});
  for (const Case& c : many) run_case(c, at::kFloat, kExtra, graph);
}

// Why a kernel test can't run here, or empty.
std::string kernel_missing() {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 1) return "needs a CUDA GPU, found " + std::to_string(gpus) + ": run it on a GPU node (docs/gpu.md)";
  Fixture f(at::Device(at::kCUDA, 0));
  if (!NonFiniteWatch(stop_config(), *f.model, f.loss.device(), 0, 1).kernel_ready()) {
    return "this build has no CUDA kernels of libtrain's own (no CUDA compiler at configure time)";
  }
  return "";
}

TEST(NonFiniteWatch, TheKernelNotesWhatTheAtenOpsNoteEagerly) {
  const std::string missing = kernel_missing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  c10::cuda::CUDAGuard guard(at::Device(at::kCUDA, 0));
  run_cases(/*graph=*/false);
}

TEST(NonFiniteWatch, TheKernelNotesWhatTheAtenOpsNoteInACudaGraph) {
  const std::string missing = kernel_missing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  c10::cuda::CUDAGuard guard(at::Device(at::kCUDA, 0));
  c10::cuda::CUDAStreamGuard on(c10::cuda::getStreamFromPool(false, 0));  // capture needs a non-default stream
  run_cases(/*graph=*/true);
}

}  // namespace
