// Tests for launcher/src/sbatch.cpp and sbatch_cluster.cpp, and for `trainctl sbatch` as a program:
// option parsing and validation, the generated scripts, sinfo and sbatch --test-only parsing. The
// scripts run under a fake srun in sbatch_script_run_test.cpp, preflight in preflight_test.cpp,
// --stage-data's shards in sbatch_stage_test.cpp. No cluster needed: tests/slurm runs the same
// scripts on the real local one.
#include "train/launcher/sbatch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "sbatch_test.h"
#include "test_process.h"
#include "test_util.h"
#include "train/base/error.h"

namespace train {
namespace {

using test::Env;

// ---- time limits, signals, memory -------------------------------------------------------------

TEST(SbatchTime, AcceptsEveryFormatSbatchAccepts) {
  // The same table was run through `sbatch --test-only --time=...` on Slurm 22.05: all accepted.
  const std::vector<std::pair<std::string, std::int64_t>> cases = {
      {"10", 600},          {"10:30", 630},           {"1:00:00", 3600},         {"1:90:00", 9000},
      {"90:00:00", 324000}, {"2-0", 172800},          {"2-3", 183600},           {"2-3:30", 185400},
      {"2-3:30:15", 185415}, {"0-03:00", 10800},      {"10:99", 699},            {"99:10", 5950},
      {"INFINITE", kTimeUnlimited}, {"UNLIMITED", kTimeUnlimited}, {"infinite", kTimeUnlimited},
      {"0", kTimeUnlimited}, {"00:00:00", kTimeUnlimited},
  };
  for (const auto& [text, seconds] : cases) {
    EXPECT_EQ(parse_time_limit("--time", text), seconds) << text;
  }
}

TEST(SbatchTime, RejectsWhatSbatchRejects) {
  // Each of these made `sbatch --test-only --time=...` fail with "Invalid --time specification".
  for (const std::string text : {"1:2:3:4", "abc", "1h", "1-2-3", " 5", "5:", ":5", "1.5", "", "-1", "2-", "1-2:3:4:5"}) {
    expect_error([&] { parse_time_limit("--time", text); }, {"--time '" + text + "'"}, "time '" + text + "'");
  }
}

TEST(SbatchSignal, ParsesSbatchsForms) {
  SignalSpec s = parse_signal_spec("--signal", "USR2@120");
  EXPECT_EQ(s.name, "USR2");
  EXPECT_EQ(s.number, SIGUSR2);
  EXPECT_EQ(s.lead_seconds, 120);
  EXPECT_FALSE(s.batch_only);
  s = parse_signal_spec("--signal", "B:USR2@120");
  EXPECT_TRUE(s.batch_only);
  s = parse_signal_spec("--signal", "R:sigusr1@5");
  EXPECT_TRUE(s.reservation);
  EXPECT_EQ(s.name, "USR1");
  EXPECT_EQ(s.lead_seconds, 5);
  EXPECT_EQ(parse_signal_spec("--signal", "12@30").name, "USR2");
  EXPECT_EQ(parse_signal_spec("--signal", "TERM").lead_seconds, 60);
  EXPECT_EQ(parse_signal_spec("--signal", "USR2@").lead_seconds, 60);
  EXPECT_EQ(parse_signal_spec("--signal", "RB:USR2@65535").lead_seconds, 65535);
}

TEST(SbatchSignal, RejectsWhatSbatchRejects) {
  for (const std::string text : {"FOO@3", "USR2@-1", "USR2@70000", "X:USR2", "0", "99", "USR2@1x"}) {
    expect_error([&] { parse_signal_spec("--signal", text); }, {"--signal '" + text + "'"}, text);
  }
}

TEST(SbatchMemory, ParsesUnits) {
  EXPECT_EQ(parse_memory_mb("--mem", "16G"), 16384);
  EXPECT_EQ(parse_memory_mb("--mem", "32000M"), 32000);
  EXPECT_EQ(parse_memory_mb("--mem", "32000"), 32000);
  EXPECT_EQ(parse_memory_mb("--mem", "1T"), 1024 * 1024);
  EXPECT_EQ(parse_memory_mb("--mem", "1536K"), 2);
  for (const std::string text : {"16GB", "G", "1.5G", "-1", "12X"}) {
    expect_error([&] { parse_memory_mb("--mem", text); }, {"--mem '" + text + "'"}, text);
  }
}

TEST(SbatchQuote, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(shell_quote("--epochs"), "--epochs");
  EXPECT_EQ(shell_quote("logs/%x-%j.out"), "logs/%x-%j.out");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote("$HOME"), "'$HOME'");
  EXPECT_EQ(shell_quote(""), "''");
}

// ---- plan: derived layout and validation ------------------------------------------------------

TEST(SbatchPlan, DerivesTasksFromGpus) {
  SbatchOptions o;
  SbatchPlan p = plan_sbatch(o);
  EXPECT_EQ(p.nodes, 1);
  EXPECT_EQ(p.tasks_per_node, 1);
  EXPECT_EQ(p.gpus_per_node, 0);
  EXPECT_EQ(p.job_name, kDefaultJobName);
  EXPECT_EQ(p.output, kDefaultOutput);
  ASSERT_TRUE(p.signal.has_value());
  EXPECT_EQ(p.signal->name, "USR2");
  EXPECT_EQ(p.signal->lead_seconds, 120);

  o.gres = "gpu:4";
  p = plan_sbatch(o);
  EXPECT_EQ(p.gpus_per_node, 4);
  EXPECT_EQ(p.tasks_per_node, 4);
  EXPECT_EQ(p.gpu_request, "--gres gpu:4");

  o.gres = "gpu:a100:2,tmpfs:10G";
  EXPECT_EQ(plan_sbatch(o).tasks_per_node, 2);

  o.gres = "";
  o.gpus_per_node = "a100:2";
  o.ntasks_per_node = "2";
  EXPECT_EQ(plan_sbatch(o).gpus_per_node, 2);

  SbatchOptions shard;
  shard.gres = "shard:16";
  p = plan_sbatch(shard);
  EXPECT_TRUE(p.shard);
  EXPECT_EQ(p.gpus_per_node, 1);
  EXPECT_EQ(p.tasks_per_node, 1);

  SbatchOptions chain;
  chain.array_chain = "3";
  EXPECT_EQ(plan_sbatch(chain).output, kDefaultArrayOutput);
  chain.signal = "none";
  EXPECT_FALSE(plan_sbatch(chain).signal.has_value());
}

TEST(SbatchPlan, InvalidRequestsAreCaughtWithClearMessages) {
  struct Case {
    std::function<void(SbatchOptions&)> set;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {[](SbatchOptions& o) { o.nodes = "0"; }, {"--nodes '0'", "positive integer"}},
      {[](SbatchOptions& o) { o.ntasks_per_node = "two"; }, {"--ntasks-per-node 'two'"}},
      {[](SbatchOptions& o) { o.cpus_per_task = "-4"; }, {"--cpus-per-task '-4'"}},
      {[](SbatchOptions& o) { o.gpus_per_node = "2"; o.ntasks_per_node = "1"; },
       {"--ntasks-per-node 1 with --gpus-per-node 2", "one task per GPU (2 tasks per node)"}},
      {[](SbatchOptions& o) { o.gres = "gpu:2"; o.ntasks_per_node = "4"; }, {"--ntasks-per-node 4 with --gres gpu:2"}},
      {[](SbatchOptions& o) { o.gres = "gpu:2"; o.gpus_per_node = "2"; }, {"--gpus-per-node 2 and --gres gpu:2", "both"}},
      {[](SbatchOptions& o) { o.gres = "gpu:2,shard:8"; }, {"--gres 'gpu:2,shard:8'", "found both"}},
      {[](SbatchOptions& o) { o.gres = "shard:16"; o.ntasks_per_node = "2"; }, {"--ntasks-per-node 2 with --gres shard:16"}},
      {[](SbatchOptions& o) { o.gres = "gpu:0"; }, {"--gres 'gpu:0'", "positive count"}},
      {[](SbatchOptions& o) { o.gres = "gpu:a:b:2"; }, {"--gres 'gpu:a:b:2'"}},
      {[](SbatchOptions& o) { o.gres = "gpu:1,gpu:2"; }, {"--gres 'gpu:1,gpu:2'", "gpu once"}},
      {[](SbatchOptions& o) { o.gpus_per_node = "x"; }, {"--gpus-per-node 'x'"}},
      {[](SbatchOptions& o) { o.time = "1h"; }, {"--time '1h'"}},
      {[](SbatchOptions& o) { o.mem = "lots"; }, {"--mem 'lots'"}},
      {[](SbatchOptions& o) { o.signal = "B:USR2@120"; }, {"--signal 'B:USR2@120'", "batch shell only"}},
      {[](SbatchOptions& o) { o.signal = "INT@60"; }, {"--signal 'INT@60'", "USR2, its default"}},
      {[](SbatchOptions& o) { o.train_args = {"--preempt-signals", "none"}; }, {"--signal 'USR2@120'", "none"}},
      {[](SbatchOptions& o) { o.time = "2"; }, {"--signal 'USR2@120' with --time 2", "120 s lead", "(2 min)"}},
      {[](SbatchOptions& o) { o.job_name = "my job"; }, {"--job-name 'my job'", "without spaces"}},
      {[](SbatchOptions& o) { o.job_name = "a/b"; }, {"--job-name 'a/b'"}},
      {[](SbatchOptions& o) { o.partition = "gpu\"x"; }, {"--partition 'gpu\"x'"}},
      {[](SbatchOptions& o) { o.setup = {"module load a\nmodule load b"}; }, {"--setup", "single line"}},
      {[](SbatchOptions& o) { o.setup = {"  "}; }, {"--setup", "empty line"}},
      {[](SbatchOptions& o) { o.stage_data = "data.zip"; }, {"--stage-data 'data.zip'", "tar archive"}},
      {[](SbatchOptions& o) { o.stage_subdir = "fm"; }, {"--stage-subdir 'fm'", "with --stage-data"}},
      {[](SbatchOptions& o) { o.stage_data = "d.tar"; o.stage_subdir = "../x"; }, {"--stage-subdir '../x'"}},
      {[](SbatchOptions& o) { o.stage_data = "d.tar"; o.train_args = {"--data=/x"}; },
       {"--stage-data 'd.tar' with train's --data /x"}},
      {[](SbatchOptions& o) { o.array_chain = "1"; }, {"--array-chain 1", "2-1000"}},
      {[](SbatchOptions& o) { o.array_chain = "1001"; }, {"--array-chain 1001"}},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SbatchOptions o;
    cases[i].set(o);
    expect_error([&] { plan_sbatch(o); }, cases[i].fragments, "case " + std::to_string(i));
  }
}

TEST(SbatchPlan, SignalFollowsTrainsPreemptSignals) {
  SbatchOptions o;
  o.signal = "INT@60";
  o.train_args = {"--preempt-signals", "USR2,INT"};
  EXPECT_EQ(plan_sbatch(o).signal->name, "INT");
  o.signal = "sigterm@300";
  o.train_args = {"--preempt-signal=TERM"};
  EXPECT_EQ(plan_sbatch(o).signal->name, "TERM");
  o.signal = "USR1@60";
  o.train_args = {"--preempt-signals", "USR1"};
  const SbatchPlan p = plan_sbatch(o);
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_TRUE(contains(p.warnings[0], "NCCL")) << p.warnings[0];
}

// ---- the generated script -----------------------------------------------------------------------

/// The #SBATCH lines of a script, and a check that all of them come before its first command
/// (sbatch stops reading #SBATCH lines there).
std::vector<std::string> sbatch_lines(const std::string& script) {
  std::vector<std::string> lines;
  bool commands_started = false;
  for (const std::string& line : test::lines_of(script)) {
    if (line.rfind("#SBATCH ", 0) == 0) {
      EXPECT_FALSE(commands_started) << "#SBATCH line after the first command: " << line;
      lines.push_back(line.substr(8));
    } else if (!line.empty() && line[0] != '#') {
      commands_started = true;
    }
  }
  return lines;
}

TEST(SbatchScript, DefaultsForAPlainCpuOrGpuJob) {
  SbatchOptions o;
  o.job_name = "ddp";
  o.nodes = "2";
  const std::string s = generate_sbatch_script(o);
  EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u);
  EXPECT_EQ(sbatch_lines(s), (std::vector<std::string>{"--job-name=ddp", "--nodes=2", "--ntasks-per-node=1",
                                                       "--output=logs/%x-%j.out", "--open-mode=append", "--requeue", "--no-kill",
                                                       "--signal=USR2@120"}));
  // The signal's comment explains B: and USR1.
  EXPECT_TRUE(contains(s, "B: signals only the batch shell")) << s;
  EXPECT_TRUE(contains(s, "# NCCL may use SIGUSR1 (submitit made the same choice)")) << s;
  // Refuses to run outside a job, then works from the submit dir.
  EXPECT_TRUE(contains(s, "if [[ -z \"${SLURM_JOB_ID:-}\" ]]; then")) << s;
  EXPECT_TRUE(contains(s, "sbatch $0 --epochs 1")) << s;
  EXPECT_TRUE(contains(s, "cd \"$SLURM_SUBMIT_DIR\"\nmkdir -p logs\n")) << s;
  EXPECT_TRUE(contains(s, "TRAIN_BIN=\"${TRAIN_BIN:-build/bin/train}\"")) << s;
  EXPECT_TRUE(contains(s, "CKPT_DIR=\"checkpoints/${SLURM_JOB_NAME:-ddp}-${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}\"")) << s;
  EXPECT_TRUE(contains(s, "TRAIN_ARGS=(--checkpoint-dir \"$CKPT_DIR\" --resume auto)")) << s;
  EXPECT_TRUE(contains(s, "TRAIN_ARGS+=(\"$@\")")) << s;
  EXPECT_TRUE(contains(s, "srun --ntasks=\"$SLURM_JOB_NUM_NODES\" --ntasks-per-node=1 \"$TRAINCTL_BIN\" preflight "
                          "--tasks-per-node \"$JOB_TASKS_PER_NODE\" \\\n    -- \"${TRAIN_ARGS[@]}\"")) << s;
  EXPECT_TRUE(contains(s, "srun --kill-on-bad-exit=1 \"$TRAIN_BIN\" \"${TRAIN_ARGS[@]}\" || rc=$?")) << s;
  // trainctl run starts the step and restarts it after a lost rank; the allocation outlives a lost node.
  EXPECT_TRUE(contains(s, "\n  \"$TRAINCTL_BIN\" run --max-restarts 3 -- \"$TRAIN_BIN\" \"${TRAIN_ARGS[@]}\" || rc=$?\n")) << s;
  EXPECT_TRUE(contains(s, "\n#SBATCH --no-kill\n")) << s;
  o.max_restarts = 0;
  EXPECT_TRUE(contains(generate_sbatch_script(o), "\"$TRAINCTL_BIN\" run --max-restarts 0 -- ")) << s;
  o.max_restarts = 3;
  EXPECT_TRUE(contains(s, "exit \"$rc\"\n")) << s;
  // The summary is the first thing the script prints.
  const std::size_t summary = s.find("echo \"ddp: job $SLURM_JOB_ID");
  ASSERT_NE(summary, std::string::npos) << s;
  EXPECT_LT(summary, s.find("srun --"));
  for (const char* absent : {"--array", "apptainer", "--expect-gpus", "STAGE_", "set +u", "scancel --state"}) {
    EXPECT_FALSE(contains(s, absent)) << absent << " in:\n" << s;
  }
}

