// Tests for what trainctl's job subcommands work out before they act (train/launcher/job_requests.h):
// the salloc line of `interactive`, the command a script records, a submitted job's log, and the
// checks, folders and index of a sweep.
#include "train/launcher/job_requests.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "train/base/error.h"
#include "train/base/files.h"

namespace train {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// The message and hint of the ConfigError `f` throws; "" when it throws none.
template <typename F>
std::string config_error(F f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return std::string(e.what()) + " | " + e.hint();
  }
  return "";
}

TEST(SallocCommand, HasTheJobsShapeFlagsThenTheSetupShell) {
  SbatchOptions o;
  o.nodes = "2";
  o.ntasks_per_node = "1";
  o.cpus_per_task = "2";
  o.time = "30";
  o.partition = "debug";
  o.setup = {"module load cuda", "source .venv/bin/activate"};
  prepare_interactive(o);
  EXPECT_EQ(o.job_name, "interactive");
  EXPECT_EQ(o.signal, "none");
  const SbatchPlan plan = plan_sbatch(o);
  const std::vector<std::string> argv = salloc_command(o, plan, /*pty=*/false);
  std::vector<std::string> expected = {"salloc"};
  for (const std::string& f : job_shape_flags(o, plan)) expected.push_back(f);  // the flags sbatch's lines use
  expected.insert(expected.end(), {"bash", "-c",
      "set +u; module load cuda; source .venv/bin/activate; if [[ -n \"${SLURM_CPUS_PER_TASK:-}\" ]]; then export "
      "SRUN_CPUS_PER_TASK=\"$SLURM_CPUS_PER_TASK\"; fi; echo \"interactive: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST; "
      "srun runs on it, exit ends it\" >&2; exec bash -i"});
  EXPECT_EQ(argv, expected);
  EXPECT_EQ(command_line(argv).rfind("salloc --job-name=interactive --nodes=2 --ntasks-per-node=1 --cpus-per-task=2 "
                                     "--time=30 --partition=debug bash -c 'set +u; module load cuda; ", 0),
            0u)
      << command_line(argv);
}

TEST(SallocCommand, PtyOpensTheShellOnTheFirstNodeAndANameIsKept) {
  SbatchOptions o;
  o.gres = "gpu:2";
  o.job_name = "debugging";
  prepare_interactive(o);
  EXPECT_EQ(o.job_name, "debugging");
  const std::vector<std::string> argv = salloc_command(o, plan_sbatch(o), /*pty=*/true);
  const std::string line = command_line(argv);
  EXPECT_EQ(line.rfind("salloc --job-name=debugging --nodes=1 --ntasks-per-node=2 --gres=gpu:2 srun --pty --overlap "
                       "--nodes=1 --ntasks=1 bash -c 'set +u; if [[",
                       0),
            0u)
      << line;
}

TEST(SbatchRecordedCommand, DropsWhereTheScriptWentAndWhatWasDoneWithIt) {
  EXPECT_EQ(recorded_command({"sbatch", "--nodes", "2", "--out", "job.sh", "--submit", "--out=x.sh", "--test-only"},
                             {"--epochs", "1"}),
            (std::vector<std::string>{"sbatch", "--nodes", "2", "--", "--epochs", "1"}));
  EXPECT_EQ(recorded_command({"sweep", "--param", "lr=1,2"}, {}), (std::vector<std::string>{"sweep", "--param", "lr=1,2"}));
}

TEST(SbatchSubmittedLog, FillsInTheJobNameIdAndAnyArrayTask) {
  EXPECT_EQ(submitted_log("logs/%x-%j.out", "train", "1234"), "logs/train-1234.out");
  EXPECT_EQ(submitted_log("%x/%A_%a.log", "sweep", "77"), "sweep/77_*.log");
  EXPECT_EQ(submitted_log("plain.log", "train", "5"), "plain.log");
}

/// `epoch` as a SLURM timestamp in local time, as squeue and sbatch print them.
std::string slurm_timestamp(std::int64_t epoch) {
  const std::time_t t = static_cast<std::time_t>(epoch);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return buf;
}

TEST(SbatchTestOnly, SaysWhenAndWhereTheJobWouldStartWithAHintWhenItWaits) {
  const std::int64_t now = 1800000000;
  TestOnlyResult r;
  r.start_time = slurm_timestamp(now + 2 * 3600 + 5 * 60);
  r.nodes = "node[1-2]";
  r.partition = "gpu";
  r.processors = "8";
  EXPECT_EQ(render_test_only(r, now), "sbatch --test-only: the job would start at " + r.start_time +
                                          " on node[1-2] in partition gpu (8 processors), in about 2 h 5 min. Hint: "
                                          "squeue --start -p gpu shows the jobs ahead; a shorter --time or fewer "
                                          "nodes can start sooner (backfill).\n");
  r.start_time = slurm_timestamp(now + 30);
  EXPECT_EQ(render_test_only(r, now), "sbatch --test-only: the job would start at " + r.start_time +
                                          " on node[1-2] in partition gpu (8 processors), now.\n");
  r.start_time = "Unknown";  // unparsable: no wait is claimed
  EXPECT_TRUE(contains(render_test_only(r, now), "(8 processors), now.\n")) << render_test_only(r, now);
}

