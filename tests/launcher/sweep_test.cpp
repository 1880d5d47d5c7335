// Tests for launcher/src/sweep.cpp and `trainctl sweep` / `trainctl sweep-report` as programs: the
// --param grammar, the grid, the index file, the generated array script (checked with bash -n and
// run task by task under a fake srun), and the report's table on fake run folders. No cluster:
// tests/slurm/workflow_test.cpp runs a sweep on the real one.
#include "train/launcher/sweep.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sbatch_test.h"
#include "test_process.h"
#include "test_util.h"
#include "train/base/error.h"
#include "train/launcher/sbatch.h"

namespace train {
namespace {

using test::Env;

/// An environment without SLURM commands on PATH (no cluster is asked).
Env no_slurm_env(const test::TempDir& dir) {
  Env env = test::hermetic_env();
  env["PATH"] = dir.path() + ":/usr/bin:/bin";
  return env;
}

// ---- --param and the grid --------------------------------------------------------------------------

TEST(SweepParam, ParsesNamesAndValues) {
  const SweepParam p = parse_sweep_param("lr=0.1,0.5,1.0");
  EXPECT_EQ(p.name, "lr");
  EXPECT_EQ(p.values, (std::vector<std::string>{"0.1", "0.5", "1.0"}));
  const SweepParam q = parse_sweep_param("--batch-size=64");
  EXPECT_EQ(q.name, "batch-size");
  EXPECT_EQ(q.values, (std::vector<std::string>{"64"}));
  EXPECT_EQ(parse_sweep_param("optimizer=sgd,adadelta").values.back(), "adadelta");
  EXPECT_EQ(parse_sweep_param("weight_decay=1e-4,0").values.front(), "1e-4");
}

TEST(SweepParam, RejectsMalformedValues) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"lr", "found no '='"},
      {"=0.1,0.5", "expected a flag name before '='"},
      {"1lr=0.1", "found '1lr'"},
      {"l r=0.1", "found 'l r'"},
      {"lr=", "found an empty one"},
      {"lr=0.1,,0.5", "found an empty one"},
      {"lr=0.1,", "found an empty one"},
      {"lr=0.1,0.1", "found '0.1' twice"},
      {"lr=0.1,0 .5", "without spaces"},
  };
  for (const auto& [text, fragment] : cases) {
    expect_error([&] { parse_sweep_param(text); }, {"--param '" + text + "'", fragment}, text);
  }
}

TEST(SweepGrid, EveryCombinationFirstParameterSlowest) {
  const std::vector<SweepPoint> grid =
      sweep_grid({parse_sweep_param("lr=0.1,0.5,1.0"), parse_sweep_param("batch-size=64,128")});
  ASSERT_EQ(grid.size(), 6u);
  EXPECT_EQ(grid[0], (SweepPoint{{"lr", "0.1"}, {"batch-size", "64"}}));
  EXPECT_EQ(grid[1], (SweepPoint{{"lr", "0.1"}, {"batch-size", "128"}}));
  EXPECT_EQ(grid[2], (SweepPoint{{"lr", "0.5"}, {"batch-size", "64"}}));
  EXPECT_EQ(grid[5], (SweepPoint{{"lr", "1.0"}, {"batch-size", "128"}}));
  EXPECT_EQ(sweep_point_args(grid[3]), (std::vector<std::string>{"--lr", "0.5", "--batch-size", "128"}));
}

TEST(SweepGrid, EmptyRepeatedAndHugeGridsAreErrors) {
  expect_error([] { sweep_grid({}); }, {"expected at least one --param", "the sweep would be empty"}, "empty");
  expect_error([] { sweep_grid({parse_sweep_param("lr=1,2"), parse_sweep_param("lr=3")}); },
               {"--param lr: expected each parameter once, found lr twice"}, "repeated");
  std::string many = "a=";
  for (int i = 0; i < 40; ++i) many += (i ? "," : "") + std::to_string(i);
  std::string more = "b=";
  for (int i = 0; i < 30; ++i) more += (i ? "," : "") + std::to_string(i);
  expect_error([&] { sweep_grid({parse_sweep_param(many), parse_sweep_param(more)}); },
               {"expected at most 1001 combinations"}, "1200 combinations");
}