TEST(SbatchScript, EveryResourceOptionBecomesAnSbatchLine) {
  SbatchOptions o;
  o.job_name = "big";
  o.nodes = "4";
  o.gres = "gpu:a100:4";
  o.cpus_per_task = "8";
  o.mem = "64G";
  o.time = "1-00:00:00";
  o.partition = "gpu";
  o.account = "def-someuser";
  o.qos = "high";
  o.constraint = "a100&ib";
  o.output = "out/%x-%j.log";
  o.signal = "R:TERM@300";
  o.train_args = {"--preempt-signals", "TERM"};
  const std::string s = generate_sbatch_script(o);
  EXPECT_EQ(sbatch_lines(s),
            (std::vector<std::string>{"--job-name=big", "--nodes=4", "--ntasks-per-node=4", "--cpus-per-task=8",
                                      "--gres=gpu:a100:4", "--mem=64G", "--time=1-00:00:00", "--partition=gpu",
                                      "--account=def-someuser", "--qos=high", "--constraint=a100&ib",
                                      "--output=out/%x-%j.log", "--open-mode=append", "--requeue", "--no-kill",
                                      "--signal=R:TERM@300"}));
  EXPECT_TRUE(contains(s, "mkdir -p out\n")) << s;
  EXPECT_TRUE(contains(s, "preflight --tasks-per-node \"$JOB_TASKS_PER_NODE\" --expect-gpus \"${SLURM_GPUS_ON_NODE:-4}\"")) << s;
  EXPECT_TRUE(contains(s, "trap 'say \"batch shell got SIGTERM; the train tasks handle it\"' TERM")) << s;
  EXPECT_TRUE(contains(s, "# Asks for 4 node(s) x 4 task(s), one per GPU (--gres gpu:a100:4), 8 CPUs per task, "
                          "partition gpu, time limit 1-00:00:00")) << s;

  SbatchOptions g;
  g.gpus_per_node = "2";
  EXPECT_EQ(sbatch_lines(generate_sbatch_script(g))[2], "--ntasks-per-node=2");
  EXPECT_EQ(sbatch_lines(generate_sbatch_script(g))[3], "--gpus-per-node=2");
}

