// Tests for launcher/src/sbatch.cpp, sbatch_cluster.cpp and preflight.cpp, and for `trainctl sbatch`
// and `trainctl preflight` as programs: option parsing and validation, the generated scripts (also
// run under a fake srun, without SLURM), the committed wrappers against the generator, sinfo and
// sbatch --test-only parsing, and the preflight checks on fake data and GPU folders. No cluster
// needed: tests/slurm runs the same scripts on the real local one.
#include "train/launcher/sbatch.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cifar_files.h"
#include "test_process.h"
#include "test_util.h"
#include "train/error.h"
#include "train/launcher/jobs.h"
#include "train/launcher/preflight.h"

namespace train {
namespace {

using test::Env;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string trainctl() { return std::string(TRAIN_BINARY_DIR) + "/bin/trainctl"; }
std::string source_path(const std::string& rel) { return std::string(TRAIN_SOURCE_DIR) + "/" + rel; }

void write_text(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  chmod(path.c_str(), mode);
}

/// Expects `fn` to throw a ConfigError (or DataError) whose message holds every fragment, names what
/// was expected and found, and ends with a hint.
template <typename ErrorType = ConfigError>
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& fragments,
                  const std::string& context) {
  try {
    fn();
    ADD_FAILURE() << context << ": expected an error with '" << fragments.front() << "'";
  } catch (const ErrorType& e) {
    const std::string what = e.what();
    for (const std::string& f : fragments) EXPECT_TRUE(contains(what, f)) << context << ": '" << f << "' not in: " << what;
    EXPECT_TRUE(contains(what, "expected")) << context << ": " << what;
    EXPECT_TRUE(contains(what, "found")) << context << ": " << what;
    EXPECT_FALSE(e.hint().empty()) << context << ": " << what;
  }
}

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
                                                       "--output=logs/%x-%j.out", "--open-mode=append", "--requeue",
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
                                      "--output=out/%x-%j.log", "--open-mode=append", "--requeue",
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

// ---- running a generated script under a fake srun ------------------------------------------------

/// A submit dir with fake srun, train and trainctl: srun drops its own options and runs the
/// command; train and trainctl print their arguments and exit with $FAKE_TRAIN_RC / $FAKE_PREFLIGHT_RC.
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
    write_text(bin + "/trainctl",
               "#!/bin/bash\n"
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
  EXPECT_TRUE(contains(log, "srun --kill-on-bad-exit=1 " + slurm.dir().file("bin/train") + " --checkpoint-dir")) << log;
  struct stat st {};
  EXPECT_EQ(stat(slurm.dir().file("logs").c_str(), &st), 0) << "the script makes logs/ in the submit dir";
}

// --tensorboard ROOT: a folder per job under ROOT reaches train (before the submitter's own
// arguments, so theirs wins) and the log, where trainctl status finds it; a sweep's task gets its own.
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
  EXPECT_EQ(tensorboard_dir_from_log(p->out(), slurm.dir().path()), slurm.dir().file("runs/ddp-123"));
  // An array chain's chunks go on in one folder, as they do with one checkpoint folder.
  const auto chunk = slurm.run(script, {}, {{"SLURM_ARRAY_JOB_ID", "120"}, {"SLURM_ARRAY_TASK_ID", "2"}});
  ASSERT_EQ(chunk->exit_code(), 0) << chunk->err();
  EXPECT_TRUE(contains(chunk->out(), "[--tensorboard] [runs/ddp-120]")) << chunk->out();

  o.array_tasks = ArrayTasks{{{"--lr", "0.1"}, {"--lr", "0.2"}}, 0, slurm.dir().file("sweep")};
  const std::string s = generate_sbatch_script(o);
  EXPECT_TRUE(contains(s, "TB_DIR=runs\"/${SLURM_JOB_NAME:-ddp}-$SLURM_ARRAY_JOB_ID/task-$SLURM_ARRAY_TASK_ID\"\n")) << s;
  EXPECT_TRUE(contains(s, "TRAIN_ARGS+=(--tensorboard \"$TB_DIR\")\n")) << s;
}

