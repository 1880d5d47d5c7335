// Tests for launcher/src/jobs.cpp and `trainctl status`, `logs` and `cancel` as programs, against
// fake scontrol and scancel programs that print what Slurm 22.05 prints (key=value job records, the
// jobcomp/filetxt log, "Invalid job id specified"). No cluster: tests/slurm/workflow_test.cpp runs
// the same commands on real jobs. Also SLURM's times in words (launcher/src/slurm_time.cpp).
#include "train/launcher/jobs.h"
#include "train/base/slurm_time.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "test_process.h"
#include "test_util.h"
#include "train/base/error.h"
#include "train/base/run_record.h"

namespace train {
namespace {

using test::Env;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
std::string trainctl() { return std::string(TRAIN_BINARY_DIR) + "/bin/trainctl"; }

void write_text(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  chmod(path.c_str(), mode);
}

/// A running job of 2 ranks, requeued once, as `scontrol show job -o` prints it (one line).
std::string running_job(const std::string& work_dir, const std::string& user = "alice") {
  return "JobId=12 JobName=ddp UserId=" + user + "(1000) GroupId=" + user +
         "(1000) MCS_label=N/A Priority=4294901748 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None "
         "Dependency=(null) Requeue=1 Restarts=1 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:01:05 "
         "TimeLimit=01:00:00 TimeMin=N/A SubmitTime=2026-11-26T07:00:00 StartTime=2026-11-26T07:00:01 "
         "Partition=debug AllocNode:Sid=login:123 ReqNodeList=(null) NodeList=node[1-2] BatchHost=node1 NumNodes=2 "
         "NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=2,mem=4000M,node=2,billing=2 "
         "Command=" + work_dir + "/ddp.sh WorkDir=" + work_dir + " StdErr=" + work_dir + "/logs/ddp-12.out "
         "StdIn=/dev/null StdOut=" + work_dir + "/logs/ddp-12.out Power=\n";
}

/// Array 20: task 1 completed, tasks 2-3 pending behind the %2 throttle.
std::string array_jobs(const std::string& work_dir) {
  return "JobId=21 ArrayJobId=20 ArrayTaskId=1 JobName=sweep UserId=alice(1000) JobState=COMPLETED Reason=None "
         "Restarts=0 RunTime=00:00:03 TimeLimit=UNLIMITED Partition=debug NodeList=node2 NumNodes=1 NumTasks=1 "
         "WorkDir=" + work_dir + " StdErr=" + work_dir + "/runs/task-1/train.out StdOut=" + work_dir +
         "/runs/task-1/train.out\n"
         "JobId=20 ArrayJobId=20 ArrayTaskId=2-3%2 JobName=sweep UserId=alice(1000) JobState=PENDING "
         "Reason=JobArrayTaskLimit Restarts=0 RunTime=00:00:00 TimeLimit=UNLIMITED Partition=debug NodeList=(null) "
         "NumNodes=1 NumTasks=1 WorkDir=" + work_dir + " StdOut=" + work_dir + "/runs/task-%a/train.out\n";
}

TEST(JobRecords, ParsesKeyValueLinesWithSpacesAndEquals) {
  const std::vector<KeyValues> r =
      parse_key_value_lines("NodeName=n1 OS=Linux 6.1.0 #1 SMP Gres=gpu:2 TRES=cpu=2,mem=4000M AllocNode:Sid=h:1\n\n"
                            "NodeName=n2 Reason=Not responding [slurm@2026-11-26T07:00:00]\n");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].at("OS"), "Linux 6.1.0 #1 SMP");
  EXPECT_EQ(r[0].at("TRES"), "cpu=2,mem=4000M");
  EXPECT_EQ(r[0].at("AllocNode:Sid"), "h:1");
  EXPECT_EQ(r[1].at("Reason"), "Not responding [slurm@2026-11-26T07:00:00]");
}