TEST(SbatchScript, SharedGpuExpectsOneGpu) {
  SbatchOptions o;
  o.gres = "shard:16";
  const std::string s = generate_sbatch_script(o);
  EXPECT_TRUE(contains(s, "#SBATCH --gres=shard:16\n")) << s;
  EXPECT_TRUE(contains(s, "--expect-gpus 1 ")) << s;
}

TEST(SbatchScript, ArrayChainResumesAndCancelsWhatIsLeft) {
  SbatchOptions o;
  o.job_name = "long";
  o.array_chain = "3";
  o.time = "1-00:00:00";
  const std::string s = generate_sbatch_script(o);
  const std::vector<std::string> lines = sbatch_lines(s);
  EXPECT_NE(std::find(lines.begin(), lines.end(), "--array=1-3%1"), lines.end()) << s;
  EXPECT_NE(std::find(lines.begin(), lines.end(), "--output=logs/%x-%A_%a.out"), lines.end()) << s;
  EXPECT_TRUE(contains(s, "TRAIN_ARGS+=(--no-requeue)")) << s;
  EXPECT_TRUE(contains(s, "scancel --state=PENDING \"$SLURM_ARRAY_JOB_ID\"")) << s;
  EXPECT_TRUE(contains(s, "the next chunk resumes from it")) << s;
}

