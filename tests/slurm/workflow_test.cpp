// SLURM tests of the work around a job, against the real local cluster (scripts/local-slurm.sh):
// a 2x2 `trainctl sweep` as one job array and its report, `trainctl resources` against sinfo,
// `status`, `logs -f`, per-rank logs and `cancel --signal` on a running job, a waiting job explained
// and cancelled, `interactive --run` with its setup lines, and clear errors for unknown job ids.
// The jobs run small shell programs (no LibTorch), one CPU each. A cluster that doesn't answer is
// a failure, unless TRAIN_TEST_SLURM=0 skips them.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_process.h"
#include "slurm_util.h"
#include "slurm_jobs.h"
#include "test_util.h"
#include "train/base/subprocess.h"

namespace train {
namespace {

using test::cluster_problem;
using test::Env;
using test::run_in;
using test::slurm_env;
using test::TestProcess;

/// Longest wait for a job's event (start, end, a line in its log) before the test gives up. The jobs
/// themselves take seconds; the margin is for the queue, which other suites' training jobs share.
constexpr double kWaitSeconds = 240;

using slurmtest::bin;
using slurmtest::contains;
using slurmtest::exists;
using slurmtest::source_path;

void write_text(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  chmod(path.c_str(), mode);
}

/// A job's state from `scontrol show job` ("" when the controller doesn't know it).
std::string job_state(const std::string& id, const Env& env) {
  const auto p = test::run_process({test::find_on_path("scontrol"), "show", "job", id}, env, 20);
  const std::size_t at = p->out().find("JobState=");
  if (p->exit_code() != 0 || at == std::string::npos) return "";
  return p->out().substr(at + 9, p->out().find_first_of(" \n", at) - at - 9);
}

bool is_final(const std::string& state) {
  static const std::set<std::string> kFinal = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                                               "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"};
  return kFinal.count(state) != 0;
}

/// Polls `ready` every 100 ms until it holds or kWaitSeconds pass; says whether it held.
bool wait_until(const std::function<bool()>& ready, double seconds = kWaitSeconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!ready()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

/// The table rows of `trainctl status`, split at whitespace, by job id (the header under "JOBID").
std::map<std::string, std::vector<std::string>> status_rows(const std::string& out) {
  std::map<std::string, std::vector<std::string>> rows;
  for (const std::string& line : test::lines_of(out)) {
    if (line.empty()) break;  // the table ends at the first blank line
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    if (!words.empty()) rows[words[0]] = words;
  }
  return rows;
}

/// Cancels a job when the test ends, whatever happened (a failed assertion must not leave it queued).
struct CancelAtExit {
  std::string id;
  Env env;
  ~CancelAtExit() {
    if (!id.empty()) test::run_process({test::find_on_path("scancel"), id}, env, 20);
  }
};

/// Base of the workflow tests: fails when the cluster is down, skips when TRAIN_TEST_SLURM=0.
class Workflow : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* flag = std::getenv("TRAIN_TEST_SLURM");
    if (flag != nullptr && std::string(flag) == "0") GTEST_SKIP() << "TRAIN_TEST_SLURM=0: the SLURM tests are turned off";
    env_ = slurm_env();
    const std::string problem = cluster_problem(env_);
    if (!problem.empty()) {
      FAIL() << "No usable SLURM cluster: " << problem
             << "\nHint: start the local one with `scripts/local-slurm.sh start` (as root; see docs/local-slurm.md), "
                "or set TRAIN_TEST_SLURM=0 to skip the slurm tests.";
    }
  }
  Env env_;
};

// A stand-in for train in a sweep: reads --lr, --batch-size and --metrics, and writes as train does
// an epoch line to the metrics file and the done line to stdout, with an accuracy computed from its
// parameters (0.5 + lr/10 + batch-size/10000).
const char kSweepProgram[] = R"(#!/bin/bash
set -eu
lr=; bs=; metrics=/dev/null
while [[ $# -gt 0 ]]; do
  case "$1" in
    --lr) lr=$2; shift ;;
    --batch-size) bs=$2; shift ;;
    --metrics) metrics=$2; shift ;;
  esac
  shift
