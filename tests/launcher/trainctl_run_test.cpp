// Tests for `trainctl run` (launcher/src/run_step.cpp) under a fake srun and scontrol, without SLURM:
// a lost rank is launched again with TRAIN_RESTART_COUNT=1 and its restart lands in the run record;
// a bug, the same failure at the same step twice, and a preemption are not; a node the health check
// names bad, or one SLURM reports down, is left out of the next launch.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <map>
#include <string>
#include <vector>

#include "sbatch_test.h"
#include "test_process.h"
#include "test_util.h"
#include "train/base/run_record.h"

namespace train {
namespace {

/// A submit dir with a fake srun that logs its arguments and runs launch-N.sh (N: the how-manieth
/// launch, from 0) for what the step prints and how it ends, and a fake scontrol for node states.
class FakeAllocation {
 public:
  FakeAllocation() : dir_("trainctl-run") {
    mkdir(dir_.file("bin").c_str(), 0755);
    write_text(dir_.file("bin/srun"),
               "#!/bin/bash\n"
               "n=$(cat \"$FAKE_DIR/launches\" 2>/dev/null || echo 0); echo $((n + 1)) > \"$FAKE_DIR/launches\"\n"
               "echo \"srun $* (TRAIN_RESTART_COUNT=$TRAIN_RESTART_COUNT)\" >> \"$FAKE_DIR/srun.log\"\n"
               "RECORD=\"$SLURM_SUBMIT_DIR/.train/runs/$SLURM_JOB_ID.json\"\n"
               "[[ -f \"$FAKE_DIR/launch-$n.sh\" ]] && source \"$FAKE_DIR/launch-$n.sh\"\n"
               "exit 0\n",
               0755);
    write_text(dir_.file("bin/scontrol"),
               "#!/bin/bash\n"
               "echo \"NodeName=$5 State=${FAKE_STATE_OF_NODE2:-IDLE}\"\n",
               0755);
  }

  /// What launch `n` does: shell lines run by the fake srun (RECORD names the run record).
  void launch(int n, const std::string& lines) const {
    write_text(dir_.file("launch-" + std::to_string(n) + ".sh"), lines);
  }

  /// trainctl run ARGS -- train ... as the batch step of job 123 on node[1-2], one task each.
  std::unique_ptr<test::TestProcess> run(const std::vector<std::string>& args, const test::Env& extra = {}) const {
    test::Env env = test::hermetic_env();
    env["PATH"] = dir_.file("bin") + ":" + env["PATH"];
    env["FAKE_DIR"] = dir_.path();
    env["SLURM_JOB_ID"] = "123";
    env["SLURM_SUBMIT_DIR"] = dir_.path();
    env["SLURM_JOB_NODELIST"] = "node[1-2]";
    env["SLURM_TASKS_PER_NODE"] = "1(x2)";
    for (const auto& [k, v] : extra) env[k] = v;
    std::vector<std::string> argv = {"run"};
    argv.insert(argv.end(), args.begin(), args.end());
    for (const char* a : {"--", "train", "--epochs", "1"}) argv.push_back(a);
    return run_trainctl(argv, env);
  }

  std::vector<std::string> srun_calls() const { return test::lines_of(test::read_text(dir_.file("srun.log"))); }
  // The training step's launches, less the one-task-a-node cleanup of a failed job's snapshots.
  std::vector<std::string> launches() const {
    std::vector<std::string> out;
    for (const std::string& c : srun_calls()) {
      if (c.find(" rm -rf /dev/shm/libtrain-") == std::string::npos) out.push_back(c);
    }
    return out;
  }
  std::optional<RunRecord> record() const { return RunRecord::load(RunRecord::path_for(dir_.path(), "123")); }