TEST(SbatchScript, SetupContainerAndStagedData) {
  SbatchOptions o;
  o.setup = {"module load cuda/12.2", "source \"$HOME/venv/bin/activate\""};
  o.container = "images/my torch.sif";
  o.stage_data = "data/fm.tar.gz";
  o.stage_subdir = "fashion-mnist";
  o.train_args = {"--epochs", "2", "--metrics", "m x.jsonl"};
  const std::string s = generate_sbatch_script(o);
  EXPECT_TRUE(contains(s, "set +u\nmodule load cuda/12.2\nsource \"$HOME/venv/bin/activate\"\nset -u\n")) << s;
  EXPECT_TRUE(contains(s, "srun --kill-on-bad-exit=1 apptainer exec --nv 'images/my torch.sif' \"$TRAIN_BIN\"")) << s;
  EXPECT_TRUE(contains(s, "apptainer exec --nv 'images/my torch.sif' \"$TRAINCTL_BIN\" preflight")) << s;
  EXPECT_TRUE(contains(s, "STAGE_ARCHIVE=data/fm.tar.gz\n")) << s;
  EXPECT_TRUE(contains(s, "STAGE_ROOT=\"$SLURM_TMPDIR\"")) << s;
  EXPECT_TRUE(contains(s, "STAGE_ROOT=\"/tmp/train-$(id -un)-$SLURM_JOB_ID\"")) << s;
  EXPECT_TRUE(contains(s, "STAGE_DIR=\"$STAGE_ROOT/data/fashion-mnist\"")) << s;
  EXPECT_TRUE(contains(s, "srun --ntasks=\"$SLURM_JOB_NUM_NODES\" --ntasks-per-node=1 tar -xf \"$STAGE_ARCHIVE\" -C "
                          "\"$STAGE_ROOT/data\"")) << s;
  EXPECT_TRUE(contains(s, "rm -rf \"$STAGE_ROOT\"")) << s;
  // The staged folder comes after the fixed arguments and before the submitter's own.
  const std::size_t fixed = s.find("TRAIN_ARGS+=(--epochs 2 --metrics 'm x.jsonl')");
  const std::size_t staged = s.find("TRAIN_ARGS+=(--data \"$STAGE_DIR\")");
  const std::size_t own = s.find("TRAIN_ARGS+=(\"$@\")");
  ASSERT_NE(fixed, std::string::npos) << s;
  ASSERT_NE(staged, std::string::npos) << s;
  EXPECT_LT(fixed, staged);
  EXPECT_LT(staged, own);
  // Staging runs after the summary and before the preflight.
  EXPECT_LT(s.find("echo \"train: job"), s.find("tar -xf"));
  EXPECT_LT(s.find("tar -xf"), s.find("preflight --tasks-per-node"));
}

