// Tests for the job-shape options trainctl sbatch gained for the work around a job (--ntasks,
// --error, --per-rank-logs, --program, --no-preflight) and for `trainctl interactive`, which prints
// the salloc command of the same shape with the same setup lines. No cluster:
// tests/slurm/workflow_test.cpp submits these on the real one.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "test_process.h"
#include "test_util.h"
#include "train/base/error.h"
#include "train/launcher/sbatch.h"

namespace train {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
std::string trainctl() { return std::string(TRAIN_BINARY_DIR) + "/bin/trainctl"; }

/// The test's environment; commands that would ask sinfo get --no-cluster-checks, since SLURM's
/// client may be installed (and a cluster up) on this machine.
test::Env no_slurm_env() { return test::hermetic_env(); }

void expect_config_error(const std::function<void()>& fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "expected an error with '" << fragment << "'";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), fragment)) << e.what();
    EXPECT_FALSE(e.hint().empty()) << e.what();
  }
}

TEST(PerRankLogs, PatternPutsTheRankBeforeTheExtension) {
  EXPECT_EQ(per_rank_pattern("logs/out%j.log"), "logs/out%j-%t.log");
  EXPECT_EQ(per_rank_pattern("logs/%x-%j.out"), "logs/%x-%j-%t.out");
  EXPECT_EQ(per_rank_pattern("/runs/s/task-%a/train.out"), "/runs/s/task-%a/train-%t.out");
  EXPECT_EQ(per_rank_pattern("my.logs/out"), "my.logs/out-%t");
  EXPECT_EQ(per_rank_pattern("out"), "out-%t");
}

TEST(PerRankLogs, SrunWritesOneFilePerRankAndTheJobKeepsItsLogs) {
  SbatchOptions o;
  o.output = "logs/out%j.log";
  o.error = "logs/err%j.log";
  o.per_rank_logs = true;
  o.ntasks = "4";
  o.nodes = "2";
  const SbatchPlan plan = plan_sbatch(o);
  EXPECT_EQ(plan.rank_output, "logs/out%j-%t.log");
  EXPECT_EQ(plan.rank_error, "logs/err%j-%t.log");
  EXPECT_EQ(plan.tasks_per_node, 2);
  const std::string script = render_sbatch_script(o, plan);
  EXPECT_TRUE(contains(script, "\n#SBATCH --ntasks=4\n")) << script;
  EXPECT_FALSE(contains(script, "#SBATCH --ntasks-per-node")) << script;
  EXPECT_TRUE(contains(script, "\n#SBATCH --output=logs/out%j.log\n#SBATCH --error=logs/err%j.log\n")) << script;
  EXPECT_TRUE(contains(script, "srun --kill-on-bad-exit=1 --output=logs/out%j-%t.log --error=logs/err%j-%t.log "
                               "--open-mode=append \"$TRAIN_BIN\" \"${TRAIN_ARGS[@]}\" || rc=$?"))
      << script;
  EXPECT_TRUE(contains(script, "\"$TRAINCTL_BIN\" run --max-restarts 3 --srun-arg=--output=logs/out%j-%t.log "
                               "--srun-arg=--error=logs/err%j-%t.log --srun-arg=--open-mode=append -- \"$TRAIN_BIN\""))
      << script;
  // Without --per-rank-logs nothing changes for srun.
  o.per_rank_logs = false;
  EXPECT_TRUE(contains(generate_sbatch_script(o), "srun --kill-on-bad-exit=1 \"$TRAIN_BIN\""));
}

TEST(JobShape, NtasksIsCheckedAgainstNodesAndGpus) {
  SbatchOptions o;
  o.nodes = "3";
  o.ntasks = "2";
  expect_config_error([&] { plan_sbatch(o); }, "--ntasks 2 with --nodes 3: expected at least one task per node");
  o.ntasks = "x";
  expect_config_error([&] { plan_sbatch(o); }, "--ntasks 'x': expected a positive integer");
  o.nodes = "2";
  o.ntasks = "5";
  o.ntasks_per_node = "2";
  expect_config_error([&] { plan_sbatch(o); }, "--ntasks 5: expected at most --nodes x --ntasks-per-node = 4 tasks");
  o.ntasks_per_node = "";
  o.gres = "gpu:2";
  o.ntasks = "3";
  expect_config_error([&] { plan_sbatch(o); }, "--ntasks 3 with --gres gpu:2 on 2 node(s): expected one task per GPU (4 tasks)");
  o.ntasks = "4";
  EXPECT_EQ(plan_sbatch(o).tasks_per_node, 2);
  o.error = "bad name";
  expect_config_error([&] { plan_sbatch(o); }, "--error 'bad name': expected one word");
}