 private:
  test::TempDir dir_;
};

// train's side of the run record, as the fake step writes it: state, step and newest checkpoint,
// the progress (two steps past the checkpoint), and the launch's times, resumed from `step`'s snapshot.
std::string write_record(int step) {
  const std::string s = std::to_string(step);
  return "python3 -c 'import json,os,sys,time; p=sys.argv[1]; r=json.load(open(p)) if os.path.exists(p) else {}; "
         "t=time.time(); n=int(os.environ[\"TRAIN_RESTART_COUNT\"]); "
         "r.update(state=\"running\", step=" + s + ", last_checkpoint=\"/ck/ckpt-" + s + ".pt\", progress_step=" + s +
         "+2, progress_time=t, launch=dict(number=n, started=t, connecting=t+0.01, connected=t+0.02, loaded=t+0.03, "
         "source=\"snapshot\", resumed_step=" + s + ", training=t+0.04), updated=t); "
         "os.makedirs(os.path.dirname(p), exist_ok=True); json.dump(r, open(p, \"w\"))' \"$RECORD\"\n";
}

const char kKilled[] = "echo 'srun: error: node2: task 1: Killed' >&2; exit 137\n";

TEST(TrainctlRun, ALostRankIsLaunchedAgainAndTheRecordKeepsTheRestart) {
  FakeAllocation a;
  a.launch(0, write_record(40) + kKilled);
  // The relaunch writes the record as train does, then waits until trainctl run has seen it.
  a.launch(1, write_record(40) +
                  "for i in $(seq 300); do grep -q '\"relaunched\": *[1-9]' \"$RECORD\" && exit 0; "
                  "python3 -c 'import select; select.select([],[],[],0.1)'; done; exit 3\n");
  const auto p = a.run({"--max-restarts", "2"});
  EXPECT_EQ(p->exit_code(), 0) << p->err();
  const std::vector<std::string> calls = a.srun_calls();
  ASSERT_EQ(calls.size(), 2u) << p->err();
  EXPECT_EQ(calls[0], "srun --kill-on-bad-exit=1 train --epochs 1 (TRAIN_RESTART_COUNT=0)");
  EXPECT_EQ(calls[1], "srun --kill-on-bad-exit=1 train --epochs 1 (TRAIN_RESTART_COUNT=1)") << "both nodes kept";
  EXPECT_TRUE(contains(p->err(), "srun: error: node2: task 1: Killed\n")) << "srun's lines pass through: " << p->err();
  EXPECT_TRUE(contains(p->err(), "trainctl run: restart 1/2: lost rank on node2 (exit 137), all nodes kept; relaunching "
                                 "on 2 node(s), 2 task(s), from the newest snapshot or checkpoint (train had reached step 42)"))
      << p->err();
  EXPECT_TRUE(contains(p->err(), "; resumed from the snapshot of step 40, ")) << p->err();
  EXPECT_TRUE(contains(p->err(), " s after the failure (relaunch ")) << p->err();
  const std::optional<RunRecord> r = a.record();
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->restarts.size(), 1u);
  EXPECT_EQ(r->restarts[0].number, 1);
  EXPECT_EQ(r->restarts[0].cause, "lost rank");
  EXPECT_EQ(r->restarts[0].nodes, std::vector<std::string>{"node2"});
  EXPECT_FALSE(r->restarts[0].excluded);
  EXPECT_EQ(r->restarts[0].exit_code, 137);
  EXPECT_EQ(r->restarts[0].resumed_step, 40);
  EXPECT_GT(r->restarts[0].seconds, 0);
  EXPECT_GT(r->restarts[0].time, 0);
  // The failure's step and the relaunch's times, from train's record (the fake's).
  EXPECT_EQ(r->restarts[0].failed_step, 42);
  EXPECT_GT(r->restarts[0].failed_step_time, 0);
  EXPECT_GE(r->restarts[0].relaunched, r->restarts[0].time);
  EXPECT_EQ(r->restarts[0].launch.number, 1);
  EXPECT_EQ(r->restarts[0].launch.source, "snapshot");
  EXPECT_GE(r->restarts[0].launch.started, r->restarts[0].relaunched);
  EXPECT_DOUBLE_EQ(r->restarts[0].seconds, r->restarts[0].launch.training - r->restarts[0].time);
}

TEST(TrainctlRun, ABugIsNotLaunchedAgainAndTheLogSaysWhy) {
  FakeAllocation a;
  a.launch(0, write_record(12) + "echo '2026 error [rank 0/2 node1] boom at step 12' >&2; exit 1\n");
  const auto p = a.run({});
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_EQ(a.launches().size(), 1u);
  // The failed job's snapshots go: one task a node removes the job's folder in /dev/shm.
  ASSERT_EQ(a.srun_calls().size(), 2u);
  EXPECT_TRUE(contains(a.srun_calls()[1], "srun --quiet --nodelist=node1,node2 --nodes=2 --ntasks-per-node=1 rm -rf "
                                          "/dev/shm/libtrain-")) << a.srun_calls()[1];
  EXPECT_TRUE(contains(p->err(), "trainctl run: exit 1, an error in the code, configuration or data (the first error "
                                 "above): not restarted")) << p->err();
  ASSERT_TRUE(a.record().has_value());
  EXPECT_EQ(a.record()->state, "failed");
  EXPECT_TRUE(a.record()->restarts.empty());
}

TEST(TrainctlRun, TheSameFailureAtTheSameStepTwiceEndsTheRestarts) {
  FakeAllocation a;
  a.launch(0, write_record(40) + kKilled);
  a.launch(1, write_record(40) + kKilled);
  const auto p = a.run({});
  EXPECT_EQ(p->exit_code(), 137);
  EXPECT_EQ(a.launches().size(), 2u);
  EXPECT_TRUE(contains(p->err(), "lost rank (node2), exit 137 at step 40 again, as before the last restart: not "
                                 "restarted, the same failure at the same step twice in a row is a bug")) << p->err();
}

TEST(TrainctlRun, PreemptionAndMaxRestartsZeroAreNotRestarted) {
  FakeAllocation a;
  a.launch(0, "exit 75\n");
  const auto p = a.run({});
  EXPECT_EQ(p->exit_code(), 75);
  EXPECT_TRUE(contains(p->err(), "exit 75, preempted")) << p->err();
  FakeAllocation b;
  b.launch(0, kKilled);
  const auto q = b.run({"--max-restarts", "0"});
  EXPECT_EQ(q->exit_code(), 137);
  EXPECT_EQ(b.launches().size(), 1u);
  EXPECT_TRUE(contains(q->err(), "(--max-restarts 0)")) << q->err();
}

TEST(TrainctlRun, BadAndDownNodesAreLeftOut) {
  FakeAllocation a;
  a.launch(0, "echo '2026 error [rank 0/2 node1] --health-check: GEMM (the table on rank 0). Hint: sbatch "
              "--exclude=node2 (or --exclude-bad-nodes to requeue without them)' >&2; exit 69\n");
  const auto p = a.run({"--srun-arg=--output=x-%t.out"});
  EXPECT_EQ(p->exit_code(), 0) << p->err();
  ASSERT_EQ(a.srun_calls().size(), 2u);
  EXPECT_EQ(a.srun_calls()[1], "srun --kill-on-bad-exit=1 --exclude=node2 --nodes=1 --ntasks=1 --output=x-%t.out "
                               "train --epochs 1 (TRAIN_RESTART_COUNT=1)");
  EXPECT_TRUE(contains(p->err(), "restart 1/3: node failed health check on node2 (exit 69), left out node2")) << p->err();

  FakeAllocation b;
  b.launch(0, kKilled);
  const auto q = b.run({}, {{"FAKE_STATE_OF_NODE2", "DOWN+NOT_RESPONDING"}});
  EXPECT_EQ(q->exit_code(), 0) << q->err();
  ASSERT_EQ(b.srun_calls().size(), 2u);
  EXPECT_TRUE(contains(b.srun_calls()[1], "srun --kill-on-bad-exit=1 --exclude=node2 --nodes=1 --ntasks=1 train"));
  EXPECT_TRUE(contains(q->err(), "restart 1/3: lost node on node2 (exit 137), left out node2")) << q->err();
}

TEST(TrainctlRun, OutsideAnAllocationItSaysSo) {
  const auto p = run_trainctl({"run", "--", "train"});
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_TRUE(contains(p->err(), "trainctl run: SLURM_JOB_ID: expected trainctl run inside a SLURM allocation")) << p->err();
  EXPECT_TRUE(contains(p->err(), "Hint: put `trainctl run -- PROGRAM ARGS` in a batch script")) << p->err();
  const auto none = run_trainctl({"run"}, [] {
    test::Env env = test::hermetic_env();
    env["SLURM_JOB_ID"] = "1";
    return env;
  }());
  EXPECT_EQ(none->exit_code(), 1);
  EXPECT_TRUE(contains(none->err(), "PROGRAM: expected the training program after '--', found none.")) << none->err();
}

}  // namespace
}  // namespace train