TEST(SbatchScript, TensorBoardRootMustBeOnePlainWord) {
  SbatchOptions o;
  o.tensorboard = "my runs";
  expect_error([&] { generate_sbatch_script(o); }, {"--tensorboard 'my runs'", "expected a folder path without spaces"},
               "a space");
  o.tensorboard = "runs$HOME";
  expect_error([&] { generate_sbatch_script(o); }, {"--tensorboard 'runs$HOME'", "found '$'"}, "a $");
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
  EXPECT_TRUE(contains(p->err(), "ddp: training failed: srun exit code 3. Hint: ")) << p->err();

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

// ---- preflight ------------------------------------------------------------------------------------

/// A folder with the four IDX files (raw or .gz) as train reads them: 2 images of 2x2 and their labels.
void make_idx(const std::string& dir, bool gz) {
  mkdir(dir.c_str(), 0755);
  const std::string images("\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02" "abcdefgh", 24);
  const std::string labels("\x00\x00\x08\x01\x00\x00\x00\x02\x03\x07", 10);
  for (const char* split : {"train", "t10k"}) {
    for (const auto& [name, bytes] : {std::pair{std::string(split) + "-images-idx3-ubyte", images},
                                      std::pair{std::string(split) + "-labels-idx1-ubyte", labels}}) {
      if (!gz) {
        write_text(dir + "/" + name, bytes);
        continue;
      }
      gzFile f = gzopen((dir + "/" + name + ".gz").c_str(), "wb");
      gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    }
  }
}

void make_cifar(const std::string& dir, std::size_t records) {
  mkdir(dir.c_str(), 0755);
  const std::string batch(records * 3073, '\x01');
  for (int i = 1; i <= 5; ++i) write_text(dir + "/data_batch_" + std::to_string(i) + ".bin", batch);
  write_text(dir + "/test_batch.bin", batch);
}

/// A fake /proc/driver/nvidia/gpus with n entries.
std::string make_proc_gpus(const test::TempDir& tmp, int n) {
  const std::string dir = tmp.file("gpus" + std::to_string(n));
  mkdir(dir.c_str(), 0755);
  for (int i = 0; i < n; ++i) mkdir((dir + "/0000:0" + std::to_string(i) + ":00.0").c_str(), 0755);
  return dir;
}

TEST(SbatchPreflight, DatasetFolders) {
  test::TempDir tmp("preflight-data");
  make_idx(tmp.file("raw"), false);
  make_idx(tmp.file("gz"), true);
  make_cifar(tmp.file("cifar"), 2);
  EXPECT_EQ(check_dataset_folder(tmp.file("raw"), "fashion-mnist"), "4 IDX files (fashion-mnist)");
  EXPECT_EQ(check_dataset_folder(tmp.file("gz"), "mnist"), "4 IDX files (mnist)");
  EXPECT_EQ(check_dataset_folder(tmp.file("cifar"), "cifar10"), "6 CIFAR-10 binary files (cifar10)");
  EXPECT_EQ(check_dataset_folder(tmp.file("cifar"), ""), "6 CIFAR-10 binary files (cifar10)");

  expect_error<DataError>([&] { check_dataset_folder(tmp.file("none"), "fashion-mnist"); },
                          {"--data '" + tmp.file("none") + "'", "nothing at that path", "--stage-data"}, "missing");
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("raw/t10k-images-idx3-ubyte"), "mnist"); },
                          {"expected a folder, found a file"}, "file");
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("cifar"), "fashion-mnist"); },
                          {"train-images-idx3-ubyte", "(each raw or .gz) -- none there", "FashionMNIST/raw"},
                          "wrong dataset");
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("raw"), "cifar10"); },
                          {"data_batch_1.bin", "cifar-10-batches-py", "cifar-10-binary.tar.gz"}, "idx as cifar");
  write_text(tmp.file("raw/t10k-labels-idx1-ubyte"), std::string("\x00\x00\x08\x03\x00", 5));
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("raw"), "fashion-mnist"); },
                          {"t10k-labels-idx1-ubyte: expected the IDX magic 2049"}, "bad magic");
  write_text(tmp.file("gz/train-labels-idx1-ubyte.gz"), "PK\x03\x04");
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("gz"), "fashion-mnist"); },
                          {"train-labels-idx1-ubyte.gz: expected a gzip file"}, "bad gzip");
  write_text(tmp.file("cifar/test_batch.bin"), std::string(3000, '\x01'));
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("cifar"), "cifar10"); },
                          {"test_batch.bin: expected whole records of 3073 bytes", "found 3000 bytes"}, "truncated");
  make_idx(tmp.file("empty"), false);
  for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                        "t10k-labels-idx1-ubyte"}) {
    unlink(tmp.file(std::string("empty/") + f).c_str());
  }
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("empty"), ""); },
                          {"one of mnist, fashion-mnist, cifar10, found none"}, "empty");
}

