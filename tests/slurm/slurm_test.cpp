// SLURM tests against a real cluster (the local one of scripts/local-slurm.sh): the committed wrapper
// scripts/ddp.sh submitted with `sbatch --wait` on 2 nodes x 1 and x 2 tasks, compared with
// `trainctl local`; the preflight stopping a bad job; staged data in an array chain; a preemption
// signal, requeue and resume; `trainctl sbatch --submit/--test-only` and its cluster checks;
// generated scripts accepted by `sbatch --test-only`; `trainctl hostnames` against scontrol.
// Restarts inside the allocation are in slurm_restart_test.cpp and node_loss_test.cpp.
// A cluster that doesn't answer is a failure (start it), unless TRAIN_TEST_SLURM=0 skips them.
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_process.h"
#include "slurm_jobs.h"
#include "slurm_util.h"
#include "test_util.h"
#include "train/base/files.h"
#include "train/base/run_record.h"

namespace train {
namespace {

using namespace slurmtest;  // NOLINT: the shared helpers of the SLURM job tests
using test::run_in;
using test::TestProcess;

// ---- jobs ---------------------------------------------------------------------------------------

TEST_F(SlurmTest, DdpOnTwoNodesCompletesLikeTrainctlLocal) {
  if (!have_train()) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  test::TempDir dir("slurm-ddp-2x1", test::job_root());
  mkdir(dir.file("logs").c_str(), 0755);
  const Job job = submit_and_wait(dir.path(), concat({source_path("scripts/ddp.sh")}, kQuickTrainArgs), env_);
  ASSERT_FALSE(job.id.empty());
  const std::string log = test::read_text(dir.file("logs/ddp-" + job.id + ".out"));
  EXPECT_EQ(job.sbatch_exit, 0) << job.sbatch_err << "\nlog:\n" << log;
  EXPECT_EQ(job_state(job.id, env_), "COMPLETED") << log;
  EXPECT_TRUE(contains(jobcomp_line(job.id, dir.path(), env_), "JobState=COMPLETED")) << jobcomp_line(job.id, dir.path(), env_);

  // The summary first, then one preflight line per node, then training; the done line last.
  const std::vector<std::string> lines = test::lines_of(log);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0].rfind("ddp: job " + job.id + ": 2 node(s) node[1-2], tasks per node 1(x2), 1 CPU(s) per task, "
                           "GPUs per node 0; train " + bin("train") + ", checkpoints in checkpoints/ddp-" + job.id, 0),
            0u)
      << lines[0];
  EXPECT_TRUE(contains(log, "preflight node1: ok (data: 4 IDX files (fashion-mnist)")) << log;
  EXPECT_TRUE(contains(log, "preflight node2: ok (data: 4 IDX files (fashion-mnist)")) << log;
  // ddp.sh asks for no --time and the partition has no MaxTime: no deadline, and the log says so
  // (squeue shows UNLIMITED, or the 365 days Slurm puts in its place).
  EXPECT_TRUE(contains(log, "SLURM job has no time limit")) << log;
  EXPECT_FALSE(contains(log, "SLURM job ends")) << log;
  const nlohmann::json done = done_line(log);
  EXPECT_EQ(done.value("event", ""), "done");
  EXPECT_EQ(done.value("world_size", 0), 2);
  EXPECT_TRUE(exists(dir.file("checkpoints/ddp-" + job.id))) << "no checkpoint folder for the job";

  // The same arguments under `trainctl local --nproc 2` give the same parameters.
  EXPECT_EQ(done.value("params_sha256", "?"), local_reference(dir.path(), 2, kQuickTrainArgs));
}