done
acc=$(awk -v lr="$lr" -v bs="$bs" 'BEGIN { printf "%.6f", 0.5 + lr / 10 + bs / 10000 }')
echo "{\"event\":\"epoch\",\"epoch\":1,\"step\":10,\"test_accuracy\":$acc}" >> "$metrics"
done_line="{\"event\":\"done\",\"epochs\":1,\"steps\":10,\"test_loss\":0.25,\"test_accuracy\":$acc,\"world_size\":${SLURM_NTASKS:-1}}"
echo "$done_line"
)";

TEST_F(Workflow, SweepRunsAsOneArrayAndTheReportMatchesTheIndex) {
  test::TempDir dir("workflow-sweep", test::job_root());
  write_text(dir.file("fake_train.sh"), kSweepProgram, 0755);
  const auto submit = run_in(dir.path(),
                             {bin("trainctl"), "sweep", "--param", "lr=0.1,0.5", "--param", "batch-size=64,128",
                              "--throttle", "2", "--output-dir", "runs", "--program", dir.file("fake_train.sh"),
                              "--no-preflight", "--nodes", "1", "--ntasks-per-node", "1", "--time", "5", "--job-name",
                              "wsweep", "--submit", "--", "--epochs", "1"},
                             env_);
  ASSERT_EQ(submit->exit_code(), 0) << submit->err();
  const std::string id = test::last_line(submit->out());
  ASSERT_TRUE(!id.empty() && id.find_first_not_of("0123456789") == std::string::npos) << submit->out();
  CancelAtExit guard{id, env_};
  EXPECT_TRUE(contains(submit->err(), "submitted array job " + id + " (4 tasks, at most 2 at once)")) << submit->err();

  // One array: the index names it, and scontrol shows its 4 tasks under that one id, throttled at 2.
  const nlohmann::json index = nlohmann::json::parse(test::read_text(dir.file("runs/sweep.json")));
  EXPECT_EQ(index["job_id"], id);
  ASSERT_EQ(index["tasks"].size(), 4u);
  const auto record = test::run_process({test::find_on_path("scontrol"), "show", "job", "-o", id}, env_, 20);
  EXPECT_TRUE(contains(record->out(), "ArrayJobId=" + id)) << record->out();
  EXPECT_TRUE(contains(test::read_text(dir.file("runs/sweep.sh")), "#SBATCH --array=0-3%2\n"));

  // Every task finishes.
  std::vector<std::string> states(4);
  const bool ended = wait_until([&] {
    for (int t = 0; t < 4; ++t) {
      if (!is_final(states[t])) states[t] = job_state(id + "_" + std::to_string(t), env_);
    }
    return std::all_of(states.begin(), states.end(), is_final);
  });
  ASSERT_TRUE(ended) << "the sweep's tasks did not end within " << kWaitSeconds << " s";
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(states[t], "COMPLETED") << "task " << t << ":\n"
                                      << test::read_text(dir.file("runs/task-" + std::to_string(t) + "/train.out"));
  }

  // The report: 4 rows whose parameters are the index's, with the accuracy each task's parameters give.
  const auto report = run_in(dir.path(), {bin("trainctl"), "sweep-report", "runs"}, env_);
  ASSERT_EQ(report->exit_code(), 0) << report->err();
  const std::vector<std::string> lines = test::lines_of(report->out());
  ASSERT_EQ(lines.size(), 5u) << report->out();
  EXPECT_EQ(lines[0].rfind("task  lr   batch-size  status  test_accuracy  test_loss  epochs", 0), 0u) << lines[0];
  for (int t = 0; t < 4; ++t) {
    const std::string lr = index["tasks"][t]["params"]["lr"];
    const std::string bs = index["tasks"][t]["params"]["batch-size"];
    char acc[32];
    std::snprintf(acc, sizeof(acc), "%.4f", 0.5 + std::stod(lr) / 10 + std::stod(bs) / 10000);
    std::istringstream row(lines[t + 1]);
    std::string task, row_lr, row_bs, status, row_acc;
    row >> task >> row_lr >> row_bs >> status >> row_acc;
    EXPECT_EQ(task, std::to_string(t)) << lines[t + 1];
    EXPECT_EQ(row_lr, lr) << lines[t + 1];
    EXPECT_EQ(row_bs, bs) << lines[t + 1];
    EXPECT_EQ(status, "done") << lines[t + 1];
    EXPECT_EQ(row_acc, acc) << lines[t + 1];
    // Each task ran in its own folder, where its log says so.
    const std::string log = test::read_text(dir.file("runs/task-" + std::to_string(t) + "/train.out"));
    EXPECT_TRUE(contains(log, "wsweep: sweep arguments --lr " + lr + " --batch-size " + bs + ", run folder " +
                                  dir.file("runs/task-" + std::to_string(t))))
        << log;
  }
  EXPECT_TRUE(exists(dir.file("runs/sweep-report.csv")));
  // A PNG, or a message saying why there is none.
  EXPECT_TRUE(exists(dir.file("runs/sweep-report.png")) || contains(report->err(), "no PNG made")) << report->err();

  // status shows the array's tasks.
  const auto status = run_in(dir.path(), {bin("trainctl"), "status", id}, env_);
  ASSERT_EQ(status->exit_code(), 0) << status->err();
  const auto rows = status_rows(status->out());
  EXPECT_EQ(rows.size(), 5u) << status->out();
  for (int t = 0; t < 4; ++t) {
    const std::string task = id + "_" + std::to_string(t);
    ASSERT_EQ(rows.count(task), 1u) << status->out();
    EXPECT_EQ(rows.at(task)[1], "wsweep") << status->out();
    EXPECT_EQ(rows.at(task)[2], "COMPLETED") << status->out();
  }
  // Listed in task order.
  EXPECT_LT(status->out().find(id + "_0 "), status->out().find(id + "_3 ")) << status->out();
}

