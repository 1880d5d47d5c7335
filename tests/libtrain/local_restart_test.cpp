// `trainctl local --max-restarts` end to end with the `train` program on the CPU (the
// same restarts as `trainctl run`, without SLURM): a rank killed with SIGKILL mid-epoch is
// launched again, resumes from the newest snapshot in this machine's memory and the run ends with
// the uninterrupted run's params_sha256; a stalled rank (train's exit 79) is relaunched too; a bug
// (the same exception every launch) is not, and the log says why; the snapshots' folder trainctl
// made is gone at the end.
#include "run_helpers.h"
#include "test_util.h"
#include "train/base/files.h"

#include <gtest/gtest.h>

#include <regex>

using train::test::bin;
using train::test::count;
using train::test::run_program;
using train::test::sha_of;

namespace {

// 1200 samples, 2 ranks x batch 32: 19 steps an epoch, 2 epochs; the first checkpoint at step 19.
std::vector<std::string> local_train(const std::string& ckdir, int max_restarts, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {bin("trainctl"), "local", "--nproc", "2", "--no-prefix", "--grace-period", "2"};
  if (max_restarts > 0) {
    argv.push_back("--max-restarts");
    argv.push_back(std::to_string(max_restarts));
  }
  const std::vector<std::string> train = {
      "--", bin("train"), "--data", train::test::fashion_mnist_dir(), "--epochs", "2", "--batch-size", "32",
      "--limit-train-samples", "1200", "--limit-test-samples", "200", "--device", "cpu", "--threads", "1",
      "--log-interval", "1", "--checkpoint-dir", ckdir, "--resume", "auto"};
  argv.insert(argv.end(), train.begin(), train.end());
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

class LocalRestart : public ::testing::Test {
 protected:
  void SetUp() override {
    if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  }
  std::string reference(train::test::TempDir& d) {
    const auto ref = run_program(local_train(d.file("ck-ref"), 0, {"--snapshot-every", "0"}), {}, 300);
    EXPECT_EQ(ref.exit_code, 0) << ref.err;
    return sha_of(ref);
  }
};

TEST_F(LocalRestart, AKilledRankIsRelaunchedFromItsSnapshotAndTheRunEndsBitExact) {
  train::test::TempDir d("localrestart");
  const std::string ref = reference(d);
  // Rank 1 gets SIGKILL after step 10 of the first launch: no checkpoint yet (the first is step 19).
  const auto r = run_program(local_train(d.file("ck"), 2, {"--snapshot-every", "3"}),
                             {"TRAIN_FAULT_SIGNAL_AT_STEP=10:KILL:1", "TRAIN_FAULT_LAUNCH=0"}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count(r.err, "restart 1/2: lost rank (exit 137)"), 2) << "decided, then seen training\n" << r.err;
  EXPECT_EQ(count(r.err, "restart 2/2"), 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex(R"(resumed from the snapshot of step (\d+), [0-9.]+ s after the failure)")))
      << r.err;
  const int step = std::stoi(m[1].str());
  EXPECT_TRUE(step % 3 == 0 && step >= 3 && step <= 9) << "step " << step << "\n" << r.err;
  EXPECT_EQ(sha_of(r), ref);
  // The snapshots' folder trainctl local made for the run (train names it at start) is gone.
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex(R"(snapshots in memory: (/dev/shm/libtrain-\d+-local-\d+)/)")))
      << r.err;
  EXPECT_FALSE(train::files::exists(m[1].str())) << m[1].str();
}

TEST_F(LocalRestart, AStalledRankIsRelaunched) {
  train::test::TempDir d("localstall");
  const std::string ref = reference(d);
  // Rank 1 sleeps 600 s in step 8's get_batch: the roll-call names it after 2 s, train exits 79.
  const auto r = run_program(local_train(d.file("ck"), 1, {"--snapshot-every", "3", "--stall-timeout", "2"}),
                             {"TRAIN_FAULT_SLEEP_AT_STEP=8:600:1", "TRAIN_FAULT_LAUNCH=0"}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GE(count(r.err, "restart 1/1: stalled rank (exit 79)"), 1) << r.err;
  EXPECT_EQ(sha_of(r), ref);
}

TEST_F(LocalRestart, TheSameExceptionIsNotRelaunchedAndTheLogSaysWhy) {
  train::test::TempDir d("localbug");
  const auto r = run_program(local_train(d.file("ck"), 3, {"--snapshot-every", "3"}), {"TRAIN_FAULT_THROW_AT_STEP=5"},
                             300);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(count(r.err, "restart 1/"), 0) << r.err;
  EXPECT_EQ(count(r.err, "exit 1, an error in the code, configuration or data (the first error above): not restarted"),
            1)
      << r.err;
}

TEST_F(LocalRestart, WithoutResumeItWarnsThatARelaunchStartsOver) {
  train::test::TempDir d("localnoresume");
  const auto r = run_program({bin("trainctl"), "local", "--nproc", "1", "--max-restarts", "1", "--", "/bin/true"}, {}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count(r.err, "but the program's arguments have no --resume: a relaunch would start again from step 0"), 1)
      << r.err;
}

}  // namespace