TEST(SbatchScript, SignalNoneSendsNothing) {
  SbatchOptions o;
  o.signal = "none";
  const std::string s = generate_sbatch_script(o);
  EXPECT_FALSE(contains(s, "--signal")) << s;
  // No trap for a preemption signal; only the SIGTERM trap that waits for the tasks' checkpoint.
  EXPECT_FALSE(contains(s, "trap 'say \"batch shell got SIGUSR")) << s;
  EXPECT_TRUE(contains(s, "trap 'say \"batch shell got SIGTERM (scancel or the time limit)")) << s;
}

TEST(SbatchScript, HeaderRecordsTheCommand) {
  SbatchOptions o;
  o.command = {"sbatch", "--job-name", "x", "--", "--metrics", "a b"};
  o.job_name = "x";
  o.train_args = {"--metrics", "a b"};
  const std::string s = generate_sbatch_script(o);
  EXPECT_TRUE(contains(s, "\n#   trainctl sbatch --job-name x -- --metrics 'a b'\n")) << s;
}

TEST(SbatchScript, TensorBoardRootMustBeOnePlainWord) {
  SbatchOptions o;
  o.tensorboard = "my runs";
  expect_error([&] { generate_sbatch_script(o); }, {"--tensorboard 'my runs'", "expected a folder path without spaces"},
               "a space");
  o.tensorboard = "runs$HOME";
  expect_error([&] { generate_sbatch_script(o); }, {"--tensorboard 'runs$HOME'", "found '$'"}, "a $");
}

