// Tests for the scripts launcher/src/sbatch_script.cpp generates, run under a fake srun without
// SLURM (arguments, exit codes, preemption, resume hints), and the committed wrappers in scripts/
// against the generator.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "sbatch_test.h"
#include "test_process.h"
#include "test_util.h"
#include "train/launcher/jobs.h"
#include "train/launcher/sbatch.h"

namespace train {
namespace {

using test::Env;

std::string source_path(const std::string& rel) { return std::string(TRAIN_SOURCE_DIR) + "/" + rel; }

// ---- running a generated script under a fake srun ------------------------------------------------

/// A submit dir with fake srun, train and trainctl: srun drops its own options and runs the
/// command; train and trainctl print their arguments and exit with $FAKE_TRAIN_RC / $FAKE_PREFLIGHT_RC;
/// `trainctl run` execs srun as the real one's first launch does.
class FakeSlurm {
 public:
  FakeSlurm() : dir_("sbatch-fake") {
    const std::string bin = dir_.file("bin");
    mkdir(bin.c_str(), 0755);
    write_text(bin + "/srun",
               "#!/bin/bash\n"
               "echo \"srun $*\" >> \"$FAKE_LOG\"\n"
               "while [[ \"${1:-}\" == -* ]]; do shift; done\n"
               "exec \"$@\"\n",
               0755);
    write_text(bin + "/train",
               "#!/bin/bash\n"
               "printf 'train'; printf ' [%s]' \"$@\"; echo\n"
               "exit \"${FAKE_TRAIN_RC:-0}\"\n",
               0755);
    // trainctl run is the real one's first launch: srun with --kill-on-bad-exit=1 and the --srun-arg options.
    write_text(bin + "/trainctl",
               "#!/bin/bash\n"
               "if [[ \"$1\" == run ]]; then\n"
               "  echo \"trainctl $*\" >> \"$FAKE_LOG\"; shift; opts=()\n"
               "  while [[ \"$1\" != -- ]]; do [[ \"$1\" == --srun-arg=* ]] && opts+=(\"${1#--srun-arg=}\"); shift; done\n"
               "  shift; exec srun --kill-on-bad-exit=1 \"${opts[@]}\" \"$@\"\n"
               "fi\n"
               "printf 'trainctl'; printf ' [%s]' \"$@\"; echo\n"
               "exit \"${FAKE_PREFLIGHT_RC:-0}\"\n",
               0755);
    // scontrol show job: the Command= line SLURM keeps (the submitted script and its arguments,
    // joined by spaces), from $FAKE_COMMAND; no answer when that is unset.
    write_text(bin + "/scontrol",
               "#!/bin/bash\n"
               "[[ -n \"${FAKE_COMMAND:-}\" ]] || exit 1\n"
               "echo \"JobId=$2 JobName=ddp\"\n"
               "echo \"   Command=$FAKE_COMMAND\"\n"
               "echo \"   WorkDir=$SLURM_SUBMIT_DIR\"\n",
               0755);
  }

  /// Runs a script as the batch step of job 123 (2 nodes x 1 task) with the given arguments.
  std::unique_ptr<test::TestProcess> run(const std::string& script, const std::vector<std::string>& args,
                                         const Env& extra = {}) const {
    Env env = test::hermetic_env();
    env["PATH"] = dir_.file("bin") + ":" + env["PATH"];
    env["FAKE_LOG"] = dir_.file("srun.log");
    env["SLURM_JOB_ID"] = "123";
    env["SLURM_JOB_NAME"] = "ddp";
    env["SLURM_SUBMIT_DIR"] = dir_.path();
    env["SLURM_JOB_NUM_NODES"] = "2";
    env["SLURM_JOB_NODELIST"] = "node[1-2]";
    env["SLURM_TASKS_PER_NODE"] = "1(x2)";
    env["TRAIN_BIN"] = dir_.file("bin/train");
    for (const auto& [k, v] : extra) env[k] = v;
    std::vector<std::string> argv = {"/bin/bash", script};
    argv.insert(argv.end(), args.begin(), args.end());
    return test::run_process(argv, env, 30);
  }

