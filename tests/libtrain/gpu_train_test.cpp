// GPU tests of the training step (label gpu): the step captured in a CUDA graph trains exactly like
// the eager step, and bf16 autocast reaches fp32's accuracy. Skip, saying why, without a GPU.
#include "gpu_count.h"
#include "run_helpers.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>

using train::test::bin;
using train::test::done_json;
using train::test::run_program;

namespace {

std::vector<std::string> gpu_args(std::vector<std::string> extra) {
  std::vector<std::string> a = {bin("train"), "--data", train::test::fashion_mnist_dir(), "--device", "cuda",
                                "--log-interval", "100"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace

// Same seed, same batches, deterministic cuDNN: the captured step (replayed ~180 times, captured
// again at the epoch boundary for the new learning rate) must land on the eager step's bits. With
// --augment crop,flip (random numbers drawn per batch) the batch is gathered outside the graph
// and must be the same draw as the eager step's.
TEST(TrainGpu, CudaGraphStepEqualsEagerStep) {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 1) GTEST_SKIP() << "needs a CUDA GPU, found " << gpus << ": run scripts/gpu-check.sh on a node with a GPU (docs/gpu.md)";
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, {"--augment", "crop,flip"}, {"--channels-last", "on"}}) {
    std::vector<std::string> common = {"--epochs", "2", "--limit-train-samples", "6000", "--limit-test-samples",
                                       "1000", "--no-dropout", "--deterministic", "--tf32", "off"};
    common.insert(common.end(), extra.begin(), extra.end());
    auto with = [&](const std::string& graph) {
      auto a = gpu_args(common);
      a.insert(a.end(), {"--cuda-graph", graph});
      return a;
    };
    auto eager = run_program(with("off"));
    ASSERT_EQ(eager.exit_code, 0) << eager.err;
    auto graph = run_program(with("on"));
    ASSERT_EQ(graph.exit_code, 0) << graph.err;
    EXPECT_NE(graph.err.find("training step: CUDA graph"), std::string::npos) << graph.err;
    EXPECT_EQ(graph.err.find("capturing the step failed"), std::string::npos) << graph.err;
    EXPECT_EQ(graph.err.find("batches gathered outside the graph") != std::string::npos,
              !extra.empty() && extra[0] == "--augment") << graph.err;
    EXPECT_NE(eager.err.find("training step: eager"), std::string::npos) << eager.err;
    const auto je = done_json(eager), jg = done_json(graph);
    std::printf("[graph vs eager]%s test_loss %.9f vs %.9f, sha %s vs %s\n",
                extra.empty() ? "" : (" " + extra[0] + " " + extra[1] + ":").c_str(),
                je["test_loss"].get<double>(), jg["test_loss"].get<double>(),
                je["params_sha256"].get<std::string>().c_str(), jg["params_sha256"].get<std::string>().c_str());
    EXPECT_EQ(jg["steps"], je["steps"]);
    EXPECT_EQ(jg["params_sha256"], je["params_sha256"]);
    EXPECT_EQ(jg["train_loss"], je["train_loss"]);
  }
}

// The fused optimizers keep their step counts and rates on the device: with a per-step warm-up +
// cosine schedule the step stays in the CUDA graph (the rate's device copy refreshed before each
// replay) and lands on the eager step's bits, for SGD (nesterov, weight decay), Adam and AdamW.
TEST(TrainGpu, FusedOptimizersWithPerStepScheduleGraphEqualsEager) {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 1) GTEST_SKIP() << "needs a CUDA GPU, found " << gpus << ": run scripts/gpu-check.sh on a node with a GPU (docs/gpu.md)";
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  for (const char* opt : {"sgd", "adam", "adamw"}) {
    auto with = [&](const std::string& graph) {
      std::vector<std::string> a = {"--epochs", "2", "--limit-train-samples", "3200", "--limit-test-samples", "1000",
                                    "--no-dropout", "--deterministic", "--tf32", "off", "--precision", "fp32",
                                    "--optimizer", opt, "--lr-schedule", "warmup-cosine", "--warmup-steps", "10",
                                    "--cuda-graph", graph};
      if (std::string(opt) == "sgd") a.insert(a.end(), {"--lr", "0.05", "--momentum", "0.9", "--nesterov"});
      return gpu_args(a);
    };
    auto eager = run_program(with("off"));
    ASSERT_EQ(eager.exit_code, 0) << eager.err;
    auto on = run_program(with("on"));
    ASSERT_EQ(on.exit_code, 0) << on.err;
    EXPECT_NE(on.err.find("training step: CUDA graph"), std::string::npos) << on.err;
    EXPECT_EQ(on.err.find("runs eagerly"), std::string::npos) << on.err;
    EXPECT_EQ(on.err.find("capturing the step failed"), std::string::npos) << on.err;
    const auto je = done_json(eager), jo = done_json(on);
    std::printf("[%s + warmup-cosine, --cuda-graph on vs off] sha %s vs %s, test_loss %.9f vs %.9f\n", opt,
                jo["params_sha256"].get<std::string>().c_str(), je["params_sha256"].get<std::string>().c_str(),
                jo["test_loss"].get<double>(), je["test_loss"].get<double>());
    EXPECT_EQ(jo["steps"], je["steps"]);
    EXPECT_EQ(jo["params_sha256"], je["params_sha256"]);
    EXPECT_EQ(jo["train_loss"], je["train_loss"]);
  }
}

