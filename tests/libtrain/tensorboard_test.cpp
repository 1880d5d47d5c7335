// train --tensorboard end to end: TensorBoard itself (the venv's EventAccumulator) reads back the
// scalars, steps and values of the --metrics file; its CRC-checking reader accepts every record and
// refuses flipped bytes; a run preempted with USR2 (or killed after its last checkpoint) and resumed
// keeps one line in both files, with the uninterrupted run's steps; the flag changes no parameter.
#include "test_util.h"
#include "train/base/event_file.h"
#include "train/base/files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

using train::test::bin;
using train::test::run_program;

namespace {

// 640 samples at batch 64: 10 steps an epoch, 2 epochs, a progress line every step.
std::string train_cmd(const std::string& extra) {
  return bin("train") + " --data " + train::test::fashion_mnist_dir() +
         " --epochs 2 --limit-train-samples 640 --limit-test-samples 200 --device cpu --threads 1"
         " --log-interval 1 " + extra;
}

nlohmann::json done_line(const train::test::RunResult& r) {
  auto j = nlohmann::json::parse(train::test::last_line(r.out), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  return j;
}

// What tests/libtrain/py/tensorboard_check.py finds in a run's folder and metrics file.
nlohmann::json check_with_tensorboard(const std::string& run_dir, const std::string& metrics) {
  const std::string py = train::test::venv_python();
  auto r = run_program({py, std::string(TRAIN_SOURCE_DIR) + "/tests/libtrain/py/tensorboard_check.py", run_dir, metrics});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(train::test::last_line(r.out), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  return j;
}

bool strictly_increasing(const std::vector<int64_t>& steps) {
  for (std::size_t i = 1; i < steps.size(); ++i) {
    if (steps[i] <= steps[i - 1]) return false;
  }
  return !steps.empty();
}

// The checks every run's files must pass: TensorBoard serves the JSONL's values, reads every
// record, catches every flipped byte, and each tag and event has strictly increasing steps.
void expect_consistent(const nlohmann::json& report) {
  EXPECT_EQ(report["read_errors"].size(), 0u) << report["read_errors"].dump();
  EXPECT_GT(report["records"].get<int>(), 0);
  EXPECT_EQ(report["mismatches"].size(), 0u) << report["mismatches"].dump(1);
  EXPECT_GT(report["checked"].get<int>(), 50) << "two epochs of progress lines hold about a hundred values";
  EXPECT_GT(report["flips_tried"].get<int>(), 20);
  EXPECT_EQ(report["flips_caught"], report["flips_tried"]) << "a flipped byte went unnoticed";
  for (const auto& [tag, steps] : report["tb_steps"].items()) {
    EXPECT_TRUE(strictly_increasing(steps.get<std::vector<int64_t>>())) << tag << ": " << steps.dump();
  }
  for (const auto& [event, steps] : report["jsonl_steps"].items()) {
    EXPECT_TRUE(strictly_increasing(steps.get<std::vector<int64_t>>())) << event << ": " << steps.dump();
  }
  for (const char* tag : {"train/loss", "train/lr", "train/images_per_sec", "train/step_seconds", "epoch/test_loss",
                          "epoch/test_accuracy", "epoch/train_loss"}) {
    EXPECT_TRUE(report["tb_steps"].contains(tag)) << tag << " missing: " << report["tb_steps"].dump();
  }
  EXPECT_EQ(report["tb_steps"]["train/loss"], report["jsonl_steps"]["train"]);
  EXPECT_EQ(report["tb_steps"]["epoch/test_accuracy"], report["jsonl_steps"]["epoch"]);
}

// Our own reader (train::tensorboard) agrees with TensorBoard's: every record's CRCs match.
void expect_own_reader_accepts(const std::string& run_dir, int records) {
  int seen = 0;
  for (const std::string& f : train::tensorboard::event_files(run_dir)) {
    const auto scan = train::tensorboard::read_records(train::files::read_text(f));
    EXPECT_EQ(scan.error, "") << f;
    seen += static_cast<int>(scan.records.size());
  }
  EXPECT_EQ(seen, records);
}

class TensorBoard : public ::testing::Test {
 protected:
  void SetUp() override {
    if (train::test::fashion_mnist_dir().empty()) {
      GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
    }
    const std::string py = train::test::venv_python();
    if (py.empty() || run_program({py, "-c", "import tensorboard.backend.event_processing.event_accumulator"}).exit_code != 0) {
      GTEST_SKIP() << "no tensorboard in the venv: scripts/setup.sh installs it";
    }
  }
};

}  // namespace

TEST_F(TensorBoard, ReadsBackWhatTheJsonlHoldsAndChangesNoParameter) {
  train::test::TempDir d("tb");
  auto plain = run_program({"bash", "-c", train_cmd("")});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto r = run_program({"bash", "-c", train_cmd("--metrics " + d.file("m.jsonl") + " --tensorboard " + d.file("tb/run"))});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(done_line(r)["params_sha256"], done_line(plain)["params_sha256"]) << "the flag changes no number";
  EXPECT_NE(r.err.find("TensorBoard event files in " + d.file("tb/run")), std::string::npos) << r.err;
  const nlohmann::json report = check_with_tensorboard(d.file("tb/run"), d.file("m.jsonl"));
  expect_consistent(report);
  EXPECT_EQ(report["jsonl_steps"]["train"].size(), 20u) << "a line per step, 10 steps an epoch";
  EXPECT_EQ(report["checked"], 20 * 4 + 2 * 7) << "loss, lr, images/s, step time per step; 7 numbers per epoch";
  EXPECT_EQ(report["jsonl_steps"]["epoch"], nlohmann::json::array({10, 20}));
  expect_own_reader_accepts(d.file("tb/run"), report["records"]);
}

// USR2 at step 7 (inside the rank, at that exact step), then a resume: both files hold the
// uninterrupted run's steps once each, and TensorBoard shows one line.
TEST_F(TensorBoard, PreemptedAndResumedRunIsOneRun) {
  train::test::TempDir d("tbresume");
  const std::string whole_flags = "--metrics " + d.file("whole.jsonl") + " --tensorboard " + d.file("whole");
  auto whole = run_program({"bash", "-c", train_cmd(whole_flags)});
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const nlohmann::json want = check_with_tensorboard(d.file("whole"), d.file("whole.jsonl"));

  const std::string flags = "--checkpoint-dir " + d.file("ck") + " --metrics " + d.file("m.jsonl") +
                            " --tensorboard " + d.file("run");
  auto stopped = run_program({"bash", "-c", train_cmd(flags)}, {"TRAIN_FAULT_SIGNAL_AT_STEP=7:USR2"});
  ASSERT_EQ(stopped.exit_code, 75) << stopped.err;
  EXPECT_EQ(done_line(stopped)["steps"], 7);
  auto resumed = run_program({"bash", "-c", train_cmd(flags)});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(done_line(resumed)["params_sha256"], done_line(whole)["params_sha256"]);
  EXPECT_EQ(train::tensorboard::event_files(d.file("run")).size(), 2u) << "one file per attempt, one folder";

  const nlohmann::json report = check_with_tensorboard(d.file("run"), d.file("m.jsonl"));
  expect_consistent(report);
  EXPECT_EQ(report["tb_steps"], want["tb_steps"]) << "the uninterrupted run's steps, each once";
  EXPECT_EQ(report["jsonl_steps"], want["jsonl_steps"]);
  expect_own_reader_accepts(d.file("run"), report["records"]);
}

// Killed (SIGKILL) in step 10, before its line, with checkpoints every 4 steps: it logged step 9
// after its last checkpoint (8, or 4 if that write hadn't finished). The resumed run does those steps
// again, so it first cuts them from both files.
TEST_F(TensorBoard, KilledRunDropsStepsItRedoes) {
  train::test::TempDir d("tbkill");
  const std::string whole_flags = "--metrics " + d.file("whole.jsonl") + " --tensorboard " + d.file("whole");
  auto whole = run_program({"bash", "-c", train_cmd(whole_flags)});
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const nlohmann::json want = check_with_tensorboard(d.file("whole"), d.file("whole.jsonl"));

  const std::string flags = "--checkpoint-dir " + d.file("ck") + " --checkpoint-every 4 --metrics " +
                            d.file("m.jsonl") + " --tensorboard " + d.file("run");
  auto killed = run_program({"bash", "-c", train_cmd(flags)}, {"TRAIN_FAULT_SIGNAL_AT_STEP=10:KILL"});
  ASSERT_NE(killed.exit_code, 0) << killed.err;
  auto resumed = run_program({"bash", "-c", train_cmd(flags)});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("--metrics " + d.file("m.jsonl") + ": dropped"), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.err.find("--tensorboard " + d.file("run") + ": cut"), std::string::npos) << resumed.err;

  const nlohmann::json report = check_with_tensorboard(d.file("run"), d.file("m.jsonl"));
  expect_consistent(report);
  EXPECT_EQ(report["tb_steps"], want["tb_steps"]);
  EXPECT_EQ(report["jsonl_steps"], want["jsonl_steps"]);
}

TEST_F(TensorBoard, UnwritableFolderIsAClearError) {
  train::test::TempDir d("tbbad");
  train::test::write_file(d.file("plain"), {'x'});
  auto r = run_program({"bash", "-c", train_cmd("--epochs 1 --tensorboard " + d.file("plain") + "/run")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--tensorboard " + d.file("plain") + "/run: expected a folder that can be created"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("Hint:"), std::string::npos) << r.err;
}