// ---- the index file and the report ---------------------------------------------------------------

SweepIndex sample_index() {
  SweepIndex index;
  index.job_name = "sweep";
  index.job_id = "42";
  index.output_dir = "/runs/s";
  index.param_names = {"lr", "batch-size"};
  index.tasks = sweep_grid({parse_sweep_param("lr=0.1,0.5"), parse_sweep_param("batch-size=64,128")});
  index.train_args = {"--epochs", "1"};
  return index;
}

TEST(SweepIndex, RoundTripsThroughJson) {
  const SweepIndex index = sample_index();
  const std::string text = render_sweep_index(index);
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["tasks"][3]["task"], 3);
  EXPECT_EQ(j["tasks"][3]["run_dir"], "task-3");
  EXPECT_EQ(j["tasks"][3]["params"]["lr"], "0.5");
  EXPECT_EQ(j["tasks"][3]["params"]["batch-size"], "128");
  const SweepIndex back = parse_sweep_index(text, "sweep.json");
  EXPECT_EQ(back.tasks, index.tasks);
  EXPECT_EQ(back.param_names, index.param_names);
  EXPECT_EQ(back.job_id, "42");
  EXPECT_EQ(back.train_args, index.train_args);
}

TEST(SweepIndex, RejectsOtherFiles) {
  expect_error([] { parse_sweep_index("not json", "x.json"); }, {"x.json: expected a sweep index"}, "text");
  expect_error([] { parse_sweep_index("{\"params\":[\"lr\"],\"tasks\":[]}", "x.json"); }, {"no tasks"}, "empty");
  expect_error([] { parse_sweep_index("{\"params\":[\"lr\"],\"tasks\":[{\"task\":0,\"params\":{}}]}", "x.json"); },
               {"task 0 without a value for lr"}, "missing value");
}

TEST(SweepReport, ReadsDoneEpochAndMissingMetrics) {
  const SweepPoint p = {{"lr", "0.1"}};
  const SweepResult done = parse_task_metrics(
      0, p,
      "{\"event\":\"epoch\",\"epoch\":1,\"test_accuracy\":0.5}\nnot json\n"
      "{\"event\":\"done\",\"epochs\":1,\"test_loss\":0.25,\"test_accuracy\":0.875,\"params_sha256\":\"ab\"}\n");
  EXPECT_EQ(done.status, "done");
  EXPECT_DOUBLE_EQ(done.metrics.at("test_accuracy"), 0.875);
  EXPECT_DOUBLE_EQ(done.metrics.at("epochs"), 1);
  EXPECT_EQ(done.metrics.count("params_sha256"), 0u);
  const SweepResult running = parse_task_metrics(1, p, "{\"event\":\"epoch\",\"epoch\":2,\"test_accuracy\":0.6}\n");
  EXPECT_EQ(running.status, "epoch 2");
  EXPECT_DOUBLE_EQ(running.metrics.at("test_accuracy"), 0.6);
  const SweepResult preempted = parse_task_metrics(
      1, p, "{\"event\":\"epoch\",\"epoch\":1,\"test_accuracy\":0.6}\n{\"event\":\"preempted\",\"epochs\":1}\n");
  EXPECT_EQ(preempted.status, "epoch 1, preempted");
  EXPECT_EQ(parse_task_metrics(2, p, "").status, "no metrics");
}

TEST(SweepReport, TableHasOneAlignedRowPerTask) {
  const SweepIndex index = sample_index();
  std::vector<SweepResult> results;
  for (int i = 0; i < 4; ++i) {
    results.push_back(parse_task_metrics(
        i, index.tasks[i],
        i == 3 ? "" : "{\"event\":\"done\",\"epochs\":1,\"test_accuracy\":0." + std::to_string(6 + i) + "}\n"));
  }
  const std::string table = render_sweep_table(index, results);
  const std::vector<std::string> lines = test::lines_of(table);
  ASSERT_EQ(lines.size(), 5u) << table;
  EXPECT_EQ(lines[0], "task  lr   batch-size  status      test_accuracy  epochs");
  EXPECT_EQ(lines[1], "0     0.1  64          done        0.6000         1");
  EXPECT_EQ(lines[4], "3     0.5  128         no metrics  -              -");
  const std::vector<std::string> csv = test::lines_of(render_sweep_csv(index, results));
  ASSERT_EQ(csv.size(), 5u);
  EXPECT_EQ(csv[0], "task,lr,batch-size,status,test_accuracy,epochs");
  EXPECT_EQ(csv[3], "2,0.5,64,done,0.8000,1");
}