// ---- sinfo and sbatch --test-only ---------------------------------------------------------------

TEST(SbatchPartitions, ParsesSinfo) {
  const std::vector<PartitionInfo> parts = parse_sinfo_partitions(
      "debug*|up|2|2|2000|(null)|infinite\n"
      "gpu|up|4|64|512000|gpu:a100:4(S:0-1),shard:a100:256|2-00:00:00\n"
      "gpu|up|2|128+|1024000|gpu:h100:8|2-00:00:00\n"
      "old|down|1|8|16000|(null)|30:00\n"
      "garbage line\n");
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].name, "debug");
  EXPECT_TRUE(parts[0].is_default);
  EXPECT_EQ(parts[0].nodes, 2);
  EXPECT_EQ(parts[0].max_cpus_per_node, 2);
  EXPECT_EQ(parts[0].max_memory_mb, 2000);
  EXPECT_TRUE(parts[0].gres.empty());
  EXPECT_EQ(parts[0].max_time_seconds, kTimeUnlimited);
  EXPECT_EQ(parts[1].name, "gpu");
  EXPECT_FALSE(parts[1].is_default);
  EXPECT_EQ(parts[1].nodes, 6);
  EXPECT_EQ(parts[1].max_cpus_per_node, 128);
  EXPECT_EQ(parts[1].max_memory_mb, 1024000);
  EXPECT_EQ(parts[1].gres.size(), 2u);
  EXPECT_EQ(parts[1].max_time_seconds, 2 * 86400);
  EXPECT_EQ(parts[2].availability, "down");
  EXPECT_EQ(parts[2].max_time_seconds, 30 * 60);
}

