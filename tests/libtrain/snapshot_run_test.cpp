// Snapshots in memory and the checkpoint time budget, end to end through the `train` program on the
// CPU (TRAIN_SNAPSHOT_DIR stands in for a SLURM job's /dev/shm folder): a run killed with SIGKILL
// mid-epoch, before any checkpoint, resumes from its newest snapshot and ends with the
// uninterrupted run's params_sha256; another run's snapshots are never read; a run that ends
// removes its snapshots; a checkpoint longer than the job script's signal lead is named at start.
#include "run_helpers.h"
#include "test_util.h"
#include "train/base/files.h"

#include <gtest/gtest.h>

#include <regex>

using train::test::bin;
using train::test::contains;
using train::test::run_program;
using train::test::sha_of;

namespace {

// 1200 samples, batch 64: 19 steps an epoch, 2 epochs; the first checkpoint comes at step 19.
std::string train_cmd(const std::string& ckdir, const std::string& extra = "") {
  return bin("train") + " --data " + train::test::fashion_mnist_dir() +
         " --epochs 2 --limit-train-samples 1200 --limit-test-samples 200 --device cpu --threads 1"
         " --log-interval 1 --checkpoint-dir " + ckdir + " " + extra;
}

TEST(SnapshotRun, AKilledRunResumesFromItsNewestSnapshotBitExact) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  train::test::TempDir d("snaprun");
  const auto ref = run_program({"bash", "-c", train_cmd(d.file("ck-ref"), "--snapshot-every 0")}, {}, 300);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const std::vector<std::string> snaps = {"TRAIN_SNAPSHOT_DIR=" + d.file("shm")};
  const std::string cmd = train_cmd(d.file("ck"), "--snapshot-every 3");
  // SIGKILL after step 10: no checkpoint yet (the first is the epoch's end, step 19).
  std::vector<std::string> env = snaps;
  env.push_back("TRAIN_FAULT_SIGNAL_AT_STEP=10:KILL");
  const auto killed = run_program({"bash", "-c", cmd}, env, 300);
  ASSERT_NE(killed.exit_code, 0) << killed.err;
  EXPECT_TRUE(train::files::list_dir(d.file("ck")).empty() ||
              !contains(killed.err, "checkpoint: ")) << "no checkpoint before the kill\n" << killed.err;
  // Another run (another --checkpoint-dir) in the same folder never reads them: it starts fresh.
  const auto other = run_program({"bash", "-c", train_cmd(d.file("ck-other"), "--max-steps 1")}, snaps, 300);
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_FALSE(contains(other.err, "resumed from")) << other.err;
  // The same run again: it resumes from the newest snapshot whose background write had ended
  // before the kill (step 9, or an earlier one on a slow disk) and ends as if never killed.
  const auto resumed = run_program({"bash", "-c", cmd}, snaps, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(resumed.err, m, std::regex(R"(resumed from the snapshot of step (\d+) in rank 0's node's memory)")))
      << resumed.err;
  const int step = std::stoi(m[1].str());
  EXPECT_TRUE(step % 3 == 0 && step >= 3 && step <= 9) << "step " << step << "\n" << resumed.err;
  EXPECT_EQ(sha_of(resumed), sha_of(ref));
  // The run ended: its snapshots are gone (the other run's folder went with its own end).
  EXPECT_TRUE(train::files::list_dir(d.file("shm")).empty()) << resumed.err;
}

TEST(SnapshotRun, ACheckpointLongerThanTheSignalLeadIsNamedAtStart) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  train::test::TempDir d("budget");
  // A lead of 1 ms: no checkpoint of the MNIST CNN's 14 MB fits, on any file system.
  const auto r = run_program({"bash", "-c", train_cmd(d.file("ck"), "--max-steps 2")}, {"TRAIN_SIGNAL_LEAD=0.001"}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "(estimated: ")) << r.err;
  EXPECT_TRUE(contains(r.err, "but the job script's time-limit signal comes only 0.0 s before the limit")) << r.err;
  EXPECT_TRUE(contains(r.err, "Hint: give it more lead: #SBATCH --signal=USR2@")) << r.err;
  // Without a deadline nothing is said, and no probe file is left.
  const auto quiet = run_program({"bash", "-c", train_cmd(d.file("ck2"), "--max-steps 2")}, {}, 300);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_FALSE(contains(quiet.err, "a checkpoint takes about")) << quiet.err;
  for (const std::string& name : train::files::list_dir(d.file("ck"))) EXPECT_EQ(name.find(".write-probe"), std::string::npos);
}

}  // namespace