// ---- the generated array script ---------------------------------------------------------------------

TEST(SweepScript, OneArrayTaskPerCombinationWithThrottle) {
  SbatchOptions o;
  o.job_name = "sw";
  ArrayTasks tasks;
  tasks.run_root = "/runs/sw";
  tasks.throttle = 2;
  for (const SweepPoint& p : sample_index().tasks) tasks.task_args.push_back(sweep_point_args(p));
  o.array_tasks = tasks;
  o.train_args = {"--epochs", "1"};
  const SbatchPlan plan = plan_sbatch(o);
  EXPECT_EQ(plan.output, "/runs/sw/task-%a/train.out");
  const std::string script = render_sbatch_script(o, plan);
  EXPECT_TRUE(contains(script, "\n#SBATCH --array=0-3%2\n")) << script;
  EXPECT_TRUE(contains(script, "\n#SBATCH --output=/runs/sw/task-%a/train.out\n")) << script;
  EXPECT_TRUE(contains(script, "\n  2) SWEEP_ARGS=(--lr 0.5 --batch-size 64) ;;\n")) << script;
  EXPECT_TRUE(contains(script, "TRAIN_ARGS=(--checkpoint-dir \"$CKPT_DIR\" --resume auto --metrics \"$RUN_DIR/metrics.jsonl\")"))
      << script;
  EXPECT_TRUE(contains(script, "CKPT_DIR=\"$RUN_DIR/checkpoints\"")) << script;
  // The shared arguments come first, the task's combination after them, sbatch's arguments last.
  const std::size_t shared = script.find("TRAIN_ARGS+=(--epochs 1)");
  const std::size_t own = script.find("TRAIN_ARGS+=(\"${SWEEP_ARGS[@]}\")");
  const std::size_t extra = script.find("TRAIN_ARGS+=(\"$@\")");
  EXPECT_TRUE(shared < own && own < extra) << script;
  // No throttle: all at once, still written as %N.
  o.array_tasks->throttle = 0;
  EXPECT_TRUE(contains(generate_sbatch_script(o), "\n#SBATCH --array=0-3%4\n"));
  // A sweep is not a chain.
  o.array_chain = "3";
  expect_error([&] { plan_sbatch(o); }, {"--array-chain 3 in a sweep"}, "chain");
}

