// The training controls and a user's first mistakes, end to end through a toy program on
// the public API (controls_program.cpp) on the CPU: early stopping stops at the right epoch (and a
// resumed run stays stopped, two ranks stop together), the weights' moving average is evaluated
// and resumes bit-exact, --eval-only reproduces the test loss of the run that wrote the checkpoint
// and writes nothing, the hook before the optimizer's step runs in the documented order; and the
// errors name the input, the expected, the found, with a hint. GPU cases skip without a GPU.
#include "gpu_count.h"
#include "test_util.h"
#include "train/base/files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>

using train::test::bin;
using train::test::run_program;
using train::test::RunResult;

namespace {

std::string program() { return std::string(TRAIN_BINARY_DIR) + "/tests/controls_program"; }

RunResult run(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
  std::vector<std::string> a = {program(), "--device", "cpu", "--threads", "1", "--log-interval", "100"};
  a.insert(a.end(), args.begin(), args.end());
  return run_program(a, env, 300);
}

nlohmann::json done(const RunResult& r) {
  auto j = nlohmann::json::parse(train::test::last_line(r.out), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  return j.is_discarded() ? nlohmann::json::object() : j;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<std::string> sorted_files(const std::string& dir) {
  std::vector<std::string> names = train::files::list_dir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

// A rate of 0: the test loss never moves, so with patience 2 the run stops after epoch 3 of 10, every
// time; the done line says so. A rerun resumes from the checkpoint of that epoch and stays stopped.
TEST(EarlyStopping, StopsAfterPatienceEpochsWithoutImprovement) {
  train::test::TempDir d("early");
  const std::vector<std::string> args = {"--epochs", "10", "--early-stop-metric", "test_loss",
                                         "--early-stop-patience", "2", "--checkpoint-dir", d.file("ck")};
  const RunResult r = run(args, {"CONTROLS_CASE=frozen"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = done(r);
  EXPECT_EQ(j.value("event", ""), "done");
  EXPECT_TRUE(j.value("stopped_early", false)) << r.out;
  EXPECT_EQ(j.value("epochs", 0), 3);
  EXPECT_EQ(j.value("steps", 0), 3 * 32);
  EXPECT_TRUE(has(r.err, "early stopping: test_loss has not improved by more than 0 for 2 epochs (best ")) << r.err;
  EXPECT_TRUE(has(r.err, " at epoch 1, now ")) << r.err;
  EXPECT_TRUE(has(r.err, "the run stops after epoch 3")) << r.err;
  const RunResult again = run(args, {"CONTROLS_CASE=frozen"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(done(again).value("stopped_early", false)) << again.out;
  EXPECT_EQ(done(again).value("steps", 0), 3 * 32);
  EXPECT_EQ(done(again).value("params_sha256", ""), j.value("params_sha256", "x"));
}

// A metric that improves every epoch never stops the run; without the flag there is no field.
TEST(EarlyStopping, AnImprovingRunTrainsEveryEpoch) {
  const RunResult r = run({"--lr", "0.05", "--epochs", "3", "--early-stop-metric", "test_loss", "--early-stop-patience", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(done(r).value("stopped_early", true)) << r.out;
  EXPECT_EQ(done(r).value("epochs", 0), 3);
  const RunResult plain = run({"--epochs", "1"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_FALSE(done(plain).contains("stopped_early")) << plain.out;
}

// Two ranks over Gloo stop at the same epoch's end (rank 0 decides and shares it) and exit 0.
TEST(EarlyStopping, TwoRanksStopTogether) {
  const RunResult r = run_program({bin("trainctl"), "local", "--nproc", "2", "--no-prefix", "--", program(), "--device",
                                   "cpu", "--threads", "1", "--epochs", "10", "--early-stop-metric",
                                   "test_accuracy", "--early-stop-patience", "1"},
                                  {"CONTROLS_CASE=frozen"}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(done(r).value("stopped_early", false)) << r.out;
  EXPECT_EQ(done(r).value("epochs", 0), 2);
}

TEST(EarlyStopping, AnUnknownMetricIsAUsageError) {
  const RunResult r = run({"--early-stop-metric", "test_bogus"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "--early-stop-metric: expected test_loss or test_accuracy")) << r.err;
  EXPECT_TRUE(has(r.err, "found 'test_bogus'")) << r.err;
  EXPECT_TRUE(has(r.err, "Hint: ")) << r.err;
}

// The moving average is what the test line evaluates; a run preempted mid-epoch and resumed ends
// with the uninterrupted run's weights and the same evaluation of the average, to the last bit.
TEST(WeightAverage, IsEvaluatedAndResumesBitExact) {
  train::test::TempDir d("ema");
  const std::vector<std::string> args = {"--epochs", "2", "--ema-decay", "0.9", "--checkpoint-dir"};
  std::vector<std::string> ref_args = args, cut_args = args;
  ref_args.push_back(d.file("ref"));
  cut_args.push_back(d.file("cut"));
  const RunResult ref = run(ref_args);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  EXPECT_TRUE(has(ref.err, "Test set (the weights' moving average, decay 0.9): Average loss")) << ref.err;
  EXPECT_TRUE(done(ref).value("ema", false)) << ref.out;
  const RunResult cut = run(cut_args, {"TRAIN_FAULT_SIGNAL_AT_STEP=40:USR2"});
  ASSERT_EQ(cut.exit_code, 75) << cut.err;
  const RunResult resumed = run(cut_args);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_TRUE(has(resumed.err, "resumed from")) << resumed.err;
  EXPECT_EQ(done(resumed).value("params_sha256", ""), done(ref).value("params_sha256", "x"));
  EXPECT_EQ(done(resumed).value("test_loss", 0.0), done(ref).value("test_loss", 1.0));  // the average's, bit for bit
  EXPECT_EQ(done(resumed).value("test_accuracy", 0.0), done(ref).value("test_accuracy", 1.0));
  // Without the average the evaluation differs: the done line's test loss is the average's.
  const RunResult plain = run({"--epochs", "2"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(done(plain).value("params_sha256", ""), done(ref).value("params_sha256", "x"));
  EXPECT_NE(done(plain).value("test_loss", 0.0), done(ref).value("test_loss", 0.0));
}

// --eval-only loads the checkpoint, evaluates it (the moving average too), prints the test line and
// a done line with the trained run's test loss, trains nothing and writes nothing.
TEST(EvalOnly, ReproducesTheTestLossOfTheRunThatWroteTheCheckpoint) {
  train::test::TempDir d("evalonly");
  for (const bool ema : {false, true}) {
    const std::string ck = d.file(ema ? "ck-ema" : "ck");
    std::vector<std::string> args = {"--epochs", "2", "--checkpoint-dir", ck};
    if (ema) args.insert(args.end(), {"--ema-decay", "0.95"});
    const RunResult trained = run(args);
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
    const std::vector<std::string> before = sorted_files(ck);
    args.push_back("--eval-only");
    const RunResult eval = run(args);
    ASSERT_EQ(eval.exit_code, 0) << eval.err;
    const nlohmann::json j = done(eval);
    EXPECT_EQ(j.value("event", ""), "done");
    EXPECT_TRUE(j.value("eval_only", false));
    EXPECT_EQ(j.value("steps", -1), 0);
    EXPECT_EQ(j.value("test_loss", 0.0), done(trained).value("test_loss", 1.0)) << "ema " << ema;
    EXPECT_EQ(j.value("test_accuracy", 0.0), done(trained).value("test_accuracy", 1.0));
    EXPECT_EQ(j.value("params_sha256", ""), done(trained).value("params_sha256", "x"));
    EXPECT_TRUE(has(eval.err, "Test set")) << eval.err;
    EXPECT_TRUE(has(eval.err, ", of " + ck + "/")) << eval.err;
    EXPECT_EQ(sorted_files(ck), before) << "--eval-only writes nothing";
  }
}

TEST(EvalOnly, WithoutACheckpointIsAUsageError) {
  const RunResult none = run({"--eval-only"});
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_TRUE(has(none.err, "--eval-only: expected a checkpoint to evaluate")) << none.err;
  EXPECT_TRUE(has(none.err, "found neither")) << none.err;
  EXPECT_TRUE(has(none.err, "Hint: ")) << none.err;
  train::test::TempDir d("evalempty");
  const RunResult empty = run({"--eval-only", "--checkpoint-dir", d.file("none")});
  EXPECT_EQ(empty.exit_code, 2) << empty.err;
  EXPECT_TRUE(has(empty.err, "--eval-only: expected a checkpoint to evaluate in --checkpoint-dir")) << empty.err;
  EXPECT_TRUE(has(empty.err, "found none")) << empty.err;
}

// The hooks in the documented order: on_train_start first (the Trainer's model is there), then
// on_load_checkpoint on resume, then per step on_before_optimizer_step before on_step_end. A hook
// that zeroes the gradients leaves plain SGD's weights as built.
TEST(Callbacks, HooksRunInTheDocumentedOrder) {
  train::test::TempDir d("hooks");
  const std::vector<std::string> env = {"CONTROLS_CASE=hooks"};
  const RunResult first = run({"--epochs", "1", "--checkpoint-dir", d.file("ck")}, env);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::vector<std::string> order = {"hook: on_train_start model=yes", "hook: on_before_optimizer_step",
                                          "hook: on_step_end", "hook: on_evaluation", "hook: on_epoch_end",
                                          "hook: on_save_checkpoint", "hook: on_train_end"};
  size_t at = 0;
  for (const std::string& h : order) {
    const size_t next = first.err.find(h, at);
    ASSERT_NE(next, std::string::npos) << h << " after offset " << at << "\n" << first.err;
    at = next;
  }
  const std::string start_sha = first.err.substr(first.err.find(" sha=") + 5, 64);
  EXPECT_EQ(done(first).value("params_sha256", ""), start_sha) << "the hook ran before every optimizer step";
  const RunResult resumed = run({"--epochs", "2", "--checkpoint-dir", d.file("ck")}, env);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const size_t start = resumed.err.find("hook: on_train_start model=yes");
  const size_t load = resumed.err.find("hook: on_load_checkpoint trainer=yes");
  ASSERT_NE(start, std::string::npos) << resumed.err;
  ASSERT_NE(load, std::string::npos) << resumed.err;
  EXPECT_LT(start, load);
}

// A model with 7 outputs for 10 classes: named on the first batch, with the shapes.
TEST(FirstMistakes, TooFewOutputsForTheClassesAreNamed) {
  const RunResult r = run({"--epochs", "1"}, {"CONTROLS_OUTPUTS=7"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "the model's output: expected a score for each class along dimension 1, at least ")) << r.err;
  EXPECT_TRUE(has(r.err, "found output Float [16, 7]")) << r.err;
  EXPECT_TRUE(has(r.err, "Hint: give the model's last layer one output per class")) << r.err;
  EXPECT_FALSE(has(r.err, "out of bounds")) << r.err;
}

// A dataset that returns fewer rows than asked is named as the dataset's, not the model's.
TEST(FirstMistakes, AWrongBatchShapeIsTheDatasets) {
  const RunResult r = run({"--epochs", "1"}, {"CONTROLS_CASE=short-rows"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "Dataset::get_batch failed at step 3 (epoch 1) on rank 0: the training data 'toy' "
                         "(TrainSpec::train_data) returned 15 input rows for 16 indices")) << r.err;
  EXPECT_TRUE(has(r.err, "Hint: get_batch(indices) must return the samples at `indices`")) << r.err;
  EXPECT_FALSE(has(r.err, "the model's forward")) << r.err;
}

// --help is true for the program it runs in: the 512 of --precision auto is the built-in recipe's.
TEST(FirstMistakes, HelpIsTrueForTheProgram) {
  const RunResult mine = run_program({program(), "--help"}, {}, 60);
  ASSERT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_FALSE(has(mine.out, "512")) << mine.out;
  EXPECT_TRUE(has(mine.out, "TrainSpec::auto_bf16_batch")) << mine.out;
  const RunResult builtin = run_program({bin("train"), "--help"}, {}, 60);
  ASSERT_EQ(builtin.exit_code, 0) << builtin.err;
  EXPECT_TRUE(has(builtin.out, "the mnist recipe: bf16 for per-rank batches of 512")) << builtin.out;
}

// Under a warm-up the start line says where the rate starts and the base rate, not a bare "lr 0".
TEST(FirstMistakes, TheStartLineNamesTheWarmUpAndTheBaseRate) {
  const RunResult r = run({"--epochs", "1", "--lr", "0.1"}, {"CONTROLS_CASE=warmup"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "lr 0 now (warmup_cosine(warmup_steps=5")) << r.err;
  EXPECT_TRUE(has(r.err, "base rate 0.1)")) << r.err;
}

// On a GPU the hook can't run inside the CUDA graph: the step runs eagerly and says why; the
// moving average is updated after each replay and resumes bit-exact there too.
TEST(ControlsGpu, TheHookFallsBackToEagerAndTheAverageKeepsTheGraph) {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 1) GTEST_SKIP() << "needs a CUDA GPU, found " << gpus << ": run scripts/gpu-check.sh on a node with a GPU (docs/gpu.md)";
  const std::vector<std::string> base = {program(), "--device", "cuda", "--log-interval", "100", "--epochs", "1"};
  std::vector<std::string> hook = base;
  hook.insert(hook.end(), {"--cuda-graph", "on"});
  const RunResult h = run_program(hook, {"CONTROLS_CASE=hooks"}, 300);
  ASSERT_EQ(h.exit_code, 0) << h.err;
  EXPECT_TRUE(has(h.err, "the step runs eagerly: a callback's on_before_optimizer_step")) << h.err;
  train::test::TempDir d("emagpu");
  std::vector<std::string> ema = base;
  ema.insert(ema.end(), {"--epochs", "2", "--ema-decay", "0.9", "--checkpoint-dir"});
  std::vector<std::string> ref = ema, cut = ema;
  ref.push_back(d.file("ref"));
  cut.push_back(d.file("cut"));
  const RunResult r = run_program(ref, {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "training step: CUDA graph")) << r.err;
  ASSERT_EQ(run_program(cut, {"TRAIN_FAULT_SIGNAL_AT_STEP=40:USR2"}, 300).exit_code, 75);
  const RunResult resumed = run_program(cut, {}, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(done(resumed).value("params_sha256", ""), done(r).value("params_sha256", "x"));
  EXPECT_EQ(done(resumed).value("test_loss", 0.0), done(r).value("test_loss", 1.0));
}
