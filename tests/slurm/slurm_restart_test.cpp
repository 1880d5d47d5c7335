// Restarts inside the allocation on the real cluster (the local one of
// scripts/local-slurm.sh): a rank killed with SIGKILL is relaunched by `trainctl run` in the same
// job and the run ends bit-exact; a bug is not restarted and the log says why; without restarts a
// killed rank ends the job and a resubmission resumes. A node that dies: node_loss_test.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "slurm_jobs.h"
#include "train/base/files.h"
#include "train/base/run_record.h"

namespace train {
namespace {

using namespace slurmtest;  // NOLINT: the shared helpers of the SLURM job tests
using test::run_in;
using test::TestProcess;

// kill -9 of one rank mid-training (rank 1 raises SIGKILL after step 6, on the first launch only):
// trainctl run launches the step again in the same job, on both nodes (node2 is fine: only a process
// died), train resumes from ckpt-4, and the run ends with the uninterrupted run's parameters. The
// run record and trainctl status show the restart.
TEST_F(SlurmTest, KilledRankRestartsInTheAllocationAndFinishesExactly) {
  if (!have_train()) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  test::TempDir dir("slurm-restart", test::job_root());
  mkdir(dir.file("logs").c_str(), 0755);
  // A checkpoint at step 4 and a snapshot in each node's memory at step 5: the relaunch resumes
  // from the snapshot, or from the checkpoint where the kill came before the snapshot's write ended.
  const std::vector<std::string> args = {"--epochs", "1", "--limit-train-samples", "1280", "--limit-test-samples",
                                         "200", "--threads", "1", "--checkpoint-every", "4", "--snapshot-every", "5",
                                         "--log-interval", "2"};
  Env env = env_;
  env["TRAIN_FAULT_SIGNAL_AT_STEP"] = "6:KILL:1";
  env["TRAIN_FAULT_LAUNCH"] = "0";
  const Job job = submit_and_wait(dir.path(), concat({source_path("scripts/ddp.sh")}, args), env);
  ASSERT_FALSE(job.id.empty());
  const std::string log = test::read_text(dir.file("logs/ddp-" + job.id + ".out"));
  EXPECT_EQ(job.sbatch_exit, 0) << job.sbatch_err << "\nlog:\n" << log;
  EXPECT_EQ(job_state(job.id, env_), "COMPLETED") << log;
  EXPECT_TRUE(contains(log, "srun: error: node2: task 1: Killed")) << log;
  EXPECT_TRUE(contains(log, "trainctl run: restart 1/3: lost rank on node2 (exit ")) << log;
  EXPECT_TRUE(contains(log, "all nodes kept; relaunching on 2 node(s), 2 task(s), from ")) << log;
  EXPECT_TRUE(contains(log, "resumed from the snapshot of step 5 in rank ") ||
              contains(log, "resumed from checkpoints/ddp-" + job.id + "/ckpt-4.pt")) << log;
  EXPECT_TRUE(contains(log, "snapshots in memory: /dev/shm/libtrain-")) << log;
  EXPECT_FALSE(contains(log, ", restart 1: 2 node(s)")) << "no requeue: the same run of the job\n" << log;
  const nlohmann::json done = done_line(log);
  EXPECT_EQ(done.value("event", ""), "done");
  EXPECT_EQ(done.value("world_size", 0), 2);
  EXPECT_EQ(done.value("params_sha256", "?"), local_reference(dir.path(), 2, args));
  const std::optional<RunRecord> record = RunRecord::load(RunRecord::path_for(dir.path(), job.id));
  ASSERT_TRUE(record.has_value()) << "no run record for job " << job.id;
  ASSERT_EQ(record->restarts.size(), 1u);
  EXPECT_EQ(record->restarts[0].cause, "lost rank");
  EXPECT_EQ(record->restarts[0].nodes, std::vector<std::string>{"node2"});
  EXPECT_FALSE(record->restarts[0].excluded);
  // Where the recovery's seconds went, from train's own record of the relaunch (in order).
  const RestartEntry& e = record->restarts[0];
  EXPECT_EQ(e.launch.number, 1);
  EXPECT_TRUE(e.launch.source == "snapshot" || e.launch.source == "checkpoint") << e.launch.source;
  EXPECT_EQ(e.resumed_step, e.launch.source == "snapshot" ? 5 : 4);
  EXPECT_GE(e.failed_step, e.resumed_step) << "train had reached at least the step it resumed from";
  const std::vector<double> times = {e.time, e.relaunched, e.launch.started, e.launch.connecting,
                                     e.launch.connected, e.launch.loaded, e.launch.training};
  for (size_t i = 1; i < times.size(); ++i) EXPECT_LE(times[i - 1], times[i] + 0.05) << "point " << i << " of the relaunch";
  EXPECT_GT(e.time, 0);
  EXPECT_NEAR(e.seconds, e.launch.training - e.time, 1e-6);
  EXPECT_TRUE(contains(log, " s after the failure (relaunch ")) << log;
  const auto status = run_in(dir.path(), {bin("trainctl"), "status", job.id}, env_, 60);
  EXPECT_TRUE(contains(status->out(), "  restarts    1 in the allocation (trainctl run); last: restart 1: lost rank on "
                                      "node2 (exit ")) << status->out() << status->err();
}

// A bug (an error after step 3 on rank 1, every launch): not restarted, and the log says why.
TEST_F(SlurmTest, ABugIsNotRestartedAndTheLogSaysWhy) {
  if (!have_train()) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  test::TempDir dir("slurm-bug", test::job_root());
  mkdir(dir.file("logs").c_str(), 0755);
  Env env = env_;
  env["TRAIN_FAULT_THROW_AT_STEP"] = "3:1";
  const Job job = submit_and_wait(dir.path(), concat({source_path("scripts/ddp.sh")}, kQuickTrainArgs), env);
  ASSERT_FALSE(job.id.empty());
  const std::string log = test::read_text(dir.file("logs/ddp-" + job.id + ".out"));
  EXPECT_EQ(job_state(job.id, env_), "FAILED") << log;
  EXPECT_TRUE(contains(log, "TRAIN_FAULT_THROW_AT_STEP: an injected error after step 3")) << log;
  EXPECT_TRUE(contains(log, "trainctl run: exit 1, an error in the code, configuration or data (the first error above): "
                            "not restarted")) << log;
  EXPECT_FALSE(contains(log, "trainctl run: restart")) << log;
  EXPECT_TRUE(contains(log, "training failed: exit code 1 ")) << log;
  // The ranks made the job's snapshot folders in the nodes' memory; trainctl run removed them.
  EXPECT_TRUE(contains(log, "snapshots in memory: /dev/shm/libtrain-")) << log;
  EXPECT_FALSE(files::exists("/dev/shm/libtrain-" + std::to_string(::getuid()) + "-" + job.id))
      << "a failed job's snapshots outlived it";
}

// kill -9 of one rank in a script made with --max-restarts 0: the job ends soon (well within
// --dist-timeout) with an error naming the task, and a resubmission pointed at the job's
// checkpoints resumes from the last one.
TEST_F(SlurmTest, KilledRankWithoutRestartsEndsTheJobAndResubmissionResumes) {
  if (!have_train()) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  test::TempDir dir("slurm-kill9", test::job_root());
  mkdir(dir.file("logs").c_str(), 0755);
  const auto generated = test::run_process({bin("trainctl"), "sbatch", "--job-name", "ddp", "--nodes", "2",
                                            "--ntasks-per-node", "1", "--no-cluster-checks", "--max-restarts", "0",
                                            "--out", dir.file("job.sh")}, env_, 60);
  ASSERT_EQ(generated->exit_code(), 0) << generated->err();
  const std::vector<std::string> args = {"--epochs", "1", "--limit-train-samples", "12000", "--limit-test-samples",
                                         "300", "--threads", "1", "--checkpoint-every", "10", "--dist-timeout", "60",
                                         "--log-interval", "5"};
  const Job job = submit_and_wait(dir.path(), concat({dir.file("job.sh")}, args), env_, [&](const std::string& id) {
    const std::string ckpt = dir.file("checkpoints/ddp-" + id + "/ckpt-10.pt");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (!exists(ckpt) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const int pid = find_task_pid(id, 1);
    ASSERT_GT(pid, 0) << "no train process with SLURM_PROCID=1 for job " << id;
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    const auto t0 = std::chrono::steady_clock::now();
    while (!job_state(id, env_).empty() && job_state(id, env_) == "RUNNING" &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  ASSERT_FALSE(job.id.empty());
  const std::string log = test::read_text(dir.file("logs/ddp-" + job.id + ".out"));
  EXPECT_EQ(job_state(job.id, env_), "FAILED") << log;
  // srun ended the step when the task died; no rank ran into the distributed timeout.
  EXPECT_FALSE(contains(log, "(timeout 60 s)")) << log;
  EXPECT_TRUE(contains(log, "task 1")) << "srun names the killed task:\n" << log;
  EXPECT_TRUE(contains(log, "not restarted, 0 restart(s) done already (--max-restarts 0)")) << log;
  EXPECT_TRUE(contains(log, "training failed")) << log;
  const std::string hint = "resubmit with --checkpoint-dir checkpoints/ddp-" + job.id + ": ";
  ASSERT_TRUE(contains(log, hint)) << log;

  // The command the log prints, run as a user pastes it (from another folder; SBATCH_WAIT=1 is
  // sbatch --wait), goes on from the newest checkpoint.
  std::string command = log.substr(log.find(hint) + hint.size());
  command = command.substr(0, command.find('\n'));
  EXPECT_TRUE(contains(command, "sbatch " + dir.file("job.sh") + " --epochs 1 ")) << command;
  Env waiting = env_;
  waiting["SBATCH_WAIT"] = "1";
  TestProcess pasted({"/bin/bash", "-c", "cd / && " + command}, waiting);
  ASSERT_TRUE(pasted.wait_for_stdout([](const std::string& out) { return contains(out, "\n"); }, 30)) << pasted.err();
  Job again;
  again.id = test::last_line(pasted.out()).substr(test::last_line(pasted.out()).rfind(' ') + 1);
  ASSERT_FALSE(again.id.empty()) << pasted.out() << pasted.err();
  if (!pasted.wait(kJobTimeoutSeconds)) {
    test::run_process({test::find_on_path("scancel"), again.id}, env_, 20);
    FAIL() << "job " << again.id << " did not end within " << kJobTimeoutSeconds << " s; cancelled it";
  }
  const std::string log2 = test::read_text(dir.file("logs/ddp-" + again.id + ".out"));
  EXPECT_EQ(job_state(again.id, env_), "COMPLETED") << log2;
  EXPECT_TRUE(contains(log2, "resumed from checkpoints/ddp-" + job.id + "/ckpt-")) << log2;
  const nlohmann::json done = done_line(log2);
  EXPECT_EQ(done.value("event", ""), "done");
  EXPECT_EQ(done.value("steps", 0), 94);  // ceil(6000 / 64) per rank
}

}  // namespace
}  // namespace train