// torchvision's roots: preflight finds the dataset's subfolder as train does.
TEST(SbatchPreflight, TorchvisionRoots) {
  test::TempDir tmp("preflight-tv");
  mkdir(tmp.file("data").c_str(), 0755);
  mkdir(tmp.file("data/FashionMNIST").c_str(), 0755);
  make_idx(tmp.file("data/FashionMNIST/raw"), true);
  mkdir(tmp.file("data/cifar-10-batches-py").c_str(), 0755);
  test::write_cifar_layout(tmp.file("data/cifar-10-batches-py"), /*binary=*/false, 2, 2);
  EXPECT_EQ(check_dataset_folder(tmp.file("data"), "fashion-mnist"), "4 IDX files (fashion-mnist, in FashionMNIST/raw/)");
  EXPECT_EQ(check_dataset_folder(tmp.file("data"), "cifar10"),
            "6 CIFAR-10 Python pickle files (cifar10, in cifar-10-batches-py/)");
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("data"), "mnist"); },
                          {tmp.file("data/MNIST/raw"), "download=True", "pass --dataset fashion-mnist"}, "mnist missing");
  write_text(tmp.file("data/cifar-10-batches-py/test_batch"), "PK\x03\x04");
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("data"), "cifar10"); },
                          {tmp.file("data/cifar-10-batches-py/test_batch"), "expected a Python pickle"}, "not a pickle");
}