TEST_F(SlurmTest, DdpOnTwoNodesWithTwoTasksEach) {
  if (!have_train()) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  test::TempDir dir("slurm-ddp-2x2", test::job_root());
  mkdir(dir.file("logs").c_str(), 0755);
  const Job job = submit_and_wait(
      dir.path(), concat({"-N", "2", "--ntasks-per-node=2", source_path("scripts/ddp.sh")}, kQuickTrainArgs), env_);
  ASSERT_FALSE(job.id.empty());
  const std::string log = test::read_text(dir.file("logs/ddp-" + job.id + ".out"));
  EXPECT_EQ(job.sbatch_exit, 0) << job.sbatch_err << "\nlog:\n" << log;
  EXPECT_EQ(job_state(job.id, env_), "COMPLETED") << log;
  EXPECT_TRUE(contains(log, "tasks per node 2(x2)")) << log;
  EXPECT_TRUE(contains(log, "preflight node1: ok (data: 4 IDX files (fashion-mnist) checked whole in "
                            "/usr/share/datasets/fashion-mnist; tasks: 2 on this node")) << log;
  const nlohmann::json done = done_line(log);
  EXPECT_EQ(done.value("event", ""), "done");
  EXPECT_EQ(done.value("world_size", 0), 4);
}

TEST_F(SlurmTest, FailedPreflightStopsTheJobBeforeTraining) {
  if (!have_train()) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  test::TempDir dir("slurm-preflight", test::job_root());
  mkdir(dir.file("logs").c_str(), 0755);
  const Job job = submit_and_wait(dir.path(), {source_path("scripts/ddp.sh"), "--data", "/nonexistent/fm"}, env_);
  ASSERT_FALSE(job.id.empty());
  const std::string log = test::read_text(dir.file("logs/ddp-" + job.id + ".out"));
  EXPECT_NE(job.sbatch_exit, 0) << log;
  EXPECT_EQ(job_state(job.id, env_), "FAILED") << log;
  for (const char* node : {"node1", "node2"}) {
    EXPECT_TRUE(contains(log, std::string("preflight ") + node + ": FAILED: --data '/nonexistent/fm': expected a "
                              "folder with the fashion-mnist files on this node, found nothing at that path. Hint: "))
        << log;
  }
  EXPECT_TRUE(contains(log, "ddp: preflight failed (see above): training not started.")) << log;
  EXPECT_FALSE(contains(log, "rendezvous")) << log;
}

TEST_F(SlurmTest, StagedDataInAnArrayChain) {
  if (!have_train()) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  const std::string data = test::fashion_mnist_dir();
  if (data.empty()) GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)";
  test::TempDir dir("slurm-stage", test::job_root());
  const std::string parent = data.substr(0, data.rfind('/'));
  const std::string folder = data.substr(data.rfind('/') + 1);
  const auto tar = test::run_process({"/bin/tar", "-cf", dir.file("fm.tar"), "-C", parent, folder}, env_, 60);
  ASSERT_EQ(tar->exit_code(), 0) << tar->err();
  const auto gen = run_in(dir.path(),
                          {bin("trainctl"), "sbatch", "--job-name", "stage", "--nodes", "2", "--stage-data", "fm.tar",
                           "--stage-subdir", folder, "--array-chain", "2", "--time", "10", "--out", "stage.sh"},
                          env_);
  ASSERT_EQ(gen->exit_code(), 0) << gen->err();
  mkdir(dir.file("logs").c_str(), 0755);
  const Job job = submit_and_wait(dir.path(), {"stage.sh", "--epochs", "1", "--limit-train-samples", "1000",
                                               "--limit-test-samples", "200", "--threads", "1"},
                                  env_);
  ASSERT_FALSE(job.id.empty());
  const std::string log = test::read_text(dir.file("logs/stage-" + job.id + "_1.out"));
  EXPECT_EQ(job.sbatch_exit, 0) << job.sbatch_err << "\nlog:\n" << log;
  EXPECT_EQ(job_state(job.id + "_1", env_), "COMPLETED") << log;
  EXPECT_EQ(job_state(job.id + "_2", env_), "CANCELLED") << "the chunk after a finished run is cancelled";
  EXPECT_FALSE(exists(dir.file("logs/stage-" + job.id + "_2.out")));
  // The chunk's own job id names the staging folder under /tmp (the local cluster sets no SLURM_TMPDIR).
  const std::string marker = "stage: job ";
  ASSERT_EQ(log.rfind(marker, 0), 0u) << log;
  const std::string chunk_id = log.substr(marker.size(), log.find(' ', marker.size()) - marker.size());
  EXPECT_TRUE(contains(log, " (chunk 1 of array " + job.id + ")")) << log;
  const std::string staged = "/tmp/train-" + user_name() + "-" + chunk_id;
  EXPECT_TRUE(contains(log, "preflight node1: ok (data: 4 IDX files (fashion-mnist) checked whole in " + staged + "/data/" +
                                folder + ";")) << log;
  EXPECT_FALSE(exists(staged)) << staged << " was not removed after training";
  EXPECT_TRUE(exists(dir.file("checkpoints/stage-" + job.id))) << "chunks share checkpoints/NAME-ARRAYJOBID";
  const nlohmann::json done = done_line(log);
  EXPECT_EQ(done.value("event", ""), "done");
  EXPECT_EQ(done.value("world_size", 0), 2);
}