TEST_F(Workflow, ResourcesMatchSinfo) {
  const auto p = test::run_process({bin("trainctl"), "resources", "--json"}, env_, 60);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  const nlohmann::json j = nlohmann::json::parse(p->out());
  // Partitions: as `sinfo` summarises them.
  const auto sinfo = test::run_process({test::find_on_path("sinfo"), "-h", "-o", "%P|%a|%D|%c|%m|%l"}, env_, 20);
  ASSERT_EQ(sinfo->exit_code(), 0) << sinfo->err();
  const std::vector<std::string> rows = test::lines_of(sinfo->out());
  ASSERT_EQ(j["partitions"].size(), rows.size()) << sinfo->out();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::vector<std::string> f;
    std::stringstream row(rows[i]);
    for (std::string field; std::getline(row, field, '|');) f.push_back(field);
    ASSERT_EQ(f.size(), 6u) << rows[i];
    const nlohmann::json& part = j["partitions"][i];
    EXPECT_EQ(part["name"].get<std::string>() + (part["default"].get<bool>() ? "*" : ""), f[0]);
    EXPECT_EQ(part["availability"], f[1]);
    EXPECT_EQ(std::to_string(part["nodes"].get<int>()), f[2]);
    EXPECT_EQ(std::to_string(part["cpus_per_node"].get<int>()), f[3]);
    EXPECT_EQ(std::to_string(part["memory_mb_per_node"].get<long>()), f[4]);
    EXPECT_EQ(part["max_time_seconds"].is_null(), f[5] == "infinite") << f[5];
  }
  // Nodes: as `sinfo -N` lists them.
  const auto nodes = test::run_process({test::find_on_path("sinfo"), "-h", "-N", "-o", "%N %c %m"}, env_, 20);
  std::set<std::string> theirs, ours;
  for (const std::string& line : test::lines_of(nodes->out())) theirs.insert(line);
  for (const auto& n : j["nodes"]) {
    ours.insert(n["name"].get<std::string>() + " " + std::to_string(n["cpus"].get<int>()) + " " +
                std::to_string(n["memory_mb"].get<long>()));
  }
  EXPECT_EQ(ours, theirs) << nodes->out();
  EXPECT_TRUE(j["gres"].empty()) << "this cluster has no GPUs";

  // The text report, with where a 1-task job and a 2-node job could start, and a shape that can't.
  const auto text = test::run_process({bin("trainctl"), "resources", "--nodes", "2"}, env_, 60);
  ASSERT_EQ(text->exit_code(), 0) << text->err();
  EXPECT_TRUE(contains(text->out(), "GPUs and shards by type:\n  none: no node has gres gpu or shard")) << text->out();
  EXPECT_TRUE(contains(text->out(), "Where a job of 2 node(s) x 1 task(s) could start (sbatch --test-only):")) << text->out();
  EXPECT_TRUE(contains(text->out(), "Soonest: partition debug at ")) << text->out();
  EXPECT_TRUE(contains(text->out(), " on node[1-2].\n")) << text->out();
  const auto big = test::run_process({bin("trainctl"), "resources", "--nodes", "3"}, env_, 60);
  ASSERT_EQ(big->exit_code(), 0) << big->err();
  EXPECT_TRUE(contains(big->out(), "does not fit: --nodes 3: expected at most the 2 node(s) of partition debug")) << big->out();
}

