// CIFAR-10 end to end through the `train` program, on files the test writes in both layouts under
// a torchvision root: the recipe's defaults, learning at world 1 and 2, and --augment crop,flip
// resuming bit for bit after a preemption.
#include "cifar_files.h"
#include "run_helpers.h"
#include "test_util.h"
#include "train/base/files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

using train::test::bin;
using train::test::done_json;
using train::test::local_command;
using train::test::run_program;

namespace {

std::vector<std::string> cifar_args(const std::string& data, std::vector<std::string> extra) {
  std::vector<std::string> a = {bin("train"), "--model", "cifar10", "--data", data, "--device", "cpu",
                                "--threads", "1", "--log-interval", "1000"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace

// Without --epochs, --batch-size or --lr the cifar10 model trains with its recipe (train/catalog/catalog.h).
TEST(CifarTrain, TheRecipeIsTheDefault) {
  train::test::TempDir d("cifar-recipe");
  train::test::write_cifar_layout(d.file("data/cifar-10-batches-py"), /*binary=*/false, 120, 50);
  auto r = run_program(cifar_args(d.file("data"), {"--limit-train-samples", "512"}), {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = done_json(r);
  EXPECT_EQ(j["epochs"], 4);
  EXPECT_EQ(j["steps"], 8);  // 512 / 256 a step, 4 epochs
  EXPECT_NE(r.err.find("for 4 epochs, batch 256 per rank x 1 ranks, lr 0.1,"), std::string::npos) << r.err;
}

// Learnable synthetic classes in each layout, at world 1 and 2: accuracy far above chance (0.1).
// The recipe's lr 0.1 with momentum 0.9 is tuned for 50000 real images; on 1500 synthetic ones it
// can overshoot, so these runs take lr 0.02 and keep the rest of the recipe (SGD, momentum 0.9,
// weight decay 1e-4, 4 epochs).
TEST(CifarTrain, LearnsBothLayoutsAtWorldOneAndTwo) {
  train::test::TempDir d("cifar-learn");
  train::test::write_cifar_layout(d.file("py/cifar-10-batches-py"), /*binary=*/false, 300, 300);
  train::test::write_cifar_layout(d.file("bin/cifar-10-batches-bin"), /*binary=*/true, 300, 300);
  for (const std::string layout : {"py", "bin"}) {
    for (const int world : {1, 2}) {
      auto args = cifar_args(d.file(layout), {"--batch-size", std::to_string(32 / world), "--lr", "0.02"});
      auto r = run_program(world == 1 ? args : local_command(world, args), {}, 600);
      ASSERT_EQ(r.exit_code, 0) << layout << " world " << world << ": " << r.err;
      const auto j = done_json(r);
      EXPECT_EQ(j["world_size"], world);
      EXPECT_EQ(j["epochs"], 4);
      EXPECT_GE(j.value("test_accuracy", 0.0), 0.5) << layout << " world " << world << ": " << r.err;
    }
  }
}

// --augment crop,flip: deterministic given the seed, different from no augmentation, and a run
// preempted at step 20 then resumed ends with the parameters of an unbroken run, at world 1 and 2.
TEST(CifarTrain, AugmentedRunsResumeBitForBit) {
  train::test::TempDir d("cifar-augment");
  train::test::write_cifar_layout(d.file("data/cifar-10-batches-bin"), /*binary=*/true, 100, 50);
  for (const int world : {1, 2}) {
    const std::vector<std::string> common = {"--batch-size", std::to_string(20 / world), "--epochs", "2", "--lr", "0.02",
                                             "--augment", "crop,flip"};
    auto with = [&](std::vector<std::string> extra) {
      std::vector<std::string> e = common;
      e.insert(e.end(), extra.begin(), extra.end());
      auto a = cifar_args(d.file("data"), e);
      return world == 1 ? a : local_command(world, a);
    };
    const std::string w = "world " + std::to_string(world) + ": ";
    auto whole = run_program(with({"--checkpoint-dir", d.file("whole" + std::to_string(world))}), {}, 600);
    ASSERT_EQ(whole.exit_code, 0) << w << whole.err;
    const std::string sha = done_json(whole).value("params_sha256", "");
    ASSERT_EQ(sha.size(), 64u);

    auto again = run_program(with({}), {}, 600);
    ASSERT_EQ(again.exit_code, 0) << w << again.err;
    EXPECT_EQ(done_json(again).value("params_sha256", ""), sha) << w << "the same seed must give the same run";

    auto plain = cifar_args(d.file("data"), {"--batch-size", std::to_string(20 / world), "--epochs", "2", "--lr", "0.02"});
    auto unaugmented = run_program(world == 1 ? plain : local_command(world, plain), {}, 600);
    ASSERT_EQ(unaugmented.exit_code, 0) << w << unaugmented.err;
    EXPECT_NE(done_json(unaugmented).value("params_sha256", ""), sha) << w << "--augment changed nothing";

    // 50 steps an epoch: step 20 is mid-epoch 1, so resume continues the augmentation mid-epoch.
    const std::string ck = d.file("ck" + std::to_string(world));
    auto first = run_program(with({"--checkpoint-dir", ck}), {"TRAIN_FAULT_SIGNAL_AT_STEP=20:USR2"}, 600);
    ASSERT_EQ(first.exit_code, 75) << w << first.err;  // preempted, checkpointed
    auto resumed = run_program(with({"--checkpoint-dir", ck}), {}, 600);
    ASSERT_EQ(resumed.exit_code, 0) << w << resumed.err;
    EXPECT_NE(resumed.err.find("resumed from"), std::string::npos) << resumed.err;
    EXPECT_EQ(done_json(resumed).value("params_sha256", ""), sha) << w << "resume changed the numbers";

    // A checkpoint written with --augment refuses to resume without it (and the reverse).
    auto other = cifar_args(d.file("data"), {"--batch-size", std::to_string(20 / world), "--epochs", "2", "--lr", "0.02",
                                             "--augment", "flip", "--checkpoint-dir", ck});
    auto refused = run_program(world == 1 ? other : local_command(world, other), {}, 600);
    EXPECT_NE(refused.exit_code, 0) << w << refused.err;
    EXPECT_NE(refused.err.find("--augment crop,flip"), std::string::npos) << w << refused.err;
  }
}

// --model resnet18 (the CIFAR ResNet-18) trains with its recipe on CIFAR-10 files: 128 a batch, SGD
// with Nesterov momentum, and a per-step linear warm-up (5% of the steps) then cosine to 0; the
// metrics' per-step rates follow that curve, and the loss falls on a few repeated images.
TEST(CifarTrain, ResNet18TrainsWithWarmupCosinePerStep) {
  train::test::TempDir d("cifar-resnet18");
  train::test::write_cifar_layout(d.file("data/cifar-10-batches-bin"), /*binary=*/true, 20, 10);
  const std::string metrics = d.file("metrics.jsonl");
  auto args = cifar_args(d.file("data"), {"--model", "resnet18", "--batch-size", "8", "--epochs", "5", "--lr", "0.02",
                                          "--limit-train-samples", "16", "--limit-test-samples", "8",
                                          "--log-interval", "1", "--metrics", metrics});
  auto r = run_program(args, {}, 600);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = done_json(r);
  EXPECT_EQ(j["epochs"], 5);
  EXPECT_EQ(j["steps"], 10);  // 16 / 8 a step, 5 epochs
  std::vector<double> lrs, losses;
  std::istringstream lines(train::test::read_text(metrics));
  for (std::string line; std::getline(lines, line);) {
    auto m = nlohmann::json::parse(line, nullptr, false);
    if (!m.is_discarded() && m.value("event", "") == "train") {
      lrs.push_back(m["lr"].get<double>());
      losses.push_back(m["loss"].get<double>());
    }
  }
  ASSERT_EQ(lrs.size(), 10u);
  // train::warmup_cosine with 1 warm-up step (5% of 10, at least 1): step k (0-based) runs at
  // 0.02 * k / 1 while k < 1 (the first step at 0), then at 0.02 * (1 + cos(pi * (k - 1) / 9)) / 2.
  // The metrics line of step k records the rate that step ran with.
  auto rate = [](size_t k) { return k < 1 ? 0.0 : 0.02 * 0.5 * (1 + std::cos(M_PI * static_cast<double>(k - 1) / 9.0)); };
  for (size_t i = 0; i < lrs.size(); ++i) EXPECT_NEAR(lrs[i], rate(i), 1e-12) << "step " << i;
  EXPECT_NEAR(lrs[5], 0.02 * 0.5 * (1 + std::cos(M_PI * 4.0 / 9.0)), 1e-12) << "mid-run: on the cosine";
  EXPECT_LT(losses.back(), losses.front()) << r.err;
}