TEST_F(SlurmTest, PreemptionSignalCheckpointsRequeuesAndResumes) {
  if (!have_train()) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  test::TempDir dir("slurm-requeue", test::job_root());
  mkdir(dir.file("logs").c_str(), 0755);
  const std::vector<std::string> args = {"--epochs", "2", "--limit-train-samples", "3000", "--limit-test-samples",
                                         "200", "--threads", "1"};
  const Job job = submit_and_wait(dir.path(), concat({source_path("scripts/ddp.sh")}, args), env_, [&](const std::string& id) {
    // What --signal=USR2@120 does before the time limit, now: USR2 to the job's steps (not the batch shell).
    const std::string log = dir.file("logs/ddp-" + id + ".out");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!contains(test::read_text(log), "Train Epoch: 1") && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const auto p = test::run_process({test::find_on_path("scancel"), "--signal=USR2", "--full", id}, env_, 20);
    EXPECT_EQ(p->exit_code(), 0) << p->err();
  });
  ASSERT_FALSE(job.id.empty());
  const std::string log = test::read_text(dir.file("logs/ddp-" + job.id + ".out"));
  EXPECT_EQ(job.sbatch_exit, 0) << job.sbatch_err << "\nlog:\n" << log;
  EXPECT_EQ(job_state(job.id, env_), "COMPLETED") << log;
  // Both runs append to one log (--open-mode=append); the second says it is a restart and resumes.
  EXPECT_TRUE(contains(log, "stopping for signal SIGUSR2")) << log;
  EXPECT_TRUE(contains(log, "requeued job " + job.id)) << log;
  EXPECT_TRUE(contains(log, "ddp: job " + job.id + ", restart 1: 2 node(s)")) << log;
  EXPECT_TRUE(contains(log, "resumed from checkpoints/ddp-" + job.id + "/ckpt-")) << log;
  const nlohmann::json done = done_line(log);
  EXPECT_EQ(done.value("event", ""), "done");
  EXPECT_EQ(done.value("world_size", 0), 2);
  // Resuming is exact: the same parameters as an uninterrupted run.
  EXPECT_EQ(done.value("params_sha256", "?"), local_reference(dir.path(), 2, args));
}