// A stand-in for train that runs until SIGUSR2, then does what train does: rank 0 saves a
// checkpoint and requeues the job, and every rank exits 75. It logs with train's rank prefix.
const char kLongProgram[] = R"(#!/bin/bash
ckpt=
while [[ $# -gt 0 ]]; do
  case "$1" in --checkpoint-dir) ckpt=$2; shift ;; esac
  shift
done
rank=${SLURM_PROCID:-0}
who="[rank $rank/${SLURM_NTASKS:-1} $(hostname)]"
stop() {
  echo "info $who stopping for signal USR2"
  if [[ "$rank" == 0 ]]; then
    mkdir -p "$ckpt" && echo checkpoint > "$ckpt/ckpt-7.pt"
    scontrol requeue "$SLURM_JOB_ID" && echo "info $who requeued job $SLURM_JOB_ID"
  else
    sleep 2  # as train's ranks agree first: srun --kill-on-bad-exit must not stop rank 0 mid-checkpoint
  fi
  exit 75
}
trap stop USR2
echo "info $who started"
echo "warning $who a line on stderr" >&2
step=0
while true; do
  step=$((step + 1))
  echo "info $who Train Epoch: 1 step $step"
  sleep 0.2
done
)";

// The suite's jobs stay out of the user's view: they are submitted from outside the project
// (test::job_root()), and `trainctl status` in the checkout lists only the user's jobs under it. An
// array whose pending tasks were cancelled (as a finished chain does) shows as squeue shows it.
TEST_F(Workflow, SuiteJobsStayOutOfTheProjectsStatusAndArraysShowAsSqueueDoes) {
  const std::string root = test::job_root();
  for (const std::string project : {std::string(TRAIN_SOURCE_DIR), std::string(TRAIN_BINARY_DIR)}) {
    EXPECT_NE(root.rfind(project + "/", 0), 0u) << "the jobs' folder " << root << " is inside " << project;
  }
  test::TempDir dir("workflow-view", root);
  write_text(dir.file("chain.sh"),
             "#!/bin/bash\n#SBATCH --job-name=view --array=0-3%1 --output=" + dir.file("view-%A_%a.out") +
                 "\nscancel --state=PENDING \"$SLURM_ARRAY_JOB_ID\"\n",
             0755);
  const auto submit = run_in(dir.path(), {test::find_on_path("sbatch"), "--parsable", "--wait", "chain.sh"}, env_, kWaitSeconds);
  ASSERT_TRUE(submit->finished()) << submit->err();
  const std::string id = test::last_line(submit->out()).substr(0, test::last_line(submit->out()).find(';'));
  ASSERT_FALSE(id.empty()) << submit->out() << submit->err();
  CancelAtExit guard{id, env_};
  ASSERT_TRUE(wait_until([&] { return is_final(job_state(id, env_)); })) << job_state(id, env_);

  const auto here = run_in(dir.path(), {bin("trainctl"), "status"}, env_);
  ASSERT_EQ(here->exit_code(), 0) << here->err();
  const auto rows = status_rows(here->out());
  EXPECT_EQ(rows.count(id), 1u) << "the array's own record, as squeue shows it:\n" << here->out();
  EXPECT_EQ(rows.count(id + "_0"), 1u) << here->out();
  EXPECT_FALSE(contains(here->out(), "4294967294")) << here->out();
  const auto squeue = test::run_process({test::find_on_path("squeue"), "-h", "--states=all", "-j", id, "-o", "%i"}, env_, 20);
  for (const std::string& shown : test::lines_of(squeue->out())) {
    if (!shown.empty()) EXPECT_EQ(rows.count(shown), 1u) << "squeue shows " << shown << "; status:\n" << here->out();
  }
  // From the checkout: none of it.
  const auto project = run_in(TRAIN_SOURCE_DIR, {bin("trainctl"), "status"}, env_);
  ASSERT_EQ(project->exit_code(), 0) << project->err();
  const auto project_rows = status_rows(project->out());
  EXPECT_EQ(project_rows.count(id), 0u) << project->out();
  EXPECT_EQ(project_rows.count(id + "_0"), 0u) << project->out();
}