// Preflight checks each file's whole structure, as train would read it, without training: a
// truncated or mis-shaped pickle, a corrupt label, an IDX file of the wrong size or a cut gzip
// stream fail with the file named; a batch of fewer than 10000 records is a warning.
TEST(SbatchPreflight, ChecksEachFilesWholeStructure) {
  test::TempDir tmp("preflight-whole");
  const std::string py = tmp.file("data/cifar-10-batches-py");
  test::write_cifar_layout(py, /*binary=*/false, 3, 2);
  std::vector<std::string> warnings;
  EXPECT_EQ(check_dataset_folder(tmp.file("data"), "cifar10", &warnings),
            "6 CIFAR-10 Python pickle files (cifar10, in cifar-10-batches-py/)");
  ASSERT_EQ(warnings.size(), 6u);
  EXPECT_TRUE(contains(warnings[0], py + "/data_batch_1: holds 3 records, where each official CIFAR-10 batch holds 10000"))
      << warnings[0];
  PreflightOptions o;
  o.proc_gpus_dir = tmp.file("no-driver");
  o.train_args = {"--model", "cifar10", "--data", tmp.file("data")};
  PreflightReport r = run_preflight(o, {});
  EXPECT_TRUE(r.ok()) << r.errors.front();
  EXPECT_TRUE(contains(r.passed.front(), "checked whole in " + tmp.file("data"))) << r.passed.front();
  const auto short_batch = [](const std::string& w) { return contains(w, "where each official CIFAR-10 batch holds 10000"); };
  EXPECT_EQ(std::count_if(r.warnings.begin(), r.warnings.end(), short_batch), 6);

  // A pickle cut short (it starts right, so a look at its head passed it).
  auto bytes = test::cifar_pickle_bytes(test::learnable_cifar(3, 5));
  test::write_file(py + "/data_batch_5", std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 2));
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("data"), "cifar10"); },
                          {py + "/data_batch_5: expected", "truncated?"}, "truncated pickle");
  r = run_preflight(o, {});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], py + "/data_batch_5")) << r.errors[0];
  // A pickle of another shape: 3 rows of 3000 bytes.
  test::PickleShape wide;
  wide.columns = 3000;
  auto samples = test::learnable_cifar(3, 5);
  samples.pixels.resize(3 * 3000);
  test::write_file(py + "/data_batch_5", test::cifar_pickle_bytes(samples, wide));
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("data"), "cifar10"); },
                          {py + "/data_batch_5: expected 'data' of shape N x 3072", "found shape 3 x 3000"}, "shape");
  // The binary version: a label byte outside 0..9 in the last record of the last file.
  test::write_cifar_layout(tmp.file("bin"), /*binary=*/true, 2, 2);
  auto records = test::cifar_binary_bytes(test::learnable_cifar(2, 4));
  records[3073] = 12;
  test::write_file(tmp.file("bin/data_batch_5.bin"), records);
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("bin"), "cifar10"); },
                          {tmp.file("bin/data_batch_5.bin") + ": expected labels in 0..9, found 12 in record 1"}, "label");
  // IDX: the images file one byte short, a gzip stream cut short, a label of 10.
  make_idx(tmp.file("raw"), false);
  write_text(tmp.file("raw/t10k-images-idx3-ubyte"),
             std::string("\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02" "abcdefg", 23));
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("raw"), "mnist"); },
                          {"t10k-images-idx3-ubyte: expected 24 bytes for 2 images of 2x2", "found 23 (truncated?)"}, "idx size");
  make_idx(tmp.file("raw"), false);
  write_text(tmp.file("raw/train-labels-idx1-ubyte"), std::string("\x00\x00\x08\x01\x00\x00\x00\x02\x03\x0a", 10));
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("raw"), "mnist"); },
                          {"train-labels-idx1-ubyte: expected labels in 0..9, found 10 at index 1"}, "idx label");
  make_idx(tmp.file("gz"), true);
  const std::string whole = test::read_text(tmp.file("gz/train-images-idx3-ubyte.gz"));
  write_text(tmp.file("gz/train-images-idx3-ubyte.gz"), whole.substr(0, whole.size() - 6));
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("gz"), "mnist"); },
                          {"train-images-idx3-ubyte.gz: expected a whole gzip stream"}, "cut gzip");
}

TEST(SbatchPreflight, FindsTheDataTrainWillRead) {
  test::TempDir tmp("preflight-args");
  make_idx(tmp.file("fm"), true);
  make_cifar(tmp.file("cifar"), 1);
  PreflightOptions o;
  o.proc_gpus_dir = tmp.file("no-driver");
  o.train_args = {"--data", tmp.file("cifar"), "--epochs", "1", "--data=" + tmp.file("fm")};  // the last wins
  PreflightReport r = run_preflight(o, {});
  EXPECT_TRUE(r.ok()) << r.errors.front();
  EXPECT_EQ(r.passed.front(), "data: 4 IDX files (fashion-mnist) checked whole in " + tmp.file("fm"));

  o.train_args = {"--model", "cifar10", "--data", tmp.file("cifar")};
  r = run_preflight(o, {});
  EXPECT_TRUE(r.ok()) << r.errors.front();
  EXPECT_TRUE(contains(r.passed.front(), "CIFAR-10")) << r.passed.front();

  o.train_args = {"--model", "cifar10"};
  r = run_preflight(o, {});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "--data: expected the folder holding the cifar10 files, found none given.")) << r.errors[0];

  // Without --data, Fashion-MNIST comes from TRAIN_FASHION_MNIST_DIR (as in train), else Debian's folder.
  o.train_args = {};
  r = run_preflight(o, {{"TRAIN_FASHION_MNIST_DIR", tmp.file("fm")}});
  EXPECT_TRUE(r.ok()) << r.errors.front();
  o.data_dir = tmp.file("fm");  // --data of preflight itself wins
  o.train_args = {"--data", tmp.file("cifar")};
  r = run_preflight(o, {});
  EXPECT_TRUE(r.ok()) << r.errors.front();
  EXPECT_TRUE(contains(r.passed.front(), "IDX")) << r.passed.front();
}