// A job that runs into its time limit with no --signal at all: train knows the end time from
// squeue, checkpoints --time-margin seconds before it, requeues, and the second run finishes. The
// first run's margin (59.9 s of a 1-minute limit) puts the deadline before training starts, so it
// stops after its first step on any machine; the requeued run (SLURM_RESTART_COUNT=1) has no
// margin and finishes. No assumption about how long an epoch takes.
TEST_F(SlurmTest, TimeLimitIsCheckpointedAndRequeuedNotKilled) {
  if (!have_train()) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  test::TempDir dir("slurm-timelimit", test::job_root());
  mkdir(dir.file("logs").c_str(), 0755);
  const std::string script =
      "#!/bin/bash\n"
      "#SBATCH --job-name=tl --nodes=2 --ntasks-per-node=1 --time=1 --requeue --open-mode=append\n"
      "#SBATCH --output=logs/tl-%j.out\n"
      "margin=0; [ \"${SLURM_RESTART_COUNT:-0}\" = 0 ] && margin=59.9\n"
      "echo \"tl: restart ${SLURM_RESTART_COUNT:-0}, margin $margin\"\n"
      "srun --kill-on-bad-exit=1 \"$TRAIN_BIN\" --checkpoint-dir ck-$SLURM_JOB_ID --time-margin $margin \"$@\"\n";
  test::write_file(dir.file("tl.sh"), std::vector<uint8_t>(script.begin(), script.end()));
  const std::vector<std::string> args = {"--epochs", "1", "--limit-train-samples", "6000", "--limit-test-samples", "500",
                                         "--threads", "1", "--log-interval", "20"};
  const Job job = submit_and_wait(dir.path(), concat({dir.file("tl.sh")}, args), env_);
  ASSERT_FALSE(job.id.empty());
  const std::string log = test::read_text(dir.file("logs/tl-" + job.id + ".out"));
  EXPECT_EQ(job_state(job.id, env_, dir.path()), "COMPLETED") << log;
  // The end as a date and the time left (the limit is 1 minute), not epoch seconds.
  static const std::regex kEnds(R"(SLURM job ends \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+, in (1 min 00 s|\d{1,2} s); checkpointing 60 s before it)");
  EXPECT_TRUE(std::regex_search(log, kEnds)) << log;
  EXPECT_TRUE(contains(log, "stopping for the job's time limit at epoch 1, step 1")) << log;
  EXPECT_TRUE(contains(log, "requeued job " + job.id)) << log;
  EXPECT_TRUE(contains(log, "tl: restart 1, margin 0")) << log;
  EXPECT_TRUE(contains(log, "resumed from ck-" + job.id + "/ckpt-1.pt")) << log;
  EXPECT_FALSE(contains(log, "DUE TO TIME LIMIT")) << "slurm killed the job:\n" << log;
  const nlohmann::json done = done_line(log);
  EXPECT_EQ(done.value("event", ""), "done");
  EXPECT_EQ(done.value("steps", 0), 47);  // ceil(3000 / 64): nothing trained twice, nothing lost
  // Stopping for the time limit and resuming is exact.
  EXPECT_EQ(done.value("params_sha256", "?"), local_reference(dir.path(), 2, args));
}