TEST(JobRecords, ParsesScontrolJobsAndArrayTasks) {
  const std::vector<JobInfo> jobs = parse_scontrol_jobs(running_job("/w/p") + array_jobs("/w/p"));
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].id, "12");
  EXPECT_EQ(jobs[0].name, "ddp");
  EXPECT_EQ(jobs[0].user, "alice");
  EXPECT_EQ(jobs[0].state, "RUNNING");
  EXPECT_EQ(jobs[0].elapsed, "00:01:05");
  EXPECT_EQ(jobs[0].nodes, "node[1-2]");
  EXPECT_EQ(jobs[0].restarts, 1);
  EXPECT_EQ(jobs[0].num_tasks, 2);
  EXPECT_EQ(jobs[0].std_out, "/w/p/logs/ddp-12.out");
  EXPECT_EQ(jobs[0].work_dir, "/w/p");
  EXPECT_EQ(jobs[1].id, "20_1");
  EXPECT_EQ(jobs[1].job_id, "21");
  EXPECT_EQ(jobs[2].id, "20_[2-3%2]");
  EXPECT_EQ(jobs[2].reason, "JobArrayTaskLimit");
  EXPECT_EQ(jobs[2].nodes, "");  // (null)
}

// A chain's array record after its pending tasks were cancelled: scontrol shows ArrayTaskId=NO_VAL
// (4294967294), squeue shows the job id alone (as seen on the local Slurm 22.05).
TEST(JobRecords, ArrayRecordWithoutTasksShowsAsSqueueShowsIt) {
  const std::vector<JobInfo> jobs = parse_scontrol_jobs(
      "JobId=57 ArrayJobId=57 ArrayTaskId=4294967294 JobName=chain UserId=alice(1000) JobState=CANCELLED "
      "Reason=None WorkDir=/w/p StdOut=/w/p/logs/chain-57_4294967294.out\n"
      "JobId=58 ArrayJobId=57 ArrayTaskId=0 JobName=chain UserId=alice(1000) JobState=COMPLETED Reason=None "
      "WorkDir=/w/p StdOut=/w/p/logs/chain-57_0.out\n");
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].id, "57");
  EXPECT_EQ(jobs[0].std_out, "");  // the record never ran: no log
  EXPECT_EQ(jobs[1].id, "57_0");
  EXPECT_EQ(render_status(jobs, {}).find("4294967294"), std::string::npos) << render_status(jobs, {});
}

// The job's end in train's log: a date and the time left, not epoch seconds; and what "no limit" looks like.
TEST(SlurmTime, EndTimesAndDurationsInWords) {
  const char* old_tz = std::getenv("TZ");
  const std::string saved = old_tz != nullptr ? old_tz : "";
  setenv("TZ", "UTC", 1);
  tzset();
  const int64_t end = parse_slurm_timestamp("2026-11-27T01:30:00");
  ASSERT_GT(end, 0);
  EXPECT_EQ(describe_end_time(end, end - 7200), "2026-11-27 01:30:00 UTC, in 2 h 00 min");
  EXPECT_EQ(describe_end_time(end, end - 59), "2026-11-27 01:30:00 UTC, in 59 s");
  EXPECT_EQ(describe_end_time(end, end + 5), "2026-11-27 01:30:00 UTC, already past");
  if (old_tz != nullptr) {
    setenv("TZ", saved.c_str(), 1);
  } else {
    unsetenv("TZ");
  }
  tzset();
  EXPECT_EQ(describe_duration(0), "0 s");
  EXPECT_EQ(describe_duration(725), "12 min 05 s");
  EXPECT_EQ(describe_duration(3 * 86400 + 4 * 3600 + 59), "3 d 04 h");
  EXPECT_EQ(describe_duration(-3), "0 s");
  for (const char* none : {"UNLIMITED", "INFINITE", "365-00:00:00"}) EXPECT_TRUE(is_no_time_limit(none)) << none;
  for (const char* limit : {"5:00", "1-00:00:00", "364-23:59:59", ""}) EXPECT_FALSE(is_no_time_limit(limit)) << limit;
}

TEST(JobRecords, ParsesTheJobcompLog) {
  const std::vector<JobInfo> jobs = parse_jobcomp(
      "JobId=7 UserId=alice(1000) GroupId=alice(1000) Name=ddp JobState=COMPLETED Partition=debug "
      "TimeLimit=UNLIMITED StartTime=2026-11-26T06:00:00 EndTime=2026-11-26T06:01:00 NodeList=node[1-2] NodeCnt=2 "
      "ProcCnt=2 WorkDir=/w/p ReservationName= Tres=cpu=2,node=2 Account= QOS= WcKey= Cluster=libtrain "
      "SubmitTime=2026-11-26T05:59:59 EligibleTime=2026-11-26T05:59:59 DerivedExitCode=0:0 ExitCode=0:0\n");
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].id, "7");
  EXPECT_EQ(jobs[0].name, "ddp");
  EXPECT_EQ(jobs[0].state, "COMPLETED");
  EXPECT_TRUE(jobs[0].from_jobcomp);
  EXPECT_EQ(jobs[0].work_dir, "/w/p");
}