TEST(SweepCli, WritesScriptIndexAndRunFolders) {
  test::TempDir dir("sweep-cli");
  const auto p = test::run_process({"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", dir.path(), trainctl(), "sweep",
                                    "--param", "lr=0.1,0.5", "--param", "batch-size=64,128", "--throttle", "2",
                                    "--output-dir", "runs", "--program", "/bin/echo", "--no-preflight", "--",
                                    "--epochs", "1"},
                                   no_slurm_env(dir), 30);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_TRUE(contains(p->out(), "sweep of 4 tasks (at most 2 at once) written to " + dir.file("runs"))) << p->out();
  const SweepIndex index = parse_sweep_index(test::read_text(dir.file("runs/sweep.json")), "sweep.json");
  ASSERT_EQ(index.tasks.size(), 4u);
  EXPECT_EQ(index.tasks[1], (SweepPoint{{"lr", "0.1"}, {"batch-size", "128"}}));
  EXPECT_EQ(index.output_dir, dir.file("runs"));
  EXPECT_EQ(index.job_id, "");
  for (int i = 0; i < 4; ++i) {
    struct stat st {};
    EXPECT_EQ(stat(dir.file("runs/task-" + std::to_string(i)).c_str(), &st), 0) << "task folder " << i;
  }
  const std::string script = test::read_text(dir.file("runs/sweep.sh"));
  EXPECT_TRUE(contains(script, "#   trainctl sweep --param lr=0.1,0.5 --param batch-size=64,128")) << script;
  EXPECT_TRUE(contains(script, "TRAIN_BIN=/bin/echo")) << script;
  EXPECT_FALSE(contains(script, "preflight --tasks-per-node")) << script;
  const auto syntax = test::run_process({"/bin/bash", "-n", dir.file("runs/sweep.sh")}, no_slurm_env(dir), 10);
  EXPECT_EQ(syntax->exit_code(), 0) << syntax->err();

  // Each task, run as SLURM would run it (under a fake srun that runs the program once), trains with
  // its combination in its own folder.
  write_text(dir.file("srun"), "#!/bin/sh\nwhile [ \"${1#--}\" != \"$1\" ]; do shift; done\nexec \"$@\"\n", 0755);
  for (int task = 0; task < 4; ++task) {
    Env env = no_slurm_env(dir);
    env["SLURM_JOB_ID"] = std::to_string(100 + task);
    env["SLURM_ARRAY_JOB_ID"] = "100";
    env["SLURM_ARRAY_TASK_ID"] = std::to_string(task);
    env["SLURM_SUBMIT_DIR"] = dir.path();
    const auto run = test::run_process({"/bin/bash", dir.file("runs/sweep.sh")}, env, 30);
    ASSERT_EQ(run->exit_code(), 0) << run->err();
    const std::string run_dir = dir.file("runs/task-" + std::to_string(task));
    std::string expected = "--checkpoint-dir " + run_dir + "/checkpoints --resume auto --metrics " + run_dir +
                           "/metrics.jsonl --epochs 1";
    for (const std::string& arg : sweep_point_args(index.tasks[task])) expected += " " + arg;
    EXPECT_EQ(test::last_line(run->out()), expected) << run->out();
    EXPECT_TRUE(contains(run->out(), "sweep: job " + std::to_string(100 + task) + " (task " + std::to_string(task) +
                                         " of array 100)"))
        << run->out();
  }
  // A second sweep into the same folder would mix the runs: refused.
  const auto again = test::run_process({trainctl(), "sweep", "--param", "lr=1", "--output-dir", dir.file("runs")},
                                       no_slurm_env(dir), 30);
  EXPECT_EQ(again->exit_code(), 1);
  EXPECT_TRUE(contains(again->err(), "expected a new or empty folder, found a sweep there already")) << again->err();
}