// A plain `scancel` means "stop": train checkpoints, never requeues, and the job ends CANCELLED.
TEST_F(SlurmTest, PlainScancelCancelsWithoutRequeue) {
  if (!have_train()) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  test::TempDir dir("slurm-scancel", test::job_root());
  mkdir(dir.file("logs").c_str(), 0755);
  // 60000 samples x 3 epochs: far more than the test lets run; scancel comes once training logs.
  const std::vector<std::string> args = {"--epochs", "3", "--limit-test-samples", "200", "--threads", "1",
                                         "--log-interval", "5"};
  const Job job = submit_and_wait(dir.path(), concat({source_path("scripts/ddp.sh")}, args), env_, [&](const std::string& id) {
    const std::string log = dir.file("logs/ddp-" + id + ".out");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!contains(test::read_text(log), "Train Epoch: 1 [") && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const auto p = test::run_process({test::find_on_path("scancel"), id}, env_, 20);
    EXPECT_EQ(p->exit_code(), 0) << p->err();
  });
  ASSERT_FALSE(job.id.empty());
  // sbatch --wait returns once the job is cancelled, while its nodes may still be COMPLETING it
  // (the step's cleanup, during which train writes its checkpoint and last lines); wait for the
  // final state before reading the log, which also gives the next test idle nodes.
  std::string state = job_state(job.id, env_, dir.path());
  for (int i = 0; i < 600 && state == "COMPLETING"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    state = job_state(job.id, env_, dir.path());
  }
  const std::string log = test::read_text(dir.file("logs/ddp-" + job.id + ".out"));
  EXPECT_EQ(state, "CANCELLED") << log;
  EXPECT_TRUE(contains(log, "stopping for SIGTERM (cancelled: no requeue)")) << log;
  EXPECT_TRUE(contains(log, "cancelled: not requeued; to go on, run train again with --checkpoint-dir checkpoints/ddp-" +
                                job.id + " (it resumes from checkpoints/ddp-" + job.id + "/ckpt-")) << log;
  // The job script's hint: the script as submitted (not SLURM's spool copy), the job's arguments, the
  // checkpoint folder, from the submit dir. (KilledRankEndsTheJobAndResubmissionResumes runs it.)
  std::string expected = "To go on from it: cd " + dir.path() + " && sbatch " + source_path("scripts/ddp.sh");
  for (const std::string& a : args) expected += " " + a;
  EXPECT_TRUE(contains(log, expected + " --checkpoint-dir checkpoints/ddp-" + job.id + "  # ")) << expected << "\n" << log;
  EXPECT_FALSE(contains(log, "slurm_script")) << log;
  EXPECT_FALSE(contains(log, "requeued job")) << log;
  EXPECT_FALSE(contains(log, "restart 1")) << log;
  const std::vector<std::string> ckpts = train::test::lines_of(
      test::run_process({"/bin/sh", "-c", "ls " + dir.file("checkpoints/ddp-" + job.id)}, env_, 10)->out());
  EXPECT_FALSE(ckpts.empty()) << "the cancel wrote no checkpoint";
  // The job stays ended: nothing puts it back in the queue.
  const auto q = test::run_process({test::find_on_path("squeue"), "-h", "-j", job.id, "-o", "%T"}, env_, 20);
  EXPECT_EQ(q->out(), "") << q->out();
}

// The job script that cluster wikis hand out, verbatim but for the program line and the
// rendezvous port (a free one instead of 29500): WORLD_SIZE from SLURM_NNODES x
// SLURM_NTASKS_PER_NODE, MASTER_ADDR from `scontrol show hostnames | head -n 1`, then srun.
// Its --cpus-per-task=32 and --mem=32G don't fit the 2-CPU local nodes: the command line
// overrides them, as sbatch options do.
TEST_F(SlurmTest, TheWikiJobScriptRunsVerbatim) {
  if (!have_train()) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  test::TempDir dir("slurm-wiki", test::job_root());
  mkdir(dir.file("logs").c_str(), 0755);
  const std::string port = std::to_string(test::free_port());
  const std::string script =
      "#!/bin/bash\n"
      "#SBATCH --job-name=ddp-torch     # create a short name for your job\n"
      "#SBATCH -p debug\n"
      "#SBATCH --nodes=2                # node count\n"
      "#SBATCH --ntasks-per-node=1      # total number of tasks per node\n"
      "#SBATCH --cpus-per-task=32        # cpu-cores per task (>1 if multi-threaded tasks)\n"
      "#SBATCH --mem=32G                # total memory per node (4 GB per cpu-core is default)\n"
      "#SBATCH --time=1:00:00          # total run time limit (HH:MM:SS)\n"
      "#SBATCH -o logs/out%j.log\n"
      "#SBATCH -e logs/err%j.log\n"
      "\n"
      "export MASTER_PORT=" + port + "\n"
      "export WORLD_SIZE=$(($SLURM_NNODES * $SLURM_NTASKS_PER_NODE))\n"
      "echo \"WORLD_SIZE=\"$WORLD_SIZE\n"
      "\n"
      "master_addr=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
      "export MASTER_ADDR=$master_addr\n"
      "echo \"MASTER_ADDR=\"$MASTER_ADDR\n"
      "\n"
      "module purge\n"
      "source /public/home/lili/.bashrc\n"
      "conda activate torch22cpu\n"
      "\n"
      "srun " + bin("train") + " --epochs=1 --limit-train-samples=2000 --limit-test-samples=500 --threads=1\n";
  test::write_file(dir.file("wiki.sh"), std::vector<uint8_t>(script.begin(), script.end()));
  const Job job = submit_and_wait(dir.path(), {"--cpus-per-task=1", "--mem=0", dir.file("wiki.sh")}, env_);
  ASSERT_FALSE(job.id.empty());
  const std::string out = test::read_text(dir.file("logs/out" + job.id + ".log"));
  const std::string err = test::read_text(dir.file("logs/err" + job.id + ".log"));
  EXPECT_EQ(job.sbatch_exit, 0) << job.sbatch_err << "\nout:\n" << out << "\nerr:\n" << err;
  EXPECT_EQ(job_state(job.id, env_, dir.path()), "COMPLETED") << err;
  EXPECT_TRUE(contains(out, "WORLD_SIZE=2")) << out;
  EXPECT_TRUE(contains(out, "MASTER_ADDR=node1")) << out;
  EXPECT_TRUE(contains(err, "rendezvous: 2 ranks at node1:" + port)) << err;
  const nlohmann::json done = done_line(out);
  EXPECT_EQ(done.value("event", ""), "done");
  EXPECT_EQ(done.value("world_size", 0), 2);
  EXPECT_EQ(done.value("params_sha256", "?"),
            local_reference(dir.path(), 2, {"--epochs=1", "--limit-train-samples=2000", "--limit-test-samples=500",
                                            "--threads=1"}));
}