// --accumulate-steps and --clip-grad-norm in the CUDA graph: the 4 micro-batches, the clipping
// (norm computed and applied on the device) and the update captured as one step land on the eager
// step's bits; 3000 samples leave each epoch a last, shorter step (16 + 16 + 16 + 8), run eagerly.
// Adadelta (its rate baked in), AdamW with a per-step cosine (its rate on the device), and random
// augmentation (micro-batches gathered outside the graph).
TEST(TrainGpu, AccumulationAndClippingGraphEqualsEager) {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 1) GTEST_SKIP() << "needs a CUDA GPU, found " << gpus << ": run scripts/gpu-check.sh on a node with a GPU (docs/gpu.md)";
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  const std::vector<std::string> accumulate = {"--batch-size", "16", "--accumulate-steps", "4"};
  const std::vector<std::string> clip = {"--clip-grad-norm", "0.5"};
  std::vector<std::string> both = accumulate;
  both.insert(both.end(), clip.begin(), clip.end());
  std::vector<std::string> adamw = both, augment = both;
  adamw.insert(adamw.end(), {"--optimizer", "adamw", "--lr-schedule", "warmup-cosine", "--warmup-steps", "10"});
  augment.insert(augment.end(), {"--augment", "crop,flip"});
  for (const std::vector<std::string>& extra : {accumulate, clip, both, adamw, augment}) {
    std::string name;
    for (const auto& e : extra) name += " " + e;
    auto with = [&](const std::string& graph) {
      std::vector<std::string> a = {"--epochs", "2", "--limit-train-samples", "3000", "--limit-test-samples", "1000",
                                    "--no-dropout", "--deterministic", "--tf32", "off", "--precision", "fp32",
                                    "--cuda-graph", graph};
      a.insert(a.end(), extra.begin(), extra.end());
      return gpu_args(a);
    };
    auto eager = run_program(with("off"));
    ASSERT_EQ(eager.exit_code, 0) << eager.err;
    auto graph = run_program(with("on"));
    ASSERT_EQ(graph.exit_code, 0) << graph.err;
    EXPECT_NE(graph.err.find("training step: CUDA graph"), std::string::npos) << graph.err;
    EXPECT_EQ(graph.err.find("capturing the step failed"), std::string::npos) << graph.err;
    EXPECT_EQ(graph.err.find("accumulated micro-batches of 16") != std::string::npos, extra[0] == "--batch-size")
        << graph.err;
    EXPECT_EQ(graph.err.find("gradients clipped in the graph") != std::string::npos, extra != accumulate) << graph.err;
    const auto je = done_json(eager), jg = done_json(graph);
    std::printf("[graph vs eager]%s: sha %s vs %s\n", name.c_str(), jg["params_sha256"].get<std::string>().c_str(),
                je["params_sha256"].get<std::string>().c_str());
    EXPECT_EQ(jg["steps"], je["steps"]) << name;
    EXPECT_EQ(jg["params_sha256"], je["params_sha256"]) << name;
    EXPECT_EQ(jg["train_loss"], je["train_loss"]) << name;
  }
}

