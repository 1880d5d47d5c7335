// Tests for launcher/src/restart.cpp, `trainctl run`'s decisions without SLURM: reading srun's and
// train's failure lines, which exits restart (and which nodes are left out), the next launch's srun
// command, and the run record's restart lines.
#include "train/launcher/restart.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "train/base/error.h"

namespace train {
namespace {

StepReport report_of(int exit_code, const std::vector<std::string>& lines) {
  StepReport r;
  r.exit_code = exit_code;
  for (const std::string& line : lines) read_step_line(line, r);
  return r;
}

RestartDecision decide(const StepReport& r, int64_t step = 10, std::optional<PastFailure> previous = std::nullopt,
                       int done = 0, const std::set<std::string>& down = {}, int nodes = 2) {
  return decide_restart(r, step, previous, done, 3, down, nodes);
}

// What srun printed on the local cluster when rank 1 (on node2) got kill -9, and what train's rank 0 said.
const std::vector<std::string> kKilledRank = {
    "srun: error: node2: task 1: Killed",
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    "2026-11-27T12:00:00.000 error [rank 0/2 node1] Gloo all-reduce failed: Connection closed by peer. Not "
    "responding (dead or frozen): rank 1 on node2 (pid 12382): the process has exited.",
    "srun: error: node1: task 0: Exited with exit code 79",
};

TEST(RestartLines, SrunsTaskLinesNameTheKilledTaskAndItsNode) {
  const StepReport r = report_of(137, kKilledRank);
  ASSERT_EQ(r.killed.size(), 1u);
  EXPECT_EQ(r.killed[0], "node2: task 1: Killed");
  EXPECT_EQ(r.killed_nodes, std::vector<std::string>{"node2"});
  EXPECT_EQ(r.silent_nodes, std::vector<std::string>{"node2"});
  EXPECT_TRUE(r.broken_connection);
  EXPECT_TRUE(r.lost_nodes.empty());
  EXPECT_EQ(r.first_error, "srun: error: node2: task 1: Killed");
  EXPECT_EQ(r.task_exit_code, 137) << "the killed task's status, not its peer's exit 79 after it";
  EXPECT_EQ(step_exit_code(r), 137);
  // srun's own status is the highest of the tasks' (143 once it stopped the others): the first
  // failing task's code tells what happened.
  const StepReport bug = report_of(143, {"srun: error: node2: task 1: Exited with exit code 1",
                                         "srun: error: node1: task 0: Terminated"});
  EXPECT_EQ(step_exit_code(bug), 1);
  EXPECT_EQ(step_exit_code(report_of(143, {})), 143);
  // SIGTERM to the other tasks (--kill-on-bad-exit, scancel) and exit codes are not a killed task.
  const StepReport t = report_of(143, {"srun: error: node1: tasks 0-1: Terminated", "srun: error: node2: task 2: Exited with exit code 1"});
  EXPECT_TRUE(t.killed.empty());
  EXPECT_EQ(t.first_error, "");
}

TEST(RestartLines, LostNodesAndHealthChecksBadNodes) {
  EXPECT_EQ(report_of(1, {"srun: error: Node failure on node3"}).lost_nodes, std::vector<std::string>{"node3"});
  EXPECT_EQ(report_of(1, {"srun: error: Task launch for StepId=12.1 failed on node node2: Communication connection failure"})
                .lost_nodes,
            std::vector<std::string>{"node2"});
  const StepReport h = report_of(
      69, {"2026-11-27T12:00:00.000 error [rank 0/2 node1] --health-check: node2: GEMM below 0.5 x others' median "
           "(the table on rank 0). Hint: sbatch --exclude=node2,node4 (or --exclude-bad-nodes to requeue without "
           "them), and tell the admins; --health-warn-only trains anyway."});
  EXPECT_EQ(h.unhealthy_nodes, (std::vector<std::string>{"node2", "node4"}));
  EXPECT_EQ(report_of(69, {"x --health-check: y. Hint: sbatch --exclude=n[1-2] (or"}).unhealthy_nodes,
            (std::vector<std::string>{"n1", "n2"}));
}

TEST(RestartDecision, ALostRankRestartsOnAllNodes) {
  const RestartDecision d = decide(report_of(137, kKilledRank));
  EXPECT_TRUE(d.restart) << d.why;
  EXPECT_EQ(d.cause, "lost rank");
  EXPECT_EQ(d.nodes, std::vector<std::string>{"node2"});
  EXPECT_FALSE(d.exclude) << "a task died on a node SLURM still has: the node stays";
  // The same, once SLURM reports the node down: it is left out.
  const RestartDecision down = decide(report_of(137, kKilledRank), 10, std::nullopt, 0, {"node2"});
  EXPECT_TRUE(down.restart);
  EXPECT_EQ(down.cause, "lost node");
  EXPECT_TRUE(down.exclude);
  EXPECT_EQ(down.nodes, std::vector<std::string>{"node2"});
}

TEST(RestartDecision, StalledRanksBrokenConnectionsAndLostNodesRestart) {
  const RestartDecision stalled = decide(report_of(79, {"x error [rank 0/2 node1] stalled: rank 1 on node2 silent"}));
  EXPECT_TRUE(stalled.restart);
  EXPECT_EQ(stalled.cause, "stalled rank");
  EXPECT_EQ(stalled.nodes, std::vector<std::string>{"node2"});
  // train's roll-call names the odd one out's node; the frozen rank, let go, then names rank 0 (which
  // exited with 79) as gone: the stall is blamed on the roll-call's node, not on node1.
  const RestartDecision rollcall = decide(report_of(
      79, {"2026 error [rank 0/2 node1] stalled: no progress for 5 s. Roll-call: rank 0 in all-reduce of bucket 0 #299 "
           "(step 96); rank 1 on node2 in forward at step 94 for 0 s. Hint: the rank(s) named after the first group",
           "2026 error [rank 1/2 node2] rank 1/2 on node2: DDP gradient allreduce (bucket 0) failed. Not responding "
           "(dead or frozen): rank 0 on node1 (pid 23446): the process has exited."}));
  EXPECT_EQ(rollcall.cause, "stalled rank");
  EXPECT_EQ(rollcall.nodes, std::vector<std::string>{"node2"});
  const RestartDecision broken = decide(report_of(1, {"x error [rank 0/2 node1] recv: Connection reset by peer"}));
  EXPECT_TRUE(broken.restart);
  EXPECT_EQ(broken.cause, "broken connection");
  const RestartDecision lost = decide(report_of(1, {"srun: error: Node failure on node2"}));
  EXPECT_TRUE(lost.restart);
  EXPECT_EQ(lost.cause, "lost node");
  EXPECT_TRUE(lost.exclude);
  const RestartDecision health = decide(report_of(69, {"--health-check: GEMM. Hint: sbatch --exclude=node2 (or"}));
  EXPECT_TRUE(health.restart);
  EXPECT_EQ(health.cause, "node failed health check");
  EXPECT_TRUE(health.exclude);
  EXPECT_EQ(health.nodes, std::vector<std::string>{"node2"});
}

TEST(RestartDecision, BugsPreemptionAndCancelDoNotRestart) {
  for (const auto& [code, says] : std::map<int, std::string>{{1, "an error in the code"},
                                                             {2, "a flag error"},
                                                             {65, "a non-finite loss"},
                                                             {69, "names no node"},
                                                             {75, "preempted"},
                                                             {143, "SIGINT/SIGTERM"}}) {
    const RestartDecision d = decide(report_of(code, {"x error [rank 0/2 node1] something failed at step 12"}));
    EXPECT_FALSE(d.restart) << code;
    EXPECT_NE(d.why.find(says), std::string::npos) << code << ": " << d.why;
  }
  EXPECT_FALSE(decide(report_of(0, {})).restart);
  EXPECT_EQ(decide(report_of(0, {})).why, "");
  StepReport term = report_of(137, kKilledRank);
  term.got_term = true;
  const RestartDecision cancelled = decide(term);
  EXPECT_FALSE(cancelled.restart);
  EXPECT_NE(cancelled.why.find("SIGTERM"), std::string::npos) << cancelled.why;
}

// A bug on one rank: its peers then lose their connection to it and name it gone, and srun may kill
// them; the first error decides, and it is the bug's.
TEST(RestartDecision, APeersBrokenConnectionAfterABugIsNoLostRank) {
  const StepReport r = report_of(1, {
      "2026 error [rank 1/2 node2] train: injected error at step 12 (TRAIN_FAULT_THROW_AT_STEP)",
      "2026 error [rank 0/2 node1] Gloo all-reduce failed: Connection closed by peer. Not responding (dead or "
      "frozen): rank 1 on node2 (pid 7): the process has exited.",
      "srun: error: node2: task 1: Exited with exit code 1",
      "srun: error: node1: task 0: Killed",
  });
  EXPECT_FALSE(r.first_error_lost);
  const RestartDecision d = decide(r);
  EXPECT_FALSE(d.restart) << d.why;
  EXPECT_NE(d.why.find("an error in the code"), std::string::npos) << d.why;
  EXPECT_TRUE(report_of(1, {"2026 error [rank 0/2 node1] recv: Connection reset by peer"}).first_error_lost);
}

TEST(RestartDecision, TheSameFailureAtTheSameStepTwiceIsABug) {
  const StepReport r = report_of(137, kKilledRank);
  const RestartDecision again = decide(r, 40, PastFailure{"lost rank", 40}, 1);
  EXPECT_FALSE(again.restart);
  EXPECT_NE(again.why.find("same failure at the same step twice in a row"), std::string::npos) << again.why;
  EXPECT_NE(again.why.find("at step 40"), std::string::npos) << again.why;
  EXPECT_TRUE(decide(r, 41, PastFailure{"lost rank", 40}, 1).restart) << "training went on: a new failure";
  EXPECT_TRUE(decide(r, 40, PastFailure{"stalled rank", 40}, 1).restart) << "another cause";
  EXPECT_TRUE(decide(r, -1, PastFailure{"lost rank", -1}, 1).restart) << "no step known: not the same";
}

TEST(RestartDecision, RestartsAreCappedAndANodeMustBeLeft) {
  const RestartDecision capped = decide(report_of(137, kKilledRank), 10, std::nullopt, 3);
  EXPECT_FALSE(capped.restart);
  EXPECT_NE(capped.why.find("--max-restarts 3"), std::string::npos) << capped.why;
  const RestartDecision none = decide(report_of(1, {"srun: error: Node failure on node1"}), 10, std::nullopt, 0, {}, 1);
  EXPECT_FALSE(none.restart);
  EXPECT_NE(none.why.find("no node would be left"), std::string::npos) << none.why;
}

TEST(RestartLaunch, JobShapeAndExclusion) {
  const std::map<std::string, std::string> env = {{"SLURM_JOB_NODELIST", "node[1-3]"},
                                                  {"SLURM_TASKS_PER_NODE", "2(x2),1"}};
  const LaunchShape shape = job_shape([&](const std::string& k) { return env.count(k) ? env.at(k) : ""; });
  EXPECT_EQ(shape.nodes(), (std::vector<std::string>{"node1", "node2", "node3"}));
  EXPECT_EQ(shape.tasks(), 5);
  const std::vector<std::string> program = {"build/bin/train", "--epochs", "1"};
  EXPECT_EQ(srun_command(shape, {}, program),
            (std::vector<std::string>{"srun", "--kill-on-bad-exit=1", "build/bin/train", "--epochs", "1"}))
      << "the first launch takes the job's own shape";
  const LaunchShape fewer = without_nodes(shape, {"node2"});
  EXPECT_EQ(fewer.nodes(), (std::vector<std::string>{"node1", "node3"}));
  EXPECT_EQ(fewer.tasks(), 3);
  EXPECT_EQ(srun_command(fewer, {"--output=x-%t.out"}, program),
            (std::vector<std::string>{"srun", "--kill-on-bad-exit=1", "--exclude=node2", "--nodes=2", "--ntasks=3",
                                      "--output=x-%t.out", "build/bin/train", "--epochs", "1"}));
  const LaunchShape one = without_nodes(fewer, {"node3", "elsewhere"});
  EXPECT_EQ(one.excluded, (std::vector<std::string>{"node2", "node3"}));
  EXPECT_EQ(one.tasks(), 2);
  EXPECT_EQ(tasks_per_node("3"), std::vector<int>{3});
  EXPECT_TRUE(tasks_per_node("x").empty());
  const std::map<std::string, std::string> per = {{"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_NTASKS_PER_NODE", "4"}};
  EXPECT_EQ(job_shape([&](const std::string& k) { return per.count(k) ? per.at(k) : ""; }).tasks(), 8);
  EXPECT_THROW(job_shape([](const std::string&) { return std::string(); }), ConfigError);
  const std::map<std::string, std::string> bad = {{"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "1"}};
  EXPECT_THROW(job_shape([&](const std::string& k) { return bad.count(k) ? bad.at(k) : ""; }), ConfigError);
}

TEST(RestartLaunch, NodeStatesStepsAndTheRestartLine) {
  EXPECT_TRUE(node_state_is_down("NodeName=node2 Arch=x86_64 CoresPerSocket=2 State=DOWN+NOT_RESPONDING ThreadsPerCore=1"));
  EXPECT_TRUE(node_state_is_down("NodeName=node2 State=IDLE* Partitions=debug"));
  EXPECT_FALSE(node_state_is_down("NodeName=node2 State=MIXED Partitions=debug"));
  EXPECT_FALSE(node_state_is_down("nothing"));
  EXPECT_EQ(checkpoint_step("/w/ck/ckpt-40.pt"), 40);
  EXPECT_EQ(checkpoint_step(""), -1);
  RestartEntry e;
  e.number = 1;
  e.cause = "lost rank";
  e.nodes = {"node2"};
  e.exit_code = 137;
  EXPECT_EQ(describe_restart(e, 3), "restart 1/3: lost rank on node2 (exit 137), all nodes kept");
  e.excluded = true;
  e.resumed_step = 40;
  e.seconds = 6.25;
  EXPECT_EQ(describe_restart(e, 0), "restart 1: lost rank on node2 (exit 137), left out node2; resumed from step 40, "
                                    "6.2 s after the failure");
  // With the relaunch's times (train's record): its source, and where the seconds went.
  e.time = 100;
  e.relaunched = 101;
  e.launch.started = 101.25;
  e.launch.connecting = 102;
  e.launch.connected = 102.5;
  e.launch.loaded = 102.75;
  e.launch.source = "snapshot";
  e.launch.training = 106.25;
  EXPECT_EQ(describe_restart(e, 3), "restart 1/3: lost rank on node2 (exit 137), left out node2; resumed from the "
                                    "snapshot of step 40, 6.2 s after the failure (relaunch 1.0 s, process start 0.2 s, "
                                    "set-up 0.8 s, rendezvous 0.5 s, state load 0.2 s, first step 3.5 s)");
}

}  // namespace
}  // namespace train