// Both local nodes are this machine, so DDP would sum gradients in shared memory; with
// --shm-allreduce off Gloo carries them between the nodes' addresses, with the same result.
TEST_F(SlurmTest, GlooBetweenTheNodesGivesTheSharedMemoryResult) {
  if (!have_train()) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  test::TempDir dir("slurm-gloo", test::job_root());
  mkdir(dir.file("logs").c_str(), 0755);
  Env env = env_;
  env["TRAIN_LOG_LEVEL"] = "debug";
  const Job job = submit_and_wait(
      dir.path(), concat({source_path("scripts/ddp.sh")}, concat(kQuickTrainArgs, {"--shm-allreduce", "off"})), env);
  ASSERT_FALSE(job.id.empty());
  const std::string log = test::read_text(dir.file("logs/ddp-" + job.id + ".out"));
  EXPECT_EQ(job_state(job.id, env_, dir.path()), "COMPLETED") << log;
  EXPECT_TRUE(contains(log, "DDP: Gloo sums the gradients")) << log;
  EXPECT_FALSE(contains(log, "DDP: gradients are summed in shared memory")) << log;
  const nlohmann::json done = done_line(log);
  EXPECT_EQ(done.value("world_size", 0), 2);
  EXPECT_EQ(done.value("params_sha256", "?"), local_reference(dir.path(), 2, kQuickTrainArgs));
}

TEST_F(SlurmTest, TrainctlSubmitMakesTheLogFolderAndPrintsTheJobId) {
  if (!have_train()) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  test::TempDir dir("slurm-submit", test::job_root());
  const auto p = run_in(dir.path(),
                        {bin("trainctl"), "sbatch", "--job-name", "submitted", "--submit", "--", "--epochs", "1",
                         "--max-steps", "2", "--limit-test-samples", "100", "--threads", "1"},
                        env_);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  const std::string id = test::last_line(p->out());
  ASSERT_TRUE(!id.empty() && id.find_first_not_of("0123456789") == std::string::npos) << p->out();
  EXPECT_TRUE(contains(p->err(), "submitted job " + id + " (submitted), log logs/submitted-" + id + ".out")) << p->err();
  EXPECT_TRUE(exists(dir.file("logs"))) << "--submit creates the log folder before sbatch";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kJobTimeoutSeconds);
  std::string state;
  while (std::chrono::steady_clock::now() < deadline) {
    state = job_state(id, env_);
    if (state != "PENDING" && state != "RUNNING" && state != "CONFIGURING" && state != "COMPLETING") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  if (state == "PENDING" || state == "RUNNING") test::run_process({test::find_on_path("scancel"), id}, env_, 20);
  const std::string log = test::read_text(dir.file("logs/submitted-" + id + ".out"));
  EXPECT_EQ(state, "COMPLETED") << log;
  EXPECT_EQ(done_line(log).value("event", ""), "done");
}

