// Non-finite values on CPU ranks over Gloo (`trainctl local`): a non-finite loss stops the run
// with its own exit status, names the step, epoch, rank and what was non-finite, and leaves the
// last good checkpoint intact and resumable; --nonfinite skip drops steps and stops after N in a
// row; errors in the user's code (tests/libtrain/user_code_program.cpp) carry their context.
#include "test_util.h"
#include "train/base/files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using train::test::bin;
using train::test::run_program;

namespace {

// 1200 samples, 2 ranks x 32: 19 steps an epoch.
std::vector<std::string> train_args(const std::string& ck, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {bin("trainctl"), "local", "--nproc", "2", "--no-prefix", "--", bin("train"), "--data",
                                train::test::fashion_mnist_dir(), "--epochs", "2", "--limit-train-samples", "1200",
                                "--limit-test-samples", "200", "--batch-size", "32", "--device", "cpu", "--threads",
                                "1", "--log-interval", "1"};
  if (!ck.empty()) a.insert(a.end(), {"--checkpoint-dir", ck});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

nlohmann::json last_json(const train::test::RunResult& r) {
  auto j = nlohmann::json::parse(train::test::last_line(r.out), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  return j;
}

std::string user_program() { return std::string(TRAIN_BINARY_DIR) + "/tests/user_code_program"; }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

// A NaN loss at step 6 on rank 1 of 2, with a checkpoint every 3 steps: the run stops at step 6
// with exit 65, names step, epoch, rank and the loss, writes no checkpoint of step 6's weights,
// and the step-3 checkpoint resumes to the end.
TEST(NonFinite, NanOnOneRankStopsNamesItAndKeepsTheLastGoodCheckpoint) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  train::test::TempDir d("nonfinite");
  const std::string ck = d.file("ck");
  auto r = run_program(train_args(ck, {"--checkpoint-every", "3"}), {"TRAIN_FAULT_NAN_AT_STEP=6:1"}, 300);
  EXPECT_EQ(r.exit_code, 65) << r.err;
  const auto j = last_json(r);
  EXPECT_EQ(j["event"], "nonfinite") << r.out;
  EXPECT_EQ(j["steps"], 6);
  const std::string reason = j.value("reason", "");
  EXPECT_TRUE(has(reason, "at step 6 (epoch 1) on rank")) << reason;
  EXPECT_TRUE(has(reason, "rank 1: the loss at step 6")) << reason;
  EXPECT_TRUE(has(r.err, "rank 1: the loss at step 6")) << r.err;
  // Rank 0's loss was finite; the averaged gradients it got from rank 1 were not.
  EXPECT_TRUE(has(reason, "rank 0: the gradient of parameter '")) << reason;
  const std::string kept = j.value("checkpoint", "");
  EXPECT_TRUE(has(kept, "ckpt-3.pt")) << "the step-3 checkpoint is the last good one: " << kept;
  EXPECT_TRUE(train::files::exists(kept)) << kept;
  EXPECT_TRUE(has(r.err, "the last good checkpoint stays: " + kept)) << r.err;
  // No checkpoint after step 3: the newest file in the folder is still step 3's.
  auto again = run_program(train_args(ck), {}, 300);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(has(again.err, "resumed from " + kept + ": epoch 1, step 3")) << again.err;
  const auto done = last_json(again);
  EXPECT_EQ(done["event"], "done");
  EXPECT_EQ(done["steps"], 38);
  EXPECT_TRUE(done["train_loss"].is_number()) << "finite again after the resume: " << again.out;
}

// With --clip-grad-norm the check reads the clipping's gradient norms instead of its own (and
// with --accumulate-steps it looks at the optimizer step): a NaN loss at step 4 on rank 1 still
// stops the run there, naming rank 1's loss and the non-finite averaged gradient on rank 0.
TEST(NonFinite, NanWithClippingAndAccumulationStopsAndNamesIt) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  auto r = run_program(train_args("", {"--batch-size", "16", "--accumulate-steps", "2", "--clip-grad-norm", "0.5"}),
                       {"TRAIN_FAULT_NAN_AT_STEP=4:1"}, 300);
  EXPECT_EQ(r.exit_code, 65) << r.err;
  const auto j = last_json(r);
  EXPECT_EQ(j["event"], "nonfinite") << r.out;
  EXPECT_EQ(j["steps"], 4);
  const std::string reason = j.value("reason", "");
  EXPECT_TRUE(has(reason, "rank 1: the loss at step 4")) << reason;
  EXPECT_TRUE(has(reason, "rank 0: the gradient of parameter '")) << reason;
}

// --nonfinite skip: a NaN at step 4 on rank 1 drops that step's update on both ranks, counts it,
// and the run trains on to the end.
TEST(NonFinite, SkipDropsTheStepAndGoesOn) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  auto r = run_program(train_args("", {"--epochs", "1", "--nonfinite", "skip"}), {"TRAIN_FAULT_NAN_AT_STEP=4:1"}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = last_json(r);
  EXPECT_EQ(j["event"], "done");
  EXPECT_EQ(j["steps"], 19);
  EXPECT_EQ(j["skipped_steps"], 1);
  EXPECT_TRUE(j["test_loss"].is_number() && j["test_loss"].get<double>() < 2.3) << "the weights stayed finite: " << r.out;
  EXPECT_TRUE(has(r.err, "non-finite loss or gradient at step 4")) << r.err;
}

// --nonfinite skip with NaN from step 3 on: it stops after --nonfinite-max-skips (4) in a row,
// with the non-finite exit status, naming the first of them.
TEST(NonFinite, SkipStopsAfterMaxSkipsInARow) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  auto r = run_program(train_args("", {"--nonfinite", "skip", "--nonfinite-max-skips", "4"}),
                       {"TRAIN_FAULT_NAN_AT_STEP=3-30:0"}, 300);
  EXPECT_EQ(r.exit_code, 65) << r.err;
  const auto j = last_json(r);
  EXPECT_EQ(j["event"], "nonfinite");
  EXPECT_EQ(j["steps"], 6);
  EXPECT_EQ(j["skipped_steps"], 4);
  EXPECT_TRUE(has(j.value("reason", ""), "at step 3 (epoch 1) on rank")) << j;
  EXPECT_TRUE(has(j.value("reason", ""), "rank 0: the loss at step 3")) << j;
  EXPECT_TRUE(has(j.value("reason", ""), "4 steps in a row were skipped")) << j;
}