TEST(JobShape, ProgramAndNoPreflight) {
  SbatchOptions o;
  o.program = "/opt/my prog/run.sh";
  o.preflight = false;
  const std::string script = generate_sbatch_script(o);
  EXPECT_TRUE(contains(script, "\nTRAIN_BIN='/opt/my prog/run.sh'\n")) << script;
  EXPECT_FALSE(contains(script, "preflight --tasks-per-node")) << script;
  o.program.clear();
  o.preflight = true;
  const std::string plain = generate_sbatch_script(o);
  EXPECT_TRUE(contains(plain, "TRAIN_BIN=\"${TRAIN_BIN:-build/bin/train}\"")) << plain;
  EXPECT_TRUE(contains(plain, "preflight --tasks-per-node")) << plain;
}

TEST(TrainctlSbatch, TakesTheNewOptions) {
  const auto p = test::run_process({trainctl(), "sbatch", "--no-cluster-checks", "--ntasks", "2", "--error",
                                    "logs/err%j.log", "--output", "logs/out%j.log", "--per-rank-logs", "--program",
                                    "/bin/hostname", "--no-preflight"},
                                   no_slurm_env(), 30);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_TRUE(contains(p->out(), "#SBATCH --ntasks=2\n")) << p->out();
  EXPECT_TRUE(contains(p->out(), "--output=logs/out%j-%t.log --error=logs/err%j-%t.log")) << p->out();
  EXPECT_TRUE(contains(p->out(), "TRAIN_BIN=/bin/hostname\n")) << p->out();
}

TEST(TrainctlInteractive, PrintsSallocOfTheSameShapeWithTheSetupLines) {
  const auto p = test::run_process({trainctl(), "interactive", "--no-cluster-checks", "--nodes", "2", "--ntasks-per-node",
                                    "1", "--cpus-per-task", "2", "--time", "30", "--partition", "debug", "--setup",
                                    "module load cuda", "--setup", "source .venv/bin/activate"},
                                   no_slurm_env(), 30);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(p->out(),
            "salloc --job-name=interactive --nodes=2 --ntasks-per-node=1 --cpus-per-task=2 --time=30 "
            "--partition=debug bash -c 'set +u; module load cuda; source .venv/bin/activate; if [[ -n "
            "\"${SLURM_CPUS_PER_TASK:-}\" ]]; then export SRUN_CPUS_PER_TASK=\"$SLURM_CPUS_PER_TASK\"; fi; echo "
            "\"interactive: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST; srun runs on it, exit ends it\" >&2; exec "
            "bash -i'\n");
  // The printed line is one valid shell command.
  const auto syntax = test::run_process({"/bin/bash", "-n", "-c", p->out()}, no_slurm_env(), 10);
  EXPECT_EQ(syntax->exit_code(), 0) << syntax->err();

  const auto pty = test::run_process({trainctl(), "interactive", "--no-cluster-checks", "--gres", "gpu:2", "--pty"},
                                     no_slurm_env(), 30);
  ASSERT_EQ(pty->exit_code(), 0) << pty->err();
  EXPECT_EQ(pty->out().rfind("salloc --job-name=interactive --nodes=1 --ntasks-per-node=2 --gres=gpu:2 srun --pty "
                             "--overlap --nodes=1 --ntasks=1 bash -c ", 0),
            0u)
      << pty->out();
  // The shape is checked as for sbatch.
  const auto bad = test::run_process({trainctl(), "interactive", "--no-cluster-checks", "--time", "1h"}, no_slurm_env(), 30);
  EXPECT_EQ(bad->exit_code(), 1);
  EXPECT_TRUE(contains(bad->err(), "trainctl interactive: --time '1h': expected minutes")) << bad->err();
}

}  // namespace
}  // namespace train