TEST(SbatchPartitions, RequestsThePartitionCantRunAreErrors) {
  const std::vector<PartitionInfo> parts = parse_sinfo_partitions(
      "debug*|up|2|2|2000|(null)|infinite\n"
      "gpu|up|4|64|512000|gpu:a100:4(S:0-1),shard:a100:256|2-00:00:00\n"
      "old|down|1|8|16000|(null)|30:00\n");
  auto check = [&](const std::function<void(SbatchOptions&)>& set) {
    SbatchOptions o;
    set(o);
    return check_against_partitions(o, plan_sbatch(o), parts);
  };
  EXPECT_TRUE(check([](SbatchOptions& o) { o.nodes = "2"; }).empty());
  EXPECT_TRUE(check([](SbatchOptions& o) { o.partition = "gpu"; o.gres = "gpu:4"; o.cpus_per_task = "16"; }).empty());
  EXPECT_TRUE(check([](SbatchOptions& o) { o.partition = "gpu"; o.gres = "shard:16"; o.time = "2-0"; }).empty());
  const std::vector<std::string> down = check([](SbatchOptions& o) { o.partition = "old"; o.time = "10"; });
  ASSERT_EQ(down.size(), 1u);
  EXPECT_TRUE(contains(down[0], "partition old is down")) << down[0];

  struct Case {
    std::function<void(SbatchOptions&)> set;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {[](SbatchOptions& o) { o.nodes = "3"; }, {"--nodes 3", "2 node(s) of partition debug (the default)"}},
      {[](SbatchOptions& o) { o.ntasks_per_node = "3"; }, {"--ntasks-per-node 3 x --cpus-per-task 1", "2 CPUs"}},
      {[](SbatchOptions& o) { o.ntasks_per_node = "2"; o.cpus_per_task = "2"; }, {"found 4 CPUs per node"}},
      {[](SbatchOptions& o) { o.mem = "4G"; }, {"--mem 4G", "2000 MB", "4096 MB"}},
      {[](SbatchOptions& o) { o.gpus_per_node = "1"; }, {"--gpus-per-node 1", "(gres gpu)", "no gres at all"}},
      {[](SbatchOptions& o) { o.gres = "shard:4"; }, {"--gres shard:4", "(gres shard)"}},
      {[](SbatchOptions& o) { o.partition = "gpu"; o.gres = "gpu:8"; }, {"--gres gpu:8", "at most the 4 GPUs"}},
      {[](SbatchOptions& o) { o.partition = "gpu"; o.time = "3-0"; }, {"--time 3-0", "MaxTime of partition gpu (2880 min)"}},
      {[](SbatchOptions& o) { o.partition = "gpu"; o.time = "INFINITE"; }, {"--time INFINITE", "no limit"}},
      {[](SbatchOptions& o) { o.partition = "nope"; }, {"--partition nope", "debug (default), gpu, old"}},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    expect_error([&] { check(cases[i].set); }, cases[i].fragments, "case " + std::to_string(i));
  }
}

TEST(SbatchTestOnly, ParsesSbatchsAnswer) {
  const TestOnlyResult r = parse_test_only(
      "sbatch: Job 12 to start at 2026-11-26T02:42:19 using 4 processors on nodes node[1-2] in partition debug\n");
  EXPECT_EQ(r.job_id, "12");
  EXPECT_EQ(r.start_time, "2026-11-26T02:42:19");
  EXPECT_EQ(r.processors, "4");
  EXPECT_EQ(r.nodes, "node[1-2]");
  EXPECT_EQ(r.partition, "debug");
  expect_error([] { parse_test_only("sbatch: error: Batch job submission failed"); }, {"sbatch --test-only"}, "no start");
}

TEST(SbatchOutput, FolderToCreateBeforeSubmission) {
  EXPECT_EQ(output_folder("logs/%x-%j.out"), "logs");
  EXPECT_EQ(output_folder("a/b/%j.out"), "a/b");
  EXPECT_EQ(output_folder("%j.out"), "");
  EXPECT_EQ(output_folder("logs-%u/%j.out"), "");
  EXPECT_EQ(output_folder("/abs.out"), "");
}

// ---- trainctl sbatch as a program ------------------------------------------------------------------

/// An environment whose PATH has no SLURM commands, so no cluster is asked.
Env without_slurm(const test::TempDir& dir) {
  Env env = test::hermetic_env();
  env["PATH"] = dir.path();
  return env;
}