TEST(SbatchPreflight, GpusMustBeVisibleWhereTheJobAskedForThem) {
  test::TempDir tmp("preflight-gpus");
  make_idx(tmp.file("fm"), true);
  PreflightOptions o;
  o.train_args = {"--data", tmp.file("fm")};
  o.tasks_per_node = "2(x2)";
  o.expect_gpus = 2;

  // Seed 000: GPUs allocated, but no driver on the node.
  o.proc_gpus_dir = tmp.file("no-driver");
  PreflightReport r = run_preflight(o, {{"SLURM_NODEID", "1"}});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "CUDA GPUs on " + r.host + ": expected the 2 GPU(s) per node the job asked for, "
                                    "found none visible (CUDA_VISIBLE_DEVICES unset, no NVIDIA driver")) << r.errors[0];
  EXPECT_TRUE(contains(r.errors[0], "Hint: this node can't run CUDA: ")) << r.errors[0];
  r = run_preflight(o, {{"CUDA_VISIBLE_DEVICES", "0,1"}});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "NVIDIA driver on " + r.host)) << r.errors[0];
  r = run_preflight(o, {{"CUDA_VISIBLE_DEVICES", "NoDevFiles"}});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "found none visible (CUDA_VISIBLE_DEVICES='NoDevFiles'")) << r.errors[0];

  // Two GPUs, two tasks: fine.
  o.proc_gpus_dir = make_proc_gpus(tmp, 2);
  r = run_preflight(o, {});
  EXPECT_TRUE(r.ok()) << r.errors.front();
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(r.passed.size(), 3u);
  // One visible of two asked for.
  r = run_preflight(o, {{"CUDA_VISIBLE_DEVICES", "1"}});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "found 1 visible")) << r.errors[0];
  // More tasks than GPUs.
  o.tasks_per_node = "4,2";
  r = run_preflight(o, {{"SLURM_NODEID", "0"}});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "tasks on " + r.host + ": expected one task per GPU (2 visible), found 4 tasks "
                                    "(--tasks-per-node=4,2)")) << r.errors[0];
  r = run_preflight(o, {{"SLURM_NODEID", "1"}});  // node 1 runs 2
  EXPECT_TRUE(r.ok()) << r.errors.front();
  r = run_preflight(o, {{"SLURM_NODEID", "0"}, {"SLURM_GPUS_PER_TASK", "1"}});  // SLURM binds a GPU per task
  EXPECT_TRUE(r.ok()) << r.errors.front();
  // Fewer tasks than GPUs: a warning.
  o.tasks_per_node = "1";
  r = run_preflight(o, {});
  EXPECT_TRUE(r.ok());
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_TRUE(contains(r.warnings[0], "1 stay idle")) << r.warnings[0];
  // The job's SLURM_GPUS_ON_NODE when --expect-gpus is not given.
  o.expect_gpus = -1;
  o.proc_gpus_dir = tmp.file("no-driver");
  r = run_preflight(o, {{"SLURM_GPUS_ON_NODE", "4"}});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "expected the 4 GPU(s)")) << r.errors[0];
  // Training on the CPU on purpose: GPUs asked for stay idle, with a warning.
  o.train_args.push_back("--device=cpu");
  r = run_preflight(o, {{"SLURM_GPUS_ON_NODE", "4"}});
  EXPECT_TRUE(r.ok()) << r.errors.front();
  ASSERT_EQ(r.warnings.size(), 1u);
}