// ---- generated scripts on the live cluster ------------------------------------------------------

TEST_F(SlurmTest, SbatchTestOnlyAcceptsGeneratedScripts) {
  test::TempDir dir("slurm-test-only", test::job_root());
  const std::vector<std::vector<std::string>> option_sets = {
      {},
      {"--job-name", "ddp", "--nodes", "2", "--ntasks-per-node", "2"},
      {"--job-name", "cpus", "--nodes", "2", "--cpus-per-task", "2", "--mem", "1000", "--time", "10", "--partition",
       "debug"},
      {"--job-name", "chain", "--array-chain", "3", "--time", "1-00:00:00", "--signal", "XCPU@600", "--", "--preempt-signals", "XCPU"},
      {"--setup", "module load x", "--container", "img.sif", "--stage-data", "d.tar", "--stage-subdir", "x",
       "--signal", "none", "--output", "out/%j.txt", "--", "--epochs", "3"},
      {"--nodes", "1", "--time", "2-3:30:15", "--signal", "R:USR2@300"},
  };
  int n = 0;
  for (const std::vector<std::string>& options : option_sets) {
    const std::string script = dir.file("gen" + std::to_string(n++) + ".sh");
    std::vector<std::string> argv = {bin("trainctl"), "sbatch", "--out", script};
    argv.insert(argv.end(), options.begin(), options.end());
    const auto gen = test::run_process(argv, env_, 30);
    ASSERT_EQ(gen->exit_code(), 0) << gen->err();
    const auto p = run_in(dir.path(), {test::find_on_path("sbatch"), "--test-only", script}, env_);
    EXPECT_EQ(p->exit_code(), 0) << script << ": " << p->err();
    EXPECT_TRUE(contains(p->err(), " to start at ")) << p->err();
  }
  // The committed wrappers too, except the GPU one: this cluster has no GPUs, and sbatch says so.
  for (const char* name : {"scripts/ddp.sh", "scripts/ddp-cpu-debug.sh"}) {
    const auto p = run_in(dir.path(), {test::find_on_path("sbatch"), "--test-only", source_path(name)}, env_);
    EXPECT_EQ(p->exit_code(), 0) << name << ": " << p->err();
    EXPECT_TRUE(contains(p->err(), " to start at ")) << p->err();
  }
  const auto gpu = run_in(dir.path(), {test::find_on_path("sbatch"), "--test-only", source_path("scripts/ddp-gpu.sh")}, env_);
  EXPECT_NE(gpu->exit_code(), 0);
  EXPECT_TRUE(contains(gpu->err(), "gres")) << gpu->err();

  // trainctl asks for itself, and says when the job would start.
  const auto t = run_in(dir.path(), {bin("trainctl"), "sbatch", "--nodes", "2", "--test-only"}, env_);
  EXPECT_EQ(t->exit_code(), 0) << t->err();
  EXPECT_TRUE(contains(t->out(), "sbatch --test-only: the job would start at ")) << t->out();
  EXPECT_TRUE(contains(t->out(), " on node[1-2] in partition debug (2 processors)")) << t->out();
}

TEST_F(SlurmTest, CommittedWrappersMatchTheGenerator) {
  test::TempDir dir("slurm-wrappers", test::job_root());
  Env env = env_;
  env["TRAINCTL"] = bin("trainctl");
  const auto p = test::run_process({"/bin/bash", source_path("scripts/regenerate-wrappers.sh"), dir.path()}, env, 60);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  for (const char* name : {"ddp.sh", "ddp-gpu.sh", "ddp-cpu-debug.sh"}) {
    EXPECT_EQ(test::read_text(source_path(std::string("scripts/") + name)), test::read_text(dir.file(name)))
        << "scripts/" << name << " drifted from `trainctl sbatch`: rerun scripts/regenerate-wrappers.sh";
  }
}