TEST(JobRecords, JobIdsAndFinalStates) {
  for (const char* ok : {"12", "12_3", "12_[1-3]", "12_[1,3%2]"}) EXPECT_NO_THROW(check_job_id(ok)) << ok;
  for (const std::string bad : {"", "abc", "12x", "-1", "12_", "12.3", "12 13"}) {
    try {
      check_job_id(bad);
      ADD_FAILURE() << bad;
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), "JOBID '" + bad + "': expected a job id such as 12")) << e.what();
      EXPECT_FALSE(e.hint().empty());
    }
  }
  EXPECT_TRUE(is_final_state("COMPLETED"));
  EXPECT_TRUE(is_final_state("CANCELLED"));
  EXPECT_FALSE(is_final_state("RUNNING"));
  EXPECT_FALSE(is_final_state("PENDING"));
  EXPECT_FALSE(is_final_state("REQUEUED"));
}

TEST(JobRecords, ProjectJobsAreTheUsersUnderTheFolder) {
  const std::vector<JobInfo> jobs = parse_scontrol_jobs(running_job("/w/p/sub") + running_job("/w/other") +
                                                        running_job("/w/p", "bob") + running_job("/w/pp"));
  const std::vector<JobInfo> mine = jobs_under(jobs, "alice", "/w/p");
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].work_dir, "/w/p/sub");
  EXPECT_EQ(jobs_under(jobs, "alice", "/").size(), 3u);
}

TEST(JobFiles, CheckpointsMetricsAndRankFiles) {
  test::TempDir dir("jobs-files");
  const std::string log =
      "ddp: job 12: 2 node(s) node[1-2], tasks per node 1(x2), 1 CPU(s) per task, GPUs per node 0; train "
      "build/bin/train, checkpoints in checkpoints/ddp-12\n"
      "2026-11-26T07:00:02.000 info [rank 0/2 node1] Train Epoch: 1 [0/2000] loss: 2.3\n"
      "2026-11-26T07:00:03.000 info [rank 1/2 node2] Train Epoch: 1 [0/2000] loss: 2.3\n"
      "{\"event\":\"done\",\"epochs\":1,\"test_accuracy\":0.8}\n"
      "ddp: trailing line\n";
  EXPECT_EQ(last_metrics_line(log), "{\"event\":\"done\",\"epochs\":1,\"test_accuracy\":0.8}");
  EXPECT_EQ(last_metrics_line("x\n2026 info [rank 0/2 n] Train Epoch: 2 [64/100]\ny\n"),
            "2026 info [rank 0/2 n] Train Epoch: 2 [64/100]");
  EXPECT_EQ(last_metrics_line("nothing\n"), "");
  test::TempDir ckpt("jobs-ckpt");
  EXPECT_EQ(newest_checkpoint(ckpt.path()), "");
  for (const char* name : {"ckpt-9.pt", "ckpt-10.pt", ".ckpt-11.pt.tmp.3", "other.pt"}) write_text(ckpt.file(name), "x");
  EXPECT_EQ(newest_checkpoint(ckpt.path()), ckpt.file("ckpt-10.pt"));
  EXPECT_EQ(rank_log_path("/w/logs/out12.log", 3), "/w/logs/out12-3.log");
  EXPECT_EQ(rank_log_path("/w/logs/ddp-12.out", 0), "/w/logs/ddp-12-0.out");
  EXPECT_EQ(rank_log_path("/w.d/logs/x", 1), "/w.d/logs/x-1");
  EXPECT_TRUE(is_rank_line("2026 info [rank 1/2 node2] hello", 1));
  EXPECT_FALSE(is_rank_line("2026 info [rank 11/12 node2] hello", 1));
  EXPECT_TRUE(is_rank_line("[r1] hello", 1));
  EXPECT_FALSE(is_rank_line("[r10] hello", 1));
}

// ---- the programs, against fake SLURM commands ----------------------------------------------------