// A USR2 preemption in the middle of an AdamW run with a per-step cosine schedule, on the CUDA
// graph: the resumed run ends on the uninterrupted run's bits (device step counts and the rate
// restored from the checkpoint).
TEST(TrainGpu, PreemptedAdamWCosineRunResumesBitExact) {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 1) GTEST_SKIP() << "needs a CUDA GPU, found " << gpus << ": run scripts/gpu-check.sh on a node with a GPU (docs/gpu.md)";
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  train::test::TempDir d("gpu-resume");
  auto args = [&](const std::string& ck) {
    return gpu_args({"--epochs", "2", "--limit-train-samples", "3200", "--limit-test-samples", "1000", "--no-dropout",
                     "--deterministic", "--tf32", "off", "--precision", "fp32", "--optimizer", "adamw",
                     "--lr-schedule", "warmup-cosine", "--warmup-steps", "10", "--cuda-graph", "on",
                     "--checkpoint-dir", ck});
  };
  auto whole = run_program(args(d.file("whole")));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  auto first = run_program(args(d.file("ck")), {"TRAIN_FAULT_SIGNAL_AT_STEP=37:USR2"});
  ASSERT_EQ(first.exit_code, 75) << first.err;  // preempted: checkpointed, asks to be resumed
  auto second = run_program(args(d.file("ck")));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.err.find("resum"), std::string::npos) << second.err;
  EXPECT_NE(second.err.find("training step: CUDA graph"), std::string::npos) << second.err;
  const auto jw = done_json(whole), jr = done_json(second);
  std::printf("[AdamW + cosine, USR2 at step 37 and resume] sha %s vs uninterrupted %s\n",
              jr["params_sha256"].get<std::string>().c_str(), jw["params_sha256"].get<std::string>().c_str());
  EXPECT_EQ(jr["steps"], jw["steps"]);
  EXPECT_EQ(jr["params_sha256"], jw["params_sha256"]);
}

// --precision auto picks bf16 autocast (fp32 master weights) for per-rank batches of 512 and more
// (train::builtin::kAutoBf16Batch): there it must reach fp32's test accuracy within 0.5 points, averaged
// over 5 seeds, after the same 3 epochs of full Fashion-MNIST at batch 512, with deterministic
// cuDNN (fp32's own run-to-run spread was ~0.4 points without it, which made a 3-seed comparison
// pass or fail by chance). At batch 64, where bf16 measured 0.3-0.8 points below fp32, auto stays
// fp32.
TEST(TrainGpu, AutoPrecisionBf16ReachesFp32AccuracyWithinHalfAPoint) {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 1) GTEST_SKIP() << "needs a CUDA GPU, found " << gpus << ": run scripts/gpu-check.sh on a node with a GPU (docs/gpu.md)";
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  auto small = run_program(gpu_args({"--epochs", "1", "--max-steps", "20"}), {}, 300);
  ASSERT_EQ(small.exit_code, 0) << small.err;
  EXPECT_EQ(done_json(small)["precision"], "fp32") << small.out;
  double sum[2] = {0, 0};
  const char* precisions[2] = {"fp32", "auto"};
  const int seeds = 5;
  for (int seed = 1; seed <= seeds; ++seed) {
    for (int p = 0; p < 2; ++p) {
      auto r = run_program(gpu_args({"--epochs", "3", "--batch-size", "512", "--seed", std::to_string(seed),
                                     "--deterministic", "--precision", precisions[p]}), {}, 600);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      const auto j = done_json(r);
      if (p == 1 && j["precision"] != "bf16") {
        GTEST_SKIP() << "--precision auto chose " << j["precision"] << ": this GPU has no bf16 (compute capability < 8.0)";
      }
      if (p == 0) EXPECT_EQ(j["precision"], "fp32");
      const double acc = j["test_accuracy"];
      std::printf("[bf16] batch 512, seed %d, --precision %s (%s): test accuracy %.4f\n", seed, precisions[p],
                  j["precision"].get<std::string>().c_str(), acc);
      sum[p] += acc;
    }
  }
  const double fp32 = sum[0] / seeds, bf16 = sum[1] / seeds;
  std::printf("[bf16] mean over 5 seeds: fp32 %.4f, auto (bf16) %.4f (difference %.2f points)\n", fp32, bf16,
              100 * (bf16 - fp32));
  EXPECT_GT(fp32, 0.86);
  EXPECT_LE(std::abs(bf16 - fp32), 0.005);
}