TEST(SweepCli, ClearErrorsForBadSweeps) {
  test::TempDir dir("sweep-cli-errors");
  struct Case {
    std::vector<std::string> args;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {{"--output-dir", dir.file("a")}, "trainctl sweep: sweep: expected at least one --param NAME=V1,V2,..., found none"},
      {{"--param", "lr", "--output-dir", dir.file("b")}, "--param 'lr': expected NAME=V1,V2,..., found no '='."},
      {{"--param", "lr=0.1,,1", "--output-dir", dir.file("c")}, "found an empty one"},
      {{"--param", "lr=0.1"}, "--output-dir: expected the folder that will hold the sweep, found none given."},
      {{"--param", "lr=0.1", "--output-dir", dir.file("d"), "--", "--lr", "3"},
       "--param lr: expected --lr only in the sweep, found it among the train arguments"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {trainctl(), "sweep"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const auto p = test::run_process(argv, no_slurm_env(dir), 30);
    EXPECT_EQ(p->exit_code(), 1) << c.fragment;
    EXPECT_TRUE(contains(p->err(), c.fragment)) << p->err();
    EXPECT_TRUE(contains(p->err(), "Hint: ")) << p->err();
  }
  // Nothing is written for a refused sweep.
  struct stat st {};
  EXPECT_NE(stat(dir.file("b").c_str(), &st), 0);
  // --throttle 0 is a usage error.
  const auto t = test::run_process({trainctl(), "sweep", "--param", "lr=1", "--throttle", "0", "--output-dir", dir.file("e")},
                                   no_slurm_env(dir), 30);
  EXPECT_EQ(t->exit_code(), 2) << t->err();
}

TEST(SweepReportCli, PrintsTheTableAndSaysWhyThereIsNoPng) {
  test::TempDir dir("sweep-report-cli");
  SweepIndex index = sample_index();
  index.output_dir = dir.path();
  write_text(dir.file("sweep.json"), render_sweep_index(index));
  for (int i = 0; i < 4; ++i) {
    const std::string task = dir.file("task-" + std::to_string(i));
    mkdir(task.c_str(), 0755);
    // As train writes them: epoch lines in --metrics, the done line last in its log.
    write_text(task + "/metrics.jsonl", "{\"event\":\"epoch\",\"epoch\":1,\"test_accuracy\":0.5}\n");
    write_text(task + "/train.out", "sweep: job 5 (task " + std::to_string(i) + " of array 4)\n2026 info [rank 0/1 n] "
                                    "Test set: ...\n{\"event\":\"done\",\"epochs\":1,\"test_loss\":0.3,"
                                    "\"test_accuracy\":0.9" + std::to_string(i) + "}\n");
  }
  // No matplotlib and no gnuplot on this PATH (python3 is a fake that fails).
  Env env = no_slurm_env(dir);
  env["PATH"] = dir.path();
  env["TRAIN_PYTHON"] = "/nonexistent/python";
  write_text(dir.file("python3"), "#!/bin/sh\nexit 1\n", 0755);
  const auto p = test::run_process({trainctl(), "sweep-report", dir.path()}, env, 60);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  const std::vector<std::string> lines = test::lines_of(p->out());
  ASSERT_EQ(lines.size(), 5u) << p->out();
  EXPECT_EQ(lines[0], "task  lr   batch-size  status  test_accuracy  test_loss  epochs");
  EXPECT_EQ(lines[2], "1     0.1  128         done    0.9100         0.3000     1");
  EXPECT_TRUE(contains(p->err(), "no PNG made (the table above is complete)")) << p->err();
  EXPECT_TRUE(contains(p->err(), "Hint: ")) << p->err();
  EXPECT_EQ(test::lines_of(test::read_text(dir.file("sweep-report.csv"))).size(), 5u);

  const auto missing = test::run_process({trainctl(), "sweep-report", dir.file("nothing")}, env, 30);
  EXPECT_EQ(missing->exit_code(), 1);
  EXPECT_TRUE(contains(missing->err(), "expected the sweep's index file " + dir.file("nothing/sweep.json") +
                                           ", found none. Hint: "))
      << missing->err();
}


TEST(SweepReportCli, DrawsThePngWithMatplotlibWhenThereIsOne) {
  // The repository's venv (or TRAIN_PYTHON) with matplotlib, as sweep-report looks for it.
  const char* env_python = std::getenv("TRAIN_PYTHON");
  std::string python = env_python != nullptr ? env_python : std::string(TRAIN_SOURCE_DIR) + "/.venv/bin/python";
  const auto probe = test::run_process({python, "-c", "import matplotlib"}, test::hermetic_env(), 60);
  if (probe->exit_code() != 0) GTEST_SKIP() << python << " has no matplotlib: the no-PNG path is tested above";
  test::TempDir dir("sweep-report-png");
  SweepIndex index = sample_index();
  write_text(dir.file("sweep.json"), render_sweep_index(index));
  mkdir(dir.file("task-0").c_str(), 0755);
  write_text(dir.file("task-0/metrics.jsonl"), "{\"event\":\"done\",\"epochs\":1,\"test_accuracy\":0.9}\n");
  Env env = test::hermetic_env();
  env["TRAIN_PYTHON"] = python;
  const auto p = test::run_process({trainctl(), "sweep-report", dir.path()}, env, 120);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_TRUE(contains(p->err(), "wrote " + dir.file("sweep-report.png") + " (matplotlib)")) << p->err();
  EXPECT_EQ(test::read_text(dir.file("sweep-report.png")).substr(1, 3), "PNG");
}

}  // namespace
}  // namespace train