/// A folder with fake scontrol and scancel on PATH: `scontrol show job -o [ID]` prints the records
/// of jobs.txt that match ID ("Invalid job id specified" for none), `show config` names jobcomp.txt,
/// and scancel appends its arguments to scancel.log.
class FakeScontrol : public ::testing::Test {
 protected:
  void SetUp() override {
    mkdir(dir_.file("bin").c_str(), 0755);
    mkdir(dir_.file("logs").c_str(), 0755);
    write_text(dir_.file("bin/scontrol"),
               "#!/bin/bash\n"
               "d=\"$(dirname \"$0\")/..\"\n"
               "if [[ \"$1 $2\" == \"show config\" ]]; then\n"
               "  echo \"JobCompLoc              = $(cd \"$d\" && pwd)/jobcomp.txt\"\n"
               "  echo 'JobCompType             = jobcomp/filetxt'; exit 0\n"
               "fi\n"
               "if [[ \"$1 $2 $3\" == \"show job -o\" ]]; then\n"
               "  id=\"$4\"\n"
               "  if [[ -z \"$id\" ]]; then cat \"$d/jobs.txt\"; exit 0; fi\n"
               "  if [[ \"$id\" == *_* ]]; then pat=\"ArrayJobId=${id%_*} ArrayTaskId=${id#*_} \"; else\n"
               "    pat=\"(^JobId=$id |ArrayJobId=$id )\"; fi\n"
               "  if grep -E \"$pat\" \"$d/jobs.txt\"; then exit 0; fi\n"
               "  echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1\n"
               "fi\n"
               "echo \"fake scontrol: unexpected $*\" >&2; exit 2\n",
               0755);
    write_text(dir_.file("bin/scancel"), "#!/bin/sh\necho \"$*\" >> \"$(dirname \"$0\")/../scancel.log\"\n", 0755);
    write_text(dir_.file("jobs.txt"), running_job(dir_.path()) + array_jobs(dir_.path()));
    write_text(dir_.file("jobcomp.txt"),
               "JobId=31 UserId=alice(1000) GroupId=alice(1000) Name=old JobState=COMPLETED Partition=debug "
               "NodeList=node1 WorkDir=" + dir_.path() + "\n");
    env_ = test::hermetic_env();
    env_["PATH"] = dir_.file("bin") + ":/usr/bin:/bin";
  }