TEST_F(Workflow, StatusLogsFollowAndCancelWithSignalOnARunningJob) {
  test::TempDir dir("workflow-jobs", test::job_root());
  write_text(dir.file("long.sh"), kLongProgram, 0755);
  // The script runs its program under trainctl run (TRAINCTL_BIN: the program's folder has none),
  // which starts the run record with the folders the program's arguments name.
  Env with_trainctl = env_;
  with_trainctl["TRAINCTL_BIN"] = bin("trainctl");
  const auto submit = run_in(dir.path(),
                             {bin("trainctl"), "sbatch", "--job-name", "wf", "--nodes", "2", "--ntasks-per-node", "1",
                              "--time", "5", "--output", "logs/out%j.log", "--error", "logs/err%j.log",
                              "--per-rank-logs", "--program", dir.file("long.sh"), "--no-preflight", "--submit"},
                             with_trainctl);
  ASSERT_EQ(submit->exit_code(), 0) << submit->err();
  const std::string id = test::last_line(submit->out());
  ASSERT_FALSE(id.empty()) << submit->out();
  CancelAtExit guard{id, env_};
  const std::string rank0 = dir.file("logs/out" + id + "-0.log");
  const std::string rank1 = dir.file("logs/out" + id + "-1.log");
  ASSERT_TRUE(wait_until([&] {
    return contains(test::read_text(rank0), "Train Epoch") && contains(test::read_text(rank1), "Train Epoch");
  })) << "the job's ranks did not start within " << kWaitSeconds << " s; state " << job_state(id, env_);

  // status: the running job, from this folder (no id) and by id.
  const auto status = run_in(dir.path(), {bin("trainctl"), "status"}, env_);
  ASSERT_EQ(status->exit_code(), 0) << status->err();
  const auto rows = status_rows(status->out());
  ASSERT_EQ(rows.size(), 2u) << status->out();
  EXPECT_EQ(rows.at("JOBID"), (std::vector<std::string>{"JOBID", "NAME", "STATE", "REASON", "ELAPSED", "NODES", "RESTARTS"}));
  ASSERT_EQ(rows.count(id), 1u) << status->out();
  const std::vector<std::string>& row = rows.at(id);
  ASSERT_EQ(row.size(), 7u) << status->out();
  EXPECT_EQ(row[1], "wf");
  EXPECT_EQ(row[2], "RUNNING");
  EXPECT_EQ(row[3], "-");
  EXPECT_EQ(row[5], "node[1-2]");
  EXPECT_EQ(row[6], "0");
  EXPECT_TRUE(contains(status->out(), "  log         " + dir.file("logs/out" + id + ".log") + "\n")) << status->out();
  EXPECT_TRUE(contains(status->out(), "  checkpoint  none yet in " + dir.file("checkpoints/wf-" + id) + "\n"))
      << status->out();
  // The ranks log into their own files: the metrics line is rank 0's latest progress line.
  EXPECT_TRUE(contains(status->out(), "  metrics     info [rank 0/2 node1] Train Epoch: 1 step ")) << status->out();

  // logs: per rank, and -f following until the job ends.
  const auto one = run_in(dir.path(), {bin("trainctl"), "logs", id, "--rank", "1"}, env_);
  ASSERT_EQ(one->exit_code(), 0) << one->err();
  EXPECT_TRUE(contains(one->out(), "info [rank 1/2 node")) << one->out();
  EXPECT_FALSE(contains(one->out(), "[rank 0/2")) << one->out();
  const auto errs = run_in(dir.path(), {bin("trainctl"), "logs", id, "--err", "--rank", "0"}, env_);
  EXPECT_TRUE(contains(errs->out(), "warning [rank 0/2 ")) << errs->out() << errs->err();
  TestProcess follow({bin("trainctl"), "logs", id, "-f"}, env_);
  ASSERT_TRUE(follow.wait_for_stdout([](const std::string& out) { return contains(out, "[r1] info [rank 1/2"); }, 30))
      << follow.out() << follow.err();
  EXPECT_TRUE(contains(follow.out(), "wf: job " + id + ": 2 node(s) node[1-2]")) << follow.out();

  // cancel --signal: the ranks get USR2, rank 0 checkpoints and requeues, then the job is cancelled.
  const auto cancel = run_in(dir.path(), {bin("trainctl"), "cancel", id, "--signal", "USR2", "--grace", "60"}, env_, 90);
  ASSERT_EQ(cancel->exit_code(), 0) << cancel->err();
  EXPECT_TRUE(contains(cancel->out(), "job " + id + ": sent SIGUSR2 to its tasks; they stopped after ")) << cancel->out();
  EXPECT_TRUE(contains(cancel->out(), "job " + id + ": cancelled (scancel).\n")) << cancel->out();
  EXPECT_TRUE(contains(cancel->out(), "job " + id + ": newest checkpoint " + dir.file("checkpoints/wf-" + id + "/ckpt-7.pt")))
      << cancel->out();
  EXPECT_TRUE(contains(test::read_text(rank0), "stopping for signal USR2")) << test::read_text(rank0);
  EXPECT_TRUE(contains(test::read_text(rank1), "stopping for signal USR2")) << test::read_text(rank1);
  std::string state;
  EXPECT_TRUE(wait_until([&] { return is_final(state = job_state(id, env_)); })) << state;
  EXPECT_EQ(state, "CANCELLED");

  // logs -f ends by itself once the job has ended, having printed every rank's last lines.
  ASSERT_TRUE(follow.wait(60)) << "logs -f did not end after the job ended";
  EXPECT_EQ(follow.exit_code(), 0) << follow.err();
  EXPECT_TRUE(contains(follow.out(), "[r0] info [rank 0/2")) << follow.out();
  EXPECT_TRUE(contains(follow.out(), "stopping for signal USR2")) << follow.out();

  // status afterwards: the checkpoint and the restart the requeue counted.
  const auto after = run_in(dir.path(), {bin("trainctl"), "status", id}, env_);
  EXPECT_TRUE(contains(after->out(), "  checkpoint  " + dir.file("checkpoints/wf-" + id + "/ckpt-7.pt"))) << after->out();
  EXPECT_TRUE(contains(after->out(), "CANCELLED")) << after->out();
}