TEST(TrainctlSbatch, PrintsTheScriptOrWritesIt) {
  test::TempDir dir("trainctl-sbatch");
  const Env env = without_slurm(dir);
  const auto p = run_trainctl({"sbatch", "--nodes", "2", "--job-name", "ddp", "--", "--epochs", "1"}, env);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(p->err(), "");
  SbatchOptions o;
  o.nodes = "2";
  o.job_name = "ddp";
  o.train_args = {"--epochs", "1"};
  o.command = {"sbatch", "--nodes", "2", "--job-name", "ddp", "--", "--epochs", "1"};
  EXPECT_EQ(p->out(), generate_sbatch_script(o));

  const std::string out = dir.file("job.sh");
  const auto w = run_trainctl({"sbatch", "--nodes", "2", "--job-name", "ddp", "--out", out, "--", "--epochs", "1"}, env);
  ASSERT_EQ(w->exit_code(), 0) << w->err();
  EXPECT_EQ(w->out(), "");
  EXPECT_EQ(test::read_text(out), p->out()) << "--out leaves no trace in the recorded command";
  struct stat st {};
  ASSERT_EQ(stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
}

TEST(TrainctlSbatch, SetupIsRepeatableAndWarningsGoToStderr) {
  test::TempDir dir("trainctl-sbatch-setup");
  const auto p = run_trainctl({"sbatch", "--setup", "module load cuda", "--setup", "source .venv/bin/activate",
                               "--signal", "USR1@90", "--nodes", "1", "--", "--preempt-signals", "USR1"},
                              without_slurm(dir));
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_TRUE(contains(p->out(), "set +u\nmodule load cuda\nsource .venv/bin/activate\nset -u\n")) << p->out();
  EXPECT_TRUE(contains(p->err(), "trainctl sbatch: warning: --signal USR1@90: NCCL may use SIGUSR1")) << p->err();
}

TEST(TrainctlSbatch, ErrorsNameTheOptionAndExitOne) {
  test::TempDir dir("trainctl-sbatch-errors");
  const Env env = without_slurm(dir);
  auto p = run_trainctl({"sbatch", "--gpus-per-node", "4", "--ntasks-per-node", "2"}, env);
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_EQ(p->out(), "");
  EXPECT_TRUE(contains(p->err(), "trainctl sbatch: --ntasks-per-node 2 with --gpus-per-node 4: expected one task per "
                                 "GPU (4 tasks per node), found 2. Hint: ")) << p->err();
  p = run_trainctl({"sbatch", "--time", "1h"}, env);
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_TRUE(contains(p->err(), "--time '1h': expected minutes, ")) << p->err();
  p = run_trainctl({"sbatch", "--submit", "--test-only"}, env);
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_TRUE(contains(p->err(), "--submit with --test-only")) << p->err();
  // Without sbatch on PATH, --submit and --test-only say so (and the cluster checks are skipped).
  p = run_trainctl({"sbatch", "--gpus-per-node", "1", "--submit"}, env);
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_TRUE(contains(p->err(), "sbatch: expected SLURM's sbatch on PATH, found none. Hint: ")) << p->err();
  p = run_trainctl({"sbatch", "--test-only"}, env);
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_TRUE(contains(p->err(), "sbatch: expected SLURM's sbatch on PATH")) << p->err();
  // Command-line errors are usage errors.
  p = run_trainctl({"sbatch", "--node", "2"}, env);
  EXPECT_EQ(p->exit_code(), 2);
  EXPECT_TRUE(contains(p->err(), "--node")) << p->err();
  p = run_trainctl({"sbatch", "--help"}, env);
  EXPECT_EQ(p->exit_code(), 0);
  EXPECT_TRUE(contains(p->out(), "Usage: trainctl sbatch")) << p->out();
  EXPECT_TRUE(contains(p->out(), "--array-chain")) << p->out();
}

// ---- one flag list for #SBATCH and salloc ----------------------------------------------------

TEST(SbatchJobShapeFlags, ListsTheShapeInDirectiveOrder) {
  SbatchOptions o;
  o.job_name = "shape";
  o.gres = "gpu:4";
  o.time = "1:00:00";
  o.partition = "gpu";
  const SbatchPlan plan = plan_sbatch(o);
  const std::vector<std::string> flags = job_shape_flags(o, plan);
  const std::vector<std::string> expected = {"--job-name=shape", "--nodes=1", "--ntasks-per-node=4", "--gres=gpu:4",
                                             "--time=1:00:00", "--partition=gpu"};
  EXPECT_EQ(flags, expected);
  const std::string script = render_sbatch_script(o, plan);
  for (const std::string& flag : flags) EXPECT_TRUE(contains(script, "#SBATCH " + flag + "\n")) << flag;
}

}  // namespace
}  // namespace train

namespace train {
namespace {

// train takes `_` for `-` in a flag's name: the launcher reads either spelling.
TEST(TrainFlagValue, ReadsTheUnderscoreSpellingOfAFlag) {
  bool found = false;
  EXPECT_EQ(train_flag_value({"--checkpoint_dir", "ck_a", "--epochs", "1"}, {"--checkpoint-dir"}, &found), "ck_a");
  EXPECT_TRUE(found);
  EXPECT_EQ(train_flag_value({"--preempt_signals=USR1", "--preempt-signal", "USR2"}, {"--preempt-signals", "--preempt-signal"}),
            "USR2");  // the last copy wins, whatever its spelling
  EXPECT_EQ(train_flag_value({"--data", "my_data"}, {"--data"}), "my_data");  // values keep their underscores
  EXPECT_EQ(train_flag_value({"--data_dir", "x"}, {"--data"}, &found), "");
  EXPECT_FALSE(found);
}

}  // namespace
}  // namespace train