  std::unique_ptr<test::TestProcess> trainctl_in(const std::vector<std::string>& args, double timeout_s = 30) {
    std::vector<std::string> argv = {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", dir_.path(), trainctl()};
    argv.insert(argv.end(), args.begin(), args.end());
    return test::run_process(argv, env_, timeout_s);
  }

  test::TempDir dir_{"jobs-fake"};
  Env env_;
};

TEST_F(FakeScontrol, StatusShowsStateCheckpointAndMetrics) {
  mkdir(dir_.file("checkpoints").c_str(), 0755);
  mkdir(dir_.file("checkpoints/ddp-12").c_str(), 0755);
  write_text(dir_.file("checkpoints/ddp-12/ckpt-40.pt"), "x");
  // The folders come from the run record (train writes it, trainctl run adds the restarts), not the log.
  RunRecord record;
  record.job_id = "12";
  record.state = "running";
  record.checkpoint_dir = dir_.file("checkpoints/ddp-12");
  record.tensorboard_dir = dir_.file("runs/ddp-12");
  record.step = 47;
  record.world_size = 2;
  RestartEntry restart;
  restart.number = 1;
  restart.cause = "lost rank";
  restart.nodes = {"node2"};
  restart.exit_code = 137;
  restart.resumed_step = 40;
  restart.seconds = 6.5;
  record.restarts = {restart};
  ASSERT_EQ(record.save(RunRecord::path_for(dir_.path(), "12")), "");
  write_text(dir_.file("logs/ddp-12.out"),
             "ddp: job 12, restart 1: 2 node(s) node[1-2], tasks per node 1(x2), 1 CPU(s) per task, GPUs per node 0; "
             "train build/bin/train, checkpoints in checkpoints/ddp-12\n"
             "2026-11-26T07:00:02.000 info [rank 0/2 node1] Train Epoch: 1 [640/2000 (32%)] loss: 0.9\n");
  const auto p = trainctl_in({"status", "12"});
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  const std::vector<std::string> lines = test::lines_of(p->out());
  ASSERT_GE(lines.size(), 6u) << p->out();
  EXPECT_EQ(lines[0], "JOBID  NAME  STATE    REASON  ELAPSED   NODES      RESTARTS");
  EXPECT_EQ(lines[1], "12     ddp   RUNNING  -       00:01:05  node[1-2]  1");
  EXPECT_TRUE(contains(p->out(), "  log         " + dir_.file("logs/ddp-12.out") + "\n")) << p->out();
  EXPECT_TRUE(contains(p->out(), "  checkpoint  " + dir_.file("checkpoints/ddp-12/ckpt-40.pt") + "\n")) << p->out();
  EXPECT_TRUE(contains(p->out(), "  tensorboard " + dir_.file("runs/ddp-12") + "\n")) << p->out();
  EXPECT_TRUE(contains(p->out(), "  run         running, step 47, 2 rank(s)\n")) << p->out();
  EXPECT_TRUE(contains(p->out(), "  restarts    1 in the allocation (trainctl run); last: restart 1: lost rank on node2 "
                                 "(exit 137), all nodes kept; resumed from step 40, 6.5 s after the failure\n"))
      << p->out();
  // A log line naming another folder changes nothing: the log is not read for folders.
  write_text(dir_.file("logs/ddp-12.out"), "ddp: job 12: train t, checkpoints in elsewhere\n", 0644);
  EXPECT_TRUE(contains(trainctl_in({"status", "12"})->out(), "  checkpoint  " + dir_.file("checkpoints/ddp-12/ckpt-40.pt")));
  // A job without a record shows no folders; a damaged record is named.
  ASSERT_EQ(std::remove(RunRecord::path_for(dir_.path(), "12").c_str()), 0);
  EXPECT_TRUE(contains(trainctl_in({"status", "12"})->out(), "  checkpoint  -\n"));
  write_text(RunRecord::path_for(dir_.path(), "12"), "not json");
  const auto damaged = trainctl_in({"status", "12"});
  EXPECT_TRUE(contains(damaged->out(), "  run record  ")) << damaged->out();
  EXPECT_TRUE(contains(damaged->out(), RunRecord::path_for(dir_.path(), "12"))) << damaged->out();
  EXPECT_TRUE(contains(p->out(), "  metrics     2026-11-26T07:00:02.000 info [rank 0/2 node1] Train Epoch: 1")) << p->out();

  // Without an id: the user's jobs under this folder (the fake jobs belong to alice, not to us).
  const auto mine = trainctl_in({"status"});
  EXPECT_EQ(mine->exit_code(), 0) << mine->err();
  EXPECT_TRUE(contains(mine->out(), "No jobs of ")) << mine->out();
  // An array's id shows its tasks, and the pending ones' reason.
  const auto array = trainctl_in({"status", "20"});
  EXPECT_EQ(array->exit_code(), 0) << array->err();
  EXPECT_TRUE(contains(array->out(), "20_1        sweep  COMPLETED")) << array->out();
  EXPECT_TRUE(contains(array->out(), "20_[2-3%2]  sweep  PENDING    JobArrayTaskLimit")) << array->out();
  EXPECT_TRUE(contains(array->out(), "  waiting     JobArrayTaskLimit: the array's %N throttle")) << array->out();
  EXPECT_TRUE(contains(pending_reason_text("PartitionTimeLimit"), "it will never start"));
  EXPECT_EQ(pending_reason_text("SomethingNew"), "");
  // A job the controller forgot, from the completion log.
  const auto old = trainctl_in({"status", "31"});
  EXPECT_EQ(old->exit_code(), 0) << old->err();
  EXPECT_TRUE(contains(old->out(), "31     old   COMPLETED (ended)")) << old->out();
}

TEST_F(FakeScontrol, UnknownAndMalformedJobIdsAreClearErrors) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"status", "999"}, {"logs", "999"}, {"cancel", "999"}}) {
    const auto p = trainctl_in(args);
    EXPECT_EQ(p->exit_code(), 1) << args[0];
    EXPECT_TRUE(contains(p->err(), "trainctl " + args[0] + ": JOBID 999: expected a job the controller knows "
                                   "(scontrol show job) or the job completion log (" + dir_.file("jobcomp.txt") +
                                   "), found no job with that id. Hint: "))
        << p->err();
  }
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"status", "12x"}, {"logs", "abc"}, {"cancel", "1;2"}}) {
    const auto p = trainctl_in(args);
    EXPECT_EQ(p->exit_code(), 1) << args[0];
    EXPECT_TRUE(contains(p->err(), "JOBID '" + args[1] + "': expected a job id such as 12")) << p->err();
  }
  const auto none = trainctl_in({"logs"});
  EXPECT_EQ(none->exit_code(), 1);
  EXPECT_TRUE(contains(none->err(), "JOBID: expected the job whose log to show, found none given.")) << none->err();
}