TEST_F(SlurmTest, ValidationAsksTheLiveCluster) {
  struct Case {
    std::vector<std::string> options;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {{"--nodes", "3"}, "--nodes 3: expected at most the 2 node(s) of partition debug (the default), found 3 requested (sinfo)."},
      {{"--ntasks-per-node", "3"}, "expected at most the 2 CPUs of a node in partition debug"},
      {{"--gres", "gpu:1"}, "--gres gpu:1: expected partition debug (the default) to have GPUs (gres gpu)"},
      {{"--gpus-per-node", "1"}, "--gpus-per-node 1: expected partition debug (the default) to have GPUs"},
      {{"--partition", "gpu"}, "--partition gpu: expected one of this cluster's partitions (debug (default))"},
      {{"--mem", "4G"}, "--mem 4G: expected at most the 2000 MB of a node in partition debug"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {bin("trainctl"), "sbatch"};
    argv.insert(argv.end(), c.options.begin(), c.options.end());
    const auto p = test::run_process(argv, env_, 30);
    EXPECT_EQ(p->exit_code(), 1) << c.fragment;
    EXPECT_TRUE(contains(p->err(), c.fragment)) << p->err();
    EXPECT_TRUE(contains(p->err(), "Hint: ")) << p->err();
    // Without the cluster checks the same request generates.
    argv.push_back("--no-cluster-checks");
    EXPECT_EQ(test::run_process(argv, env_, 30)->exit_code(), 0) << c.fragment;
  }
}

// ---- hostlists ------------------------------------------------------------------------------------

TEST_F(SlurmTest, TrainctlHostnamesMatchesScontrol) {
  // The full table of expressions lives in tests/base/hostlist_test.cpp (against a minimal config);
  // this runs a part of it through the live cluster's scontrol, plus the cluster's own node list.
  const auto sinfo = test::run_process({test::find_on_path("sinfo"), "-h", "-o", "%N"}, env_, 20);
  ASSERT_EQ(sinfo->exit_code(), 0) << sinfo->err();
  std::vector<std::string> exprs = {test::last_line(sinfo->out()), "node[1-2]", "node[01-04,07]",
                                    "a,b[1-2],c-ib[001,003]", "gpu[1-2]-ib[3-4]", "n[098-101]", "linux[1,2]",
                                    "linux1,linux2", "my-node-01,my-node-02", "x[1-2]y[1-2]z[1-2]", "n[9-11]"};
  for (const std::string& expr : exprs) {
    const auto ours = test::run_process({bin("trainctl"), "hostnames", expr}, env_, 20);
    const auto theirs = test::run_process({test::find_on_path("scontrol"), "show", "hostnames", expr}, env_, 20);
    ASSERT_EQ(theirs->exit_code(), 0) << expr << ": " << theirs->err();
    EXPECT_EQ(ours->exit_code(), 0) << expr << ": " << ours->err();
    EXPECT_EQ(ours->out(), theirs->out()) << "expression: " << expr;
  }
  // Inside a job, both read SLURM_JOB_NODELIST. Run from outside the checkout, as every job of the
  // suite (test::job_root()), so the user's `trainctl status` there never lists it.
  test::TempDir dir("slurm-hostnames", test::job_root());
  const auto job = run_in(
      dir.path(),
      {test::find_on_path("srun"), "-N", "2", "-n", "2", "--time=1", "/bin/sh", "-c",
       "echo \"$(\"$0\" hostnames | tr '\\n' ' ')| $(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | tr '\\n' ' ')\"",
       bin("trainctl")},
      env_, 60);
  ASSERT_EQ(job->exit_code(), 0) << job->err();
  const std::vector<std::string> lines = test::lines_of(job->out());
  ASSERT_EQ(lines.size(), 2u) << job->out();
  for (const std::string& line : lines) EXPECT_EQ(line, "node1 node2 | node1 node2 ") << job->out();
}

}  // namespace
}  // namespace train