TEST(NonFinite, BadFlagValuesAreRefused) {
  auto r = run_program({bin("train"), "--nonfinite", "ignore"}, {}, 60);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(has(r.err + r.out, "--nonfinite")) << r.err;
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  auto bad_fault = run_program({bin("train"), "--device", "cpu", "--data", train::test::fashion_mnist_dir(),
                                "--limit-train-samples", "64", "--limit-test-samples", "64", "--epochs", "1"},
                               {"TRAIN_FAULT_NAN_AT_STEP=x"}, 120);
  EXPECT_EQ(bad_fault.exit_code, 2) << bad_fault.err;
  EXPECT_TRUE(has(bad_fault.err, "TRAIN_FAULT_NAN_AT_STEP='x': expected STEP[-LAST][:RANK]")) << bad_fault.err;
}

// get_batch throws on rank 1 at its 3rd call: the error names get_batch, the step, epoch and
// rank, and carries the original message.
TEST(UserCode, GetBatchThrowingOnOneRankCarriesItsContext) {
  const std::vector<std::string> cmd = {bin("trainctl"), "local", "--nproc", "2", "--no-prefix", "--", user_program(),
                                        "--device", "cpu", "--threads", "1", "--epochs", "1"};
  auto r = run_program(cmd, {"USER_FAULT=throw:3:1"}, 300);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.err, "Dataset::get_batch failed at step 3 (epoch 1) on rank 1: the disk is on fire (injected)"))
      << r.err;
}

// The first batch is checked before the first forward: float targets for the cross-entropy
// loss, and a target row short.
TEST(UserCode, FirstBatchCheckSaysWhatItFound) {
  const std::vector<std::string> cmd = {user_program(), "--device", "cpu", "--threads", "1", "--epochs", "1"};
  auto f = run_program(cmd, {"USER_FAULT=float-targets"}, 120);
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_TRUE(has(f.err, "expected integer class indices as targets (int64)")) << f.err;
  EXPECT_TRUE(has(f.err, "targets Float [16]")) << f.err;
  EXPECT_TRUE(has(f.err, "at step 1 (epoch 1) on rank 0")) << f.err;
  auto s = run_program(cmd, {"USER_FAULT=short-targets"}, 120);
  EXPECT_EQ(s.exit_code, 1) << s.err;
  EXPECT_TRUE(has(s.err, "expected as many target rows as input rows")) << s.err;
  EXPECT_TRUE(has(s.err, "inputs Float [16, 8], targets Long [15]")) << s.err;
}

// LibTorch's own error from the model's forward: which part, the batch, the message, and no C++
// frames unless TORCH_SHOW_CPP_STACKTRACES=1.
TEST(UserCode, ForwardErrorNamesThePartWithoutAFrameDump) {
  const std::vector<std::string> cmd = {user_program(), "--device", "cpu", "--threads", "1", "--epochs", "1"};
  auto r = run_program(cmd, {"USER_FAULT=bad-forward", "TORCH_SHOW_CPP_STACKTRACES=0"}, 120);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "the model's forward failed at step 1 (epoch 1) on rank 0:")) << r.err;
  EXPECT_TRUE(has(r.err, "inputs Float [16, 7]")) << r.err;
  EXPECT_TRUE(has(r.err, "from the training data 'data' (TrainSpec::train_data)")) << r.err;  // the dataset is named too
  EXPECT_FALSE(has(r.err, "frame #")) << r.err;
  auto cb = run_program(cmd, {"USER_FAULT=bad-callback"}, 120);
  EXPECT_EQ(cb.exit_code, 1) << cb.err;
  EXPECT_TRUE(has(cb.err, "a callback's on_step_end failed at step 2 (epoch 1) on rank 0: callback refused step 2")) << cb.err;
}