TEST_F(Workflow, InteractiveRunsTheSetupLinesOnTheAllocation) {
  test::TempDir dir("workflow-interactive", test::job_root());
  const std::vector<std::string> args = {bin("trainctl"), "interactive", "--nodes", "2", "--ntasks-per-node", "1",
                                         "--time", "2", "--job-name", "wfi", "--setup", "export WF_MARK=ready"};
  const auto printed = run_in(dir.path(), args, env_);
  ASSERT_EQ(printed->exit_code(), 0) << printed->err();
  EXPECT_EQ(printed->out().rfind("salloc --job-name=wfi --nodes=2 --ntasks-per-node=1 --time=2 bash -c ", 0), 0u)
      << printed->out();
  // --run: salloc's shell reads the session from stdin: srun runs on both nodes, with the setup's variable.
  // From the test's folder, outside the checkout, as every job of the suite (test::job_root()).
  std::vector<std::string> argv = {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", dir.path(), "env"};
  for (const auto& [k, v] : env_) argv.push_back(k + "=" + v);
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--run");
  const CommandResult r = run_command(
      argv, "srun bash -c 'echo \"mark=$WF_MARK on $(hostname)\"' | sort\nexit\n", 90);
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "mark=ready on node1\nmark=ready on node2\n")) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "Granted job allocation")) << r.err;
  EXPECT_TRUE(contains(r.err, "interactive: job ")) << r.err;
}