TEST_F(FakeScontrol, LogsShowsRanksFromSplitFilesOrPrefixes) {
  write_text(dir_.file("logs/ddp-12.out"), "ddp: job 12 started\n"
                                           "t info [rank 0/2 node1] zero\n"
                                           "t info [rank 1/2 node2] one\n");
  auto p = trainctl_in({"logs", "12"});
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(p->out(), test::read_text(dir_.file("logs/ddp-12.out")));
  p = trainctl_in({"logs", "12", "--rank", "1"});
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(p->out(), "t info [rank 1/2 node2] one\n");

  // srun's per-rank files (--per-rank-logs) next to the log.
  write_text(dir_.file("logs/ddp-12-0.out"), "rank zero says\n");
  write_text(dir_.file("logs/ddp-12-1.out"), "rank one says\nand more\n");
  p = trainctl_in({"logs", "12"});
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(p->out(), test::read_text(dir_.file("logs/ddp-12.out")) +
                          "[r0] rank zero says\n[r1] rank one says\n[r1] and more\n");
  p = trainctl_in({"logs", "12", "--rank", "1"});
  EXPECT_EQ(p->out(), "rank one says\nand more\n");

  // An array needs a task; a finished task's log prints, -f returns at once for it.
  p = trainctl_in({"logs", "20"});
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_TRUE(contains(p->err(), "JOBID 20: expected one job, found an array of 2 tasks (20_1, 20_[2-3%2]). Hint: "))
      << p->err();
  mkdir(dir_.file("runs").c_str(), 0755);
  mkdir(dir_.file("runs/task-1").c_str(), 0755);
  write_text(dir_.file("runs/task-1/train.out"), "task one\n{\"event\":\"done\"}\n");
  p = trainctl_in({"logs", "20_1", "-f"}, 20);
  EXPECT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(p->out(), "task one\n{\"event\":\"done\"}\n");
  // A log that isn't there yet.
  write_text(dir_.file("jobs.txt"), running_job(dir_.path() + "/nowhere"));
  p = trainctl_in({"logs", "12"});
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_TRUE(contains(p->err(), "expected its log " + dir_.path() + "/nowhere/logs/ddp-12.out, found no such file (job "
                                 "RUNNING). Hint: "))
      << p->err();
}

TEST_F(FakeScontrol, CancelSignalsFirstThenCancels) {
  // Cancel at once.
  auto p = trainctl_in({"cancel", "12"});
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(p->out(), "job 12: cancelled (scancel).\n");
  EXPECT_EQ(test::read_text(dir_.file("scancel.log")), "12\n");
  // With a signal: to the tasks first; the fake job keeps running, so after --grace it is cancelled.
  p = trainctl_in({"cancel", "12", "--signal", "SIGUSR2", "--grace", "1"});
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_TRUE(contains(p->out(), "job 12: sent SIGUSR2 to its tasks; they were still running after 1 s (--grace), "
                                 "cancelling anyway.\njob 12: cancelled (scancel).\n"))
      << p->out();
  EXPECT_EQ(test::read_text(dir_.file("scancel.log")), "12\n--signal=USR2 12\n12\n");
  // Signals the batch shell alone would get, or with a delay, are refused; so is a finished job.
  p = trainctl_in({"cancel", "12", "--signal", "B:USR2"});
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_TRUE(contains(p->err(), "--signal 'B:USR2': expected a plain signal such as USR2")) << p->err();
  p = trainctl_in({"cancel", "12", "--signal", "NOPE"});
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_TRUE(contains(p->err(), "expected a signal name (USR1, USR2, TERM, ...) or number, found 'NOPE'")) << p->err();
  p = trainctl_in({"cancel", "20_1"});
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_TRUE(contains(p->err(), "JOBID 20_1: expected a pending or running job to cancel, found it ended (COMPLETED)."))
      << p->err();
}

}  // namespace
}  // namespace train