TEST(SbatchPreflight, GpusNobodyAskedForAreNoticed) {
  test::TempDir tmp("preflight-cpu");
  make_idx(tmp.file("fm"), true);
  PreflightOptions o;
  o.train_args = {"--data", tmp.file("fm")};
  o.proc_gpus_dir = tmp.file("no-driver");
  PreflightReport r = run_preflight(o, {{"SLURM_TASKS_PER_NODE", "2(x2)"}, {"SLURM_NODEID", "1"}});
  EXPECT_TRUE(r.ok()) << r.errors.front();
  EXPECT_EQ(r.passed.back(), "GPUs: none asked for, none visible: train uses Gloo on the CPU");
  EXPECT_EQ(r.passed[1], "tasks: 2 on this node (SLURM_TASKS_PER_NODE=2(x2))");

  o.proc_gpus_dir = make_proc_gpus(tmp, 1);
  o.tasks_per_node = "2";
  r = run_preflight(o, {});
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_TRUE(contains(r.warnings[0], "though the job asked for none")) << r.warnings[0];
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "expected at most one per visible GPU (1)")) << r.errors[0];

  o.tasks_per_node = "2(x2)";
  r = run_preflight(o, {{"SLURM_NODEID", "2"}});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.errors[0], "--tasks-per-node='2(x2)': expected an entry for node 2")) << r.errors[0];
}

// ---- trainctl sbatch / preflight as programs ------------------------------------------------------

std::unique_ptr<test::TestProcess> run_trainctl(const std::vector<std::string>& args, Env env = test::hermetic_env()) {
  std::vector<std::string> argv = {trainctl()};
  argv.insert(argv.end(), args.begin(), args.end());
  auto p = test::run_process(argv, env, 60);
  EXPECT_TRUE(p->finished()) << "trainctl did not finish; stderr: " << p->err();
  return p;
}

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

TEST(TrainctlPreflight, OneLinePerNodeAndExitOneOnFailure) {
  test::TempDir tmp("trainctl-preflight");
  make_idx(tmp.file("fm"), true);
  Env env = test::hermetic_env();
  auto p = run_trainctl({"preflight", "--tasks-per-node", "1(x2)", "--", "--data", tmp.file("fm"), "--device", "cpu"},
                        env);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(test::lines_of(p->out()).size(), 1u) << p->out();
  EXPECT_TRUE(contains(p->out(), ": ok (data: 4 IDX files (fashion-mnist) checked whole in " + tmp.file("fm") +
                                     "; tasks: 1 on this node (--tasks-per-node=1(x2)); device: CPU")) << p->out();

  p = run_trainctl({"preflight", "--data", tmp.file("nope"), "--expect-gpus", "2", "--", "--epochs", "1"},
                   [&] { Env e = env; e["CUDA_VISIBLE_DEVICES"] = ""; return e; }());
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_EQ(p->out(), "");
  EXPECT_TRUE(contains(p->err(), ": FAILED: --data '" + tmp.file("nope") + "': expected a folder")) << p->err();
  EXPECT_TRUE(contains(p->err(), ": FAILED: CUDA GPUs on ")) << p->err();

  p = run_trainctl({"preflight", "--expect-gpus", "-1"}, env);
  EXPECT_EQ(p->exit_code(), 2) << p->err();
  p = run_trainctl({"preflight", "--help"}, env);
  EXPECT_EQ(p->exit_code(), 0);
  EXPECT_TRUE(contains(p->out(), "Usage: trainctl preflight")) << p->out();
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