TEST_F(Workflow, CancelWithSignalStopsASweepCheckpointingTheRunningTask) {
  test::TempDir dir("workflow-sweep-cancel", test::job_root());
  write_text(dir.file("long.sh"), kLongProgram, 0755);
  // Three tasks one at a time: task 0 runs, tasks 1 and 2 wait for the throttle. Under trainctl run
  // (TRAINCTL_BIN), which starts the run record with the program's checkpoint folder.
  Env with_trainctl = env_;
  with_trainctl["TRAINCTL_BIN"] = bin("trainctl");
  const auto submit = run_in(dir.path(),
                             {bin("trainctl"), "sweep", "--param", "lr=1,2,3", "--throttle", "1", "--output-dir", "runs",
                              "--program", dir.file("long.sh"), "--no-preflight", "--time", "5", "--job-name", "wsc",
                              "--submit"},
                             with_trainctl);
  ASSERT_EQ(submit->exit_code(), 0) << submit->err();
  const std::string id = test::last_line(submit->out());
  CancelAtExit guard{id, env_};
  ASSERT_TRUE(wait_until([&] { return contains(test::read_text(dir.file("runs/task-0/train.out")), "Train Epoch"); }))
      << "task 0 did not start within " << kWaitSeconds << " s";
  const auto status = run_in(dir.path(), {bin("trainctl"), "status", id}, env_);
  EXPECT_TRUE(contains(status->out(), "  waiting     JobArrayTaskLimit: the array's %N throttle")) << status->out();

  const auto cancel = run_in(dir.path(), {bin("trainctl"), "cancel", id, "--signal", "USR2", "--grace", "60"}, env_, 90);
  ASSERT_EQ(cancel->exit_code(), 0) << cancel->err();
  EXPECT_TRUE(contains(cancel->out(), "job " + id + ": cancelled its pending tasks.\n")) << cancel->out();
  EXPECT_TRUE(contains(cancel->out(), "job " + id + ": sent SIGUSR2 to its tasks; they stopped after ")) << cancel->out();
  EXPECT_TRUE(contains(cancel->out(), "job " + id + "_0: newest checkpoint " + dir.file("runs/task-0/checkpoints/ckpt-7.pt")))
      << cancel->out();
  std::vector<std::string> states(3);
  EXPECT_TRUE(wait_until([&] {
    for (int t = 0; t < 3; ++t) states[t] = job_state(id + "_" + std::to_string(t), env_);
    return std::all_of(states.begin(), states.end(), [](const std::string& st) { return st.empty() || is_final(st); });
  }));
  EXPECT_EQ(states[0], "CANCELLED");
  // The waiting tasks never ran: their run folders hold no log lines.
  for (int t = 1; t < 3; ++t) {
    EXPECT_EQ(test::read_text(dir.file("runs/task-" + std::to_string(t) + "/train.out")), "") << "task " << t;
  }
}