  std::string srun_log() const { return test::read_text(dir_.file("srun.log")); }
  const test::TempDir& dir() const { return dir_; }

 private:
  test::TempDir dir_;
};

TEST(SbatchScriptRun, RefusesToRunOutsideAJob) {
  const auto p = test::run_process({"/bin/bash", source_path("scripts/ddp.sh"), "--epochs", "1"}, test::hermetic_env());
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_EQ(p->out(), "");
  EXPECT_TRUE(contains(p->err(), "not inside a SLURM job (SLURM_JOB_ID is unset)")) << p->err();
  EXPECT_TRUE(contains(p->err(), "Hint: submit it: sbatch " + source_path("scripts/ddp.sh") + " [TRAIN ARGS]")) << p->err();
}

TEST(SbatchScriptRun, ForwardsItsArgumentsAndExitsWithSrunsStatus) {
  FakeSlurm slurm;
  const auto p = slurm.run(source_path("scripts/ddp.sh"), {"--epochs", "1", "--metrics", "a b.jsonl"});
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  const std::vector<std::string> out = test::lines_of(p->out());
  ASSERT_EQ(out.size(), 3u) << p->out();
  EXPECT_EQ(out[0],
            "ddp: job 123: 2 node(s) node[1-2], tasks per node 1(x2), 1 CPU(s) per task, GPUs per node 0; train " +
                slurm.dir().file("bin/train") + ", checkpoints in checkpoints/ddp-123");
  EXPECT_EQ(out[1], "trainctl [preflight] [--tasks-per-node] [1(x2)] [--] [--checkpoint-dir] [checkpoints/ddp-123] "
                    "[--resume] [auto] [--epochs] [1] [--metrics] [a b.jsonl]");
  EXPECT_EQ(out[2], "train [--checkpoint-dir] [checkpoints/ddp-123] [--resume] [auto] [--epochs] [1] [--metrics] "
                    "[a b.jsonl]");
  EXPECT_EQ(p->err(), "");
  const std::string log = slurm.srun_log();
  EXPECT_TRUE(contains(log, "srun --ntasks=2 --ntasks-per-node=1 " + slurm.dir().file("bin/trainctl") + " preflight")) << log;
  EXPECT_TRUE(contains(log, "trainctl run --max-restarts 3 -- " + slurm.dir().file("bin/train") + " --checkpoint-dir")) << log;
  EXPECT_TRUE(contains(log, "srun --kill-on-bad-exit=1 " + slurm.dir().file("bin/train") + " --checkpoint-dir")) << log;
  struct stat st {};
  EXPECT_EQ(stat(slurm.dir().file("logs").c_str(), &st), 0) << "the script makes logs/ in the submit dir";
}

// --tensorboard ROOT: a folder per job under ROOT reaches train (before the submitter's own
// arguments, so theirs wins; train puts it in the run record for trainctl status) and the log; a
// sweep's task gets its own.
TEST(SbatchScriptRun, TensorBoardFolderPerJobReachesTrainAndTheLog) {
  FakeSlurm slurm;
  SbatchOptions o;
  o.job_name = "ddp";
  o.tensorboard = "runs";
  const std::string script = slurm.dir().file("tb.sh");
  write_text(script, generate_sbatch_script(o), 0755);
  const auto p = slurm.run(script, {"--epochs", "1"});
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_TRUE(contains(p->out(), "ddp: TensorBoard event files in runs/ddp-123 (tensorboard --logdir runs)\n")) << p->out();
  EXPECT_TRUE(contains(p->out(), "train [--checkpoint-dir] [checkpoints/ddp-123] [--resume] [auto] [--tensorboard] "
                                 "[runs/ddp-123] [--epochs] [1]\n")) << p->out();
  // An array chain's chunks go on in one folder, as they do with one checkpoint folder.
  const auto chunk = slurm.run(script, {}, {{"SLURM_ARRAY_JOB_ID", "120"}, {"SLURM_ARRAY_TASK_ID", "2"}});
  ASSERT_EQ(chunk->exit_code(), 0) << chunk->err();
  EXPECT_TRUE(contains(chunk->out(), "[--tensorboard] [runs/ddp-120]")) << chunk->out();

  o.array_tasks = ArrayTasks{{{"--lr", "0.1"}, {"--lr", "0.2"}}, 0, slurm.dir().file("sweep")};
  const std::string s = generate_sbatch_script(o);
  EXPECT_TRUE(contains(s, "TB_DIR=runs\"/${SLURM_JOB_NAME:-ddp}-$SLURM_ARRAY_JOB_ID/task-$SLURM_ARRAY_TASK_ID\"\n")) << s;
  EXPECT_TRUE(contains(s, "TRAIN_ARGS+=(--tensorboard \"$TB_DIR\")\n")) << s;
}

TEST(SbatchScriptRun, ArrayJobsShareACheckpointFolderAndCpusBecomeThreads) {
  FakeSlurm slurm;
  const auto p = slurm.run(source_path("scripts/ddp.sh"), {"--checkpoint-dir", "mine"},
                           {{"SLURM_ARRAY_JOB_ID", "120"}, {"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_CPUS_PER_TASK", "4"},
                            {"SLURM_RESTART_COUNT", "1"}});
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_TRUE(contains(p->out(), "ddp: job 123 (chunk 2 of array 120), restart 1: ")) << p->out();
  EXPECT_TRUE(contains(p->out(), "train [--checkpoint-dir] [checkpoints/ddp-120] [--resume] [auto] [--threads] [4] "
                                 "[--checkpoint-dir] [mine]\n")) << p->out();
}

TEST(SbatchScriptRun, ReportsTrainFailuresAndPreemption) {
  FakeSlurm slurm;
  auto p = slurm.run(source_path("scripts/ddp.sh"), {}, {{"FAKE_TRAIN_RC", "3"}});
  EXPECT_EQ(p->exit_code(), 3);
  EXPECT_TRUE(contains(p->err(), "ddp: training failed: exit code 3 (trainctl run's last line above says why it did not restart it). Hint: ")) << p->err();

  p = slurm.run(source_path("scripts/ddp.sh"), {}, {{"FAKE_TRAIN_RC", "75"}});
  EXPECT_EQ(p->exit_code(), 75);
  EXPECT_TRUE(contains(p->err(), "saved a checkpoint in checkpoints/ddp-123 (exit 75): the requeued job resumes")) << p->err();
}

// SLURM runs a spool copy of the script ($0), deleted when the job ends: the hint after a cancel or
// a failure names the script as submitted (scontrol's Command=) with this job's arguments, quoted,
// and the checkpoint folder, run from the submit dir.
TEST(SbatchScriptRun, ResumeHintNamesTheSubmittedScriptNotTheSpoolCopy) {
  FakeSlurm slurm;
  const std::string spool = slurm.dir().file("spool-slurm_script");
  write_text(spool, test::read_text(source_path("scripts/ddp.sh")), 0755);
  const std::string submitted = source_path("scripts/ddp.sh");
  const Env env = {{"FAKE_TRAIN_RC", "143"}, {"FAKE_COMMAND", submitted + " --epochs 3 --metrics a b.jsonl"}};
  auto p = slurm.run(spool, {"--epochs", "3", "--metrics", "a b.jsonl"}, env);
  EXPECT_EQ(p->exit_code(), 143);
  const std::string resume = "cd " + slurm.dir().path() + " && sbatch " + submitted +
                             " --epochs 3 --metrics a\\ b.jsonl --checkpoint-dir checkpoints/ddp-123";
  EXPECT_TRUE(contains(p->err(), "not requeued. To go on from it: " + resume + "  # and the sbatch options")) << p->err();
  EXPECT_FALSE(contains(p->err(), spool)) << p->err();

  Env failed = env;
  failed["FAKE_TRAIN_RC"] = "3";
  p = slurm.run(spool, {"--epochs", "3", "--metrics", "a b.jsonl"}, failed);
  EXPECT_EQ(p->exit_code(), 3);
  EXPECT_TRUE(contains(p->err(), "resubmit with --checkpoint-dir checkpoints/ddp-123: " + resume)) << p->err();

  // Without arguments, and without an answer from scontrol: the script is named for the user to fill in.
  p = slurm.run(spool, {}, {{"FAKE_TRAIN_RC", "143"}, {"FAKE_COMMAND", submitted}});
  EXPECT_TRUE(contains(p->err(), "To go on from it: cd " + slurm.dir().path() + " && sbatch " + submitted +
                                     " --checkpoint-dir checkpoints/ddp-123  #")) << p->err();
  p = slurm.run(spool, {"--epochs", "3"}, {{"FAKE_TRAIN_RC", "143"}});
  EXPECT_TRUE(contains(p->err(), "&& sbatch YOUR_SCRIPT --epochs 3 --checkpoint-dir checkpoints/ddp-123")) << p->err();
}

TEST(SbatchScriptRun, FailedPreflightStopsBeforeTraining) {
  FakeSlurm slurm;
  const auto p = slurm.run(source_path("scripts/ddp.sh"), {}, {{"FAKE_PREFLIGHT_RC", "1"}});
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_TRUE(contains(p->err(), "ddp: preflight failed (see above): training not started.")) << p->err();
  EXPECT_FALSE(contains(p->out(), "train [")) << p->out();
}

TEST(SbatchScriptRun, MissingTrainProgramIsExplained) {
  FakeSlurm slurm;
  const auto p = slurm.run(source_path("scripts/ddp.sh"), {}, {{"TRAIN_BIN", "nope/train"}});
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_TRUE(contains(p->err(), "train program: expected an executable file at 'nope/train'")) << p->err();
  EXPECT_TRUE(contains(p->err(), "Hint: build it")) << p->err();
}

// ---- the committed wrappers ---------------------------------------------------------------------

TEST(SbatchWrappers, MatchTheGenerator) {
  test::TempDir dir("sbatch-wrappers");
  Env env = test::hermetic_env();
  env["TRAINCTL"] = trainctl();
  const auto p = test::run_process({"/bin/bash", source_path("scripts/regenerate-wrappers.sh"), dir.path()}, env, 60);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  for (const char* name : {"ddp.sh", "ddp-gpu.sh", "ddp-cpu-debug.sh"}) {
    const std::string committed = test::read_text(source_path(std::string("scripts/") + name));
    const std::string generated = test::read_text(dir.file(name));
    ASSERT_FALSE(generated.empty()) << name;
    EXPECT_EQ(committed, generated) << "scripts/" << name << " drifted from `trainctl sbatch`: rerun "
                                    << "scripts/regenerate-wrappers.sh (and commit) instead of editing it by hand";
    EXPECT_TRUE(contains(committed, "\n#   trainctl sbatch --job-name ")) << name << ": no regenerating command";
    struct stat st {};
    ASSERT_EQ(stat(source_path(std::string("scripts/") + name).c_str(), &st), 0);
    EXPECT_TRUE(st.st_mode & S_IXUSR) << name << " is not executable";
  }
}

TEST(SbatchWrappers, ShellcheckFindsNothing) {
  const std::string shellcheck = test::find_on_path("shellcheck");
  if (shellcheck.empty()) GTEST_SKIP() << "shellcheck is not installed (apt-get install shellcheck)";
  const auto p = test::run_process({shellcheck, source_path("scripts/ddp.sh"), source_path("scripts/ddp-gpu.sh"),
                                    source_path("scripts/ddp-cpu-debug.sh"),
                                    source_path("scripts/regenerate-wrappers.sh")},
                                   test::hermetic_env(), 60);
  EXPECT_EQ(p->exit_code(), 0) << p->out() << p->err();
  // And a script with every feature on.
  SbatchOptions o;
  o.setup = {"module load cuda"};
  o.container = "t.sif";
  o.stage_data = "d.tar";
  o.array_chain = "2";
  o.gres = "gpu:2";
  o.train_args = {"--epochs", "1"};
  test::TempDir dir("sbatch-shellcheck");
  write_text(dir.file("all.sh"), generate_sbatch_script(o));
  const auto all = test::run_process({shellcheck, dir.file("all.sh")}, test::hermetic_env(), 60);
  EXPECT_EQ(all->exit_code(), 0) << all->out() << all->err();
}

}  // namespace
}  // namespace train