TEST(SweepPlan, AbsolutePathJoinsTheFolderAndDropsDotParts) {
  EXPECT_EQ(absolute_path("sweeps/./lr", "/home/u/proj"), "/home/u/proj/sweeps/lr");
  EXPECT_EQ(absolute_path("/data//x/", "/home/u"), "/data/x");
  EXPECT_EQ(absolute_path(".", "/"), "/");
}

TEST(SweepPlan, PlansTheGridTasksFoldersAndIndex) {
  test::TempDir tmp("sweep-plan");
  SbatchOptions o;
  o.train_args = {"--epochs", "2"};
  const SweepPlan plan = plan_sweep(o, {"lr=0.1,0.5", "batch-size=64,128,256"}, "runs/./a", 2, tmp.path());
  ASSERT_EQ(plan.grid.size(), 6u);
  EXPECT_EQ(plan.root, tmp.path() + "/runs/a");
  EXPECT_EQ(plan.script_path, plan.root + "/sweep.sh");
  EXPECT_EQ(plan.index_path, plan.root + "/sweep.json");
  EXPECT_EQ(plan.at_once, 2);
  EXPECT_EQ(o.job_name, "sweep");
  ASSERT_TRUE(o.array_tasks.has_value());
  EXPECT_EQ(o.array_tasks->run_root, plan.root);
  EXPECT_EQ(o.array_tasks->throttle, 2);
  ASSERT_EQ(o.array_tasks->task_args.size(), 6u);
  // The first parameter varies slowest.
  EXPECT_EQ(o.array_tasks->task_args[0], (std::vector<std::string>{"--lr", "0.1", "--batch-size", "64"}));
  EXPECT_EQ(o.array_tasks->task_args[5], (std::vector<std::string>{"--lr", "0.5", "--batch-size", "256"}));

  make_sweep_task_dirs(plan, "runs/./a");
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(files::exists(plan.root + "/task-" + std::to_string(i))) << i;
  EXPECT_FALSE(files::exists(plan.root + "/task-6"));

  const SweepIndex index = sweep_index(plan, "sweep", o.train_args);
  EXPECT_EQ(index.output_dir, plan.root);
  EXPECT_EQ(index.param_names, (std::vector<std::string>{"lr", "batch-size"}));
  EXPECT_EQ(index.tasks, plan.grid);
  EXPECT_EQ(index.job_id, "");
  EXPECT_EQ(parse_sweep_index(render_sweep_index(index), "sweep.json").tasks, plan.grid);

  const std::string written = render_sweep_written(plan);
  EXPECT_TRUE(contains(written, "sweep of 6 tasks (at most 2 at once) written to " + plan.root)) << written;
  EXPECT_TRUE(contains(written, "Submit it with: sbatch " + plan.script_path)) << written;

  SbatchOptions unthrottled;
  unthrottled.job_name = "mine";
  EXPECT_EQ(plan_sweep(unthrottled, {"lr=1,2,3"}, "b", 0, tmp.path()).at_once, 3);
  EXPECT_EQ(unthrottled.job_name, "mine");
  EXPECT_EQ(plan_sweep(unthrottled, {"lr=1,2,3"}, "c", 10, tmp.path()).at_once, 3);
}

TEST(SweepPlan, RefusesAMissingFolderAnOldSweepAndAParamGivenTwice) {
  test::TempDir tmp("sweep-refuse");
  SbatchOptions o;
  const std::string no_dir = config_error([&] { plan_sweep(o, {"lr=1,2"}, "", 0, tmp.path()); });
  EXPECT_TRUE(contains(no_dir, "--output-dir: expected the folder that will hold the sweep, found none given.")) << no_dir;

  ASSERT_EQ(files::make_dirs(tmp.file("old")), "");
  std::ofstream(tmp.file("old/sweep.json")) << "{}";
  const std::string old = config_error([&] { plan_sweep(o, {"lr=1,2"}, "old", 0, tmp.path()); });
  EXPECT_TRUE(contains(old, "--output-dir old: expected a new or empty folder, found a sweep there already")) << old;
  EXPECT_TRUE(contains(old, "sweep-report old")) << old;

  SbatchOptions twice;
  twice.train_args = {"--epochs", "1", "--lr=0.3"};
  const std::string dup = config_error([&] { plan_sweep(twice, {"lr=1,2"}, "new", 0, tmp.path()); });
  EXPECT_TRUE(contains(dup, "--param lr: expected --lr only in the sweep, found it among the train arguments")) << dup;
  EXPECT_FALSE(twice.array_tasks.has_value());  // nothing planned for a refused sweep

  EXPECT_TRUE(contains(config_error([&] { plan_sweep(o, {"lr"}, "x", 0, tmp.path()); }), "--param"));
}

TEST(SweepPlan, TaskFolderThatCannotBeMadeIsAClearError) {
  test::TempDir tmp("sweep-dirs");
  std::ofstream(tmp.file("file")) << "not a folder";
  SbatchOptions o;
  const SweepPlan plan = plan_sweep(o, {"lr=1,2"}, "file/sub", 0, tmp.path());
  const std::string err = config_error([&] { make_sweep_task_dirs(plan, "file/sub"); });
  EXPECT_TRUE(contains(err, "--output-dir file/sub: expected to create " + plan.root + "/task-0, found ")) << err;
  EXPECT_TRUE(contains(err, "pick a folder you can write to")) << err;
}

}  // namespace
}  // namespace train