TEST_F(Workflow, StatusExplainsAWaitingJobAndCancelDropsIt) {
  test::TempDir dir("workflow-waiting", test::job_root());
  // A job that can't start for an hour: it waits with the reason BeginTime.
  const auto submit = run_in(dir.path(), {test::find_on_path("sbatch"), "--parsable", "--begin=now+3600",
                                          "--job-name=later", "--output=/dev/null", "--wrap=true"},
                             env_);
  ASSERT_EQ(submit->exit_code(), 0) << submit->err();
  const std::string id = test::last_line(submit->out());
  CancelAtExit guard{id, env_};
  const auto status = run_in(dir.path(), {bin("trainctl"), "status"}, env_);
  ASSERT_EQ(status->exit_code(), 0) << status->err();
  const auto rows = status_rows(status->out());
  ASSERT_EQ(rows.count(id), 1u) << status->out();
  EXPECT_EQ(rows.at(id)[2], "PENDING") << status->out();
  EXPECT_EQ(rows.at(id)[3], "BeginTime") << status->out();
  EXPECT_TRUE(contains(status->out(), "  waiting     BeginTime: it may not start before its begin time")) << status->out();
  // cancel --signal on a job with nothing running: no signal, just the cancel.
  const auto cancel = run_in(dir.path(), {bin("trainctl"), "cancel", id, "--signal", "USR2"}, env_);
  ASSERT_EQ(cancel->exit_code(), 0) << cancel->err();
  EXPECT_EQ(cancel->out(), "job " + id + ": no task running (PENDING), so no signal sent and nothing to checkpoint.\n"
                           "job " + id + ": cancelled (scancel).\n");
  std::string state;
  EXPECT_TRUE(wait_until([&] { return is_final(state = job_state(id, env_)); })) << state;
  EXPECT_EQ(state, "CANCELLED");
  // A second cancel says it has ended.
  const auto again = run_in(dir.path(), {bin("trainctl"), "cancel", id}, env_);
  EXPECT_EQ(again->exit_code(), 1);
  EXPECT_TRUE(contains(again->err(), "JOBID " + id + ": expected a pending or running job to cancel, found it ended "
                                     "(CANCELLED). Hint: "))
      << again->err();
}

TEST_F(Workflow, UnknownJobIdsAreClearErrors) {
  for (const char* cmd : {"status", "logs", "cancel"}) {
    const auto p = test::run_process({bin("trainctl"), cmd, "987654321"}, env_, 30);
    EXPECT_EQ(p->exit_code(), 1) << cmd;
    EXPECT_TRUE(contains(p->err(), std::string("trainctl ") + cmd + ": JOBID 987654321: expected a job the controller "
                                                                     "knows (scontrol show job"))
        << p->err();
    EXPECT_TRUE(contains(p->err(), "found no job with that id. Hint: ")) << p->err();
  }
}

}  // namespace
}  // namespace train
