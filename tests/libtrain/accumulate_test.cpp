// Gradient accumulation (--accumulate-steps) and clipping (--clip-grad-norm) in whole runs of
// `train` on the CPU: 4 micro-batches of 16 train as one batch of 64 (1 and 2 ranks), the step
// count is the optimizer's, clipping above the norm changes no bit, bad values are usage errors.
#include "param_diff.h"
#include "run_helpers.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <map>

using train::test::bin;
using train::test::done_json;
using train::test::local_command;
using train::test::run_program;

namespace {

// 232 samples: 3 full steps of 64 and a last one of 40 (16 + 16 + 8 with accumulation); with 2
// ranks 3 of 32 and one of 20 (8 + 8 + 4). Few steps: SGD at this rate magnifies float rounding
// step after step (1e-4 apart after 16 steps), so the runs are compared where that stays small.
std::vector<std::string> train_args(const std::string& model_file, std::vector<std::string> extra) {
  std::vector<std::string> a = {bin("train"), "--data", train::test::fashion_mnist_dir(), "--epochs", "1",
                                "--limit-train-samples", "232", "--limit-test-samples", "500", "--no-dropout",
                                "--device", "cpu", "--threads", "1", "--log-interval", "100", "--optimizer", "sgd",
                                "--lr", "0.05", "--save-model", model_file};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

struct Trained {
  nlohmann::json done;
  std::map<std::string, torch::Tensor> params;
};

// Runs `train` (under `trainctl local` for several ranks) and reads the parameters it saved.
Trained train_run(int ranks, const std::vector<std::string>& extra, const std::string& tag) {
  train::test::TempDir d("accum-" + tag);
  const std::string file = d.file("model.pt");
  auto args = train_args(file, extra);
  auto r = run_program(ranks > 1 ? local_command(ranks, args) : args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  Trained t{done_json(r), {}};
  torch::serialize::InputArchive archive;
  archive.load_from(file);
  for (const std::string& key : archive.keys()) {
    at::Tensor v;
    archive.read(key, v);
    t.params[key] = v.to(torch::kDouble);
  }
  return t;
}

// The largest difference between two runs' parameters, relative to the largest parameter.
double max_rel_diff(const Trained& a, const Trained& b) { return train::test::max_rel_diff(a.params, b.params); }

}  // namespace

// One epoch, its last step short (40 samples): each micro-batch's loss weighted by its share of
// the step gives the gradients of the step's whole mean loss, so the runs differ only by float32
// summation order (measured 2.6e-6 of the largest parameter); batch 16 without accumulation lands
// 0.6 away.
TEST(Accumulate, FourMicroBatchesOf16TrainLikeOneBatchOf64) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const Trained whole = train_run(1, {"--batch-size", "64"}, "b64");
  const Trained accumulated = train_run(1, {"--batch-size", "16", "--accumulate-steps", "4"}, "b16x4");
  const Trained small = train_run(1, {"--batch-size", "16"}, "b16");
  EXPECT_EQ(whole.done["steps"], 4);
  EXPECT_EQ(accumulated.done["steps"], 4) << "steps count optimizer steps";
  EXPECT_EQ(small.done["steps"], 15);
  const double d = max_rel_diff(whole, accumulated);
  std::printf("[accumulate] 1 rank: 64 vs 16 x 4 max rel diff %.3e; 64 vs 16 %.3e\n", d, max_rel_diff(whole, small));
  EXPECT_LE(d, 1e-5);
  EXPECT_GT(max_rel_diff(whole, small), 1e-3) << "the tolerance tells accumulation apart from a smaller batch";
  const double l1 = whole.done["train_loss"], l2 = accumulated.done["train_loss"];
  EXPECT_NEAR(l1, l2, 1e-5 * l1) << "the epoch's loss averages the optimizer steps' losses";
}

// Two ranks: 2 x 8 x 4 micro-batches against 1 x 64, and against 2 x 32 without accumulation.
// The ranks average once per optimizer step, after the last micro-batch.
TEST(Accumulate, TwoRanksOfFourMicroBatchesTrainLikeOneBatchOf64) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const Trained whole = train_run(1, {"--batch-size", "64"}, "b64");
  const Trained two = train_run(2, {"--batch-size", "32"}, "2xb32");
  const Trained accumulated = train_run(2, {"--batch-size", "8", "--accumulate-steps", "4"}, "2xb8x4");
  EXPECT_EQ(accumulated.done["world_size"], 2);
  EXPECT_EQ(accumulated.done["steps"], two.done["steps"]);
  const double d1 = max_rel_diff(whole, accumulated), d2 = max_rel_diff(two, accumulated);
  std::printf("[accumulate] 2 ranks x 8 x 4 vs 1 x 64: %.3e, vs 2 x 32: %.3e\n", d1, d2);
  EXPECT_LE(d1, 1e-5);
  EXPECT_LE(d2, 1e-5);
}

// A bound above the gradients' norm multiplies them by exactly 1: the run's bits are unchanged.
// A bound below it changes the run, and the log says the gradients are clipped.
TEST(ClipGradNorm, AboveTheNormChangesNoBitBelowItClips) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  auto run = [](std::vector<std::string> extra) {
    train::test::TempDir d("clip-run");
    auto r = run_program(train_args(d.file("m.pt"), extra));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return std::make_pair(done_json(r), r.err);
  };
  const auto [plain, plain_log] = run({"--max-steps", "6"});
  const auto [high, high_log] = run({"--max-steps", "6", "--clip-grad-norm", "1e30"});
  const auto [low, low_log] = run({"--max-steps", "6", "--clip-grad-norm", "0.5"});
  EXPECT_EQ(high["params_sha256"], plain["params_sha256"]);
  EXPECT_NE(low["params_sha256"], plain["params_sha256"]);
  EXPECT_NE(low_log.find("gradients clipped to norm 0.5"), std::string::npos) << low_log;
  EXPECT_EQ(plain_log.find("clipped"), std::string::npos) << plain_log;
}

// Bad values are usage errors (exit 2) that name the flag, what was expected and what was found,
// and give a hint.
TEST(Accumulate, BadValuesAreUsageErrors) {
  struct Case {
    std::string flag, value, says;
  };
  for (const Case& c : {Case{"--accumulate-steps", "0", "--accumulate-steps: expected a whole number of micro-batches, at least 1, found 0. Hint:"},
                        Case{"--accumulate-steps", "-2", "found -2. Hint:"},
                        Case{"--accumulate-steps", "2.5", "found 2.5. Hint:"},
                        Case{"--accumulate-steps", "many", "found 'many', which is not a number"},
                        Case{"--clip-grad-norm", "0", "--clip-grad-norm: expected a positive total gradient norm, found 0. Hint:"},
                        Case{"--clip-grad-norm", "-1", "found -1. Hint:"},
                        Case{"--clip-grad-norm", "nan", "which is not a number"},
                        Case{"--clip-grad-norm", "inf", "which is not a number"}}) {
    auto r = run_program({bin("train"), c.flag, c.value, "--device", "cpu"});
    EXPECT_EQ(r.exit_code, 2) << c.flag << " " << c.value << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.flag << " " << c.value << ": " << r.err;
  }
}
