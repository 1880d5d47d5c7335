// The health-check and network-interface options of `trainctl sbatch` (and sweep):
// --health-check, --health-min-fraction, --health-warn-only, --exclude-bad-nodes and --interface.
// The generated script passes the health flags to train and exports TRAIN_INTERFACE (also checked
// by running it under a fake srun, without SLURM); bad combinations and values are clear errors;
// `trainctl env` shows TRAIN_INTERFACE. tests/slurm/health_test.cpp submits such a script for real.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sbatch_test.h"
#include "train/launcher/sbatch.h"

namespace train {
namespace {

using test::Env;

/// Expects plan_sbatch(o) to throw a ConfigError holding every fragment, with "expected", "found" and a hint.
void expect_plan_error(const SbatchOptions& o, const std::vector<std::string>& fragments, const std::string& context) {
  expect_error([&] { plan_sbatch(o); }, fragments, context);
}

/// An environment whose PATH has no SLURM commands, so no cluster is asked.
Env without_slurm(const test::TempDir& dir) {
  Env env = test::hermetic_env();
  env["PATH"] = dir.path();
  return env;
}

TEST(SbatchHealth, DefaultScriptHasNoHealthCheckAndNoInterface) {
  const std::string script = generate_sbatch_script(SbatchOptions{});
  EXPECT_FALSE(contains(script, "--health")) << script;
  EXPECT_FALSE(contains(script, "--exclude-bad-nodes")) << script;
  EXPECT_FALSE(contains(script, "TRAIN_INTERFACE")) << script;
  EXPECT_TRUE(health_train_args(SbatchOptions{}).empty());
}

TEST(SbatchHealth, ScriptPassesTheFlagsToTrainAndExportsTheInterface) {
  SbatchOptions o;
  o.health_check = true;
  o.health_min_fraction = "0.7";
  o.health_warn_only = true;
  o.interface = "ib0";
  o.train_args = {"--epochs", "1"};
  EXPECT_EQ(health_train_args(o),
            (std::vector<std::string>{"--health-check", "--health-min-fraction", "0.7", "--health-warn-only"}));
  const std::string script = generate_sbatch_script(o);
  EXPECT_TRUE(contains(script, "\nTRAIN_ARGS+=(--health-check --health-min-fraction 0.7 --health-warn-only)\n")) << script;
  EXPECT_TRUE(contains(script, "below 0.7 x the others' median is bad, and then\n# train names it and trains anyway.\n"))
      << script;
  EXPECT_TRUE(contains(script, "\nexport TRAIN_INTERFACE=ib0\n")) << script;
  // The health flags come before the user's own arguments, the export before srun starts anything.
  EXPECT_LT(script.find("--health-check --health"), script.find("TRAIN_ARGS+=(--epochs 1)")) << script;
  EXPECT_LT(script.find("export TRAIN_INTERFACE"), script.find("srun --kill-on-bad-exit")) << script;
}

TEST(SbatchHealth, ExcludeBadNodesKeepsTheJobRequeueable) {
  SbatchOptions o;
  o.health_check = true;
  o.exclude_bad_nodes = true;
  const std::string script = generate_sbatch_script(o);
  EXPECT_TRUE(contains(script, "\nTRAIN_ARGS+=(--health-check --exclude-bad-nodes)\n")) << script;
  EXPECT_TRUE(contains(script, "\n# train requeues the job without it (at most 3 times).\n")) << script;
  EXPECT_TRUE(contains(script, "so the job must stay requeueable: keep this line.\n#SBATCH --requeue\n")) << script;
  // An array chain passes train --no-requeue (the next chunk goes on), but the job stays requeueable.
  o.array_chain = "3";
  const std::string chain = generate_sbatch_script(o);
  EXPECT_TRUE(contains(chain, "\n#SBATCH --requeue\n")) << chain;
  EXPECT_TRUE(contains(chain, "--exclude-bad-nodes")) << chain;
}

TEST(SbatchHealth, WhatTrainAcceptsIsAccepted) {
  for (const std::string f : {"1", "0.5", "1.0", "0.05", "1e-1", ".9"}) {
    SbatchOptions o;
    o.health_check = true;
    o.health_min_fraction = f;
    EXPECT_NO_THROW(plan_sbatch(o)) << f;
  }
  // The interface need not exist on the submit host: the compute nodes have their own.
  for (const std::string name : {"lo", "nosuch0", "ib0", "enp1s0f1", "eth0.100", "abcdefghijklmno", "bond0:1"}) {
    SbatchOptions o;
    o.interface = name;
    EXPECT_NO_THROW(plan_sbatch(o)) << name;
    EXPECT_TRUE(contains(generate_sbatch_script(o), "export TRAIN_INTERFACE=" + name + "\n")) << name;
  }
  // The options that need --health-check take it from train's arguments as well.
  SbatchOptions o;
  o.exclude_bad_nodes = true;
  o.train_args = {"--health-check"};
  EXPECT_NO_THROW(plan_sbatch(o));
  // A fraction without the check is a warning: a submission may add --health-check (sbatch SCRIPT --health-check).
  SbatchOptions f;
  f.health_min_fraction = "0.7";
  const SbatchPlan plan = plan_sbatch(f);
  ASSERT_EQ(plan.warnings.size(), 1u);
  EXPECT_TRUE(contains(plan.warnings[0], "--health-min-fraction 0.7 without --health-check")) << plan.warnings[0];
}

TEST(SbatchHealth, OptionsThatNeedTheCheckOrExcludeEachOtherAreErrors) {
  SbatchOptions o;
  o.exclude_bad_nodes = true;
  expect_plan_error(o, {"--exclude-bad-nodes: expected --health-check too, found it alone."}, "exclude alone");
  o.train_args = {"--health-warn-only"};
  expect_plan_error(o, {"--exclude-bad-nodes: expected --health-check too"}, "exclude, warn-only after --");
  o = SbatchOptions{};
  o.health_warn_only = true;
  expect_plan_error(o, {"--health-warn-only: expected --health-check too, found it alone."}, "warn-only alone");
  o.health_check = true;
  o.exclude_bad_nodes = true;
  expect_plan_error(o, {"--exclude-bad-nodes with --health-warn-only: expected one of them, found both."}, "both");
  o.exclude_bad_nodes = false;
  o.train_args = {"--exclude-bad-nodes"};
  expect_plan_error(o, {"--exclude-bad-nodes with --health-warn-only"}, "both, one after --");
}

TEST(SbatchHealth, FractionsOutsideZeroToOneAreErrors) {
  for (const std::string f : {"0", "0.0", "1.5", "-0.1", "2", "abc", "", "nan", "inf", "0.5x", "1e5", "--epochs"}) {
    SbatchOptions o;
    o.health_check = true;
    o.health_min_fraction = f;
    expect_plan_error(o, {"--health-min-fraction '" + f + "': expected a fraction in (0, 1], found "}, "fraction " + f);
  }
}

TEST(SbatchHealth, InterfaceNamesOfTheWrongShapeAreErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "found an empty one."},
      {"eth0/1", "found '/' in it."},
      {"eth 0", "found whitespace in it."},
      {"eth0\t", "found whitespace in it."},
      {"abcdefghijklmnop", "found 16 characters."},
      {"..", "found '..'."},
      {"ib'0", "found ''' in it."},
  };
  for (const auto& [name, found] : cases) {
    SbatchOptions o;
    o.interface = name;
    expect_plan_error(o, {"--interface '" + name + "': expected a network interface name (1-15 characters", found},
                      "interface '" + name + "'");
  }
}

TEST(SbatchHealth, AFlagGivenHereAndAfterTheDashesIsAnError) {
  SbatchOptions o;
  o.health_check = true;
  o.train_args = {"--epochs", "1", "--health-check"};
  expect_plan_error(o, {"--health-check: expected it once, found it both as a trainctl option (--health-check) and "
                        "among train's arguments after '--' (--health-check)."}, "check twice");
  o.train_args = {"--health-min-fraction", "0.4"};
  o.health_min_fraction = "0.7";
  expect_plan_error(o, {"(--health-min-fraction 0.7)", "after '--' (--health-min-fraction 0.4)"}, "fraction twice");
  o = SbatchOptions{};
  o.interface = "ib0";
  o.train_args = {"--interface=eth0"};
  expect_plan_error(o, {"--interface: expected it once", "(--interface ib0)", "(--interface=eth0)", "TRAIN_INTERFACE"},
                    "interface twice");
  o = SbatchOptions{};
  o.health_check = true;
  o.exclude_bad_nodes = true;
  o.train_args = {"--exclude-bad-nodes"};
  expect_plan_error(o, {"--exclude-bad-nodes: expected it once"}, "exclude twice");
  o.exclude_bad_nodes = false;
  o.health_warn_only = true;
  o.train_args = {"--health-warn-only"};
  expect_plan_error(o, {"--health-warn-only: expected it once"}, "warn-only twice");
}

TEST(TrainctlSbatchHealth, OptionsReachTheScriptAndErrorsExitOne) {
  test::TempDir dir("trainctl-sbatch-health");
  const Env env = without_slurm(dir);
  const std::vector<std::string> args = {"sbatch", "--nodes", "2", "--health-check", "--health-min-fraction", "0.7",
                                         "--exclude-bad-nodes", "--interface", "ib0", "--", "--epochs", "1"};
  const auto p = run_trainctl(args, env);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(p->err(), "");
  SbatchOptions o;
  o.nodes = "2";
  o.health_check = true;
  o.health_min_fraction = "0.7";
  o.exclude_bad_nodes = true;
  o.interface = "ib0";
  o.train_args = {"--epochs", "1"};
  o.command = std::vector<std::string>(args.begin(), args.end());
  EXPECT_EQ(p->out(), generate_sbatch_script(o));

  auto e = run_trainctl({"sbatch", "--health-warn-only"}, env);
  EXPECT_EQ(e->exit_code(), 1);
  EXPECT_EQ(e->out(), "");
  EXPECT_TRUE(contains(e->err(), "trainctl sbatch: --health-warn-only: expected --health-check too, found it alone. "
                                 "Hint: add --health-check")) << e->err();
  e = run_trainctl({"sbatch", "--interface", "", "--health-check"}, env);
  EXPECT_EQ(e->exit_code(), 1);
  EXPECT_TRUE(contains(e->err(), "--interface '': expected a network interface name")) << e->err();
  e = run_trainctl({"sbatch", "--interface", "lo", "--", "--interface", "eth0"}, env);
  EXPECT_EQ(e->exit_code(), 1);
  EXPECT_TRUE(contains(e->err(), "(--interface lo) and among train's arguments after '--' (--interface eth0)"))
      << e->err();
  e = run_trainctl({"sbatch", "--health-min-fraction", "0.7"}, env);
  EXPECT_EQ(e->exit_code(), 0) << e->err();
  EXPECT_TRUE(contains(e->err(), "trainctl sbatch: warning: --health-min-fraction 0.7 without --health-check"))
      << e->err();
}

TEST(TrainctlSbatchHealth, HelpListsTheOptionsOfSbatchAndSweep) {
  for (const char* sub : {"sbatch", "sweep"}) {
    const auto p = run_trainctl({sub, "--help"}, test::hermetic_env());
    EXPECT_EQ(p->exit_code(), 0) << p->err();
    for (const char* flag : {"--health-check", "--health-min-fraction F", "--health-warn-only", "--exclude-bad-nodes",
                             "--interface IF"}) {
      EXPECT_TRUE(contains(p->out(), flag)) << sub << ": " << flag << " not in " << p->out();
    }
    EXPECT_TRUE(contains(p->out(), "not that it exists")) << p->out();
  }
}

// The generated script as the batch step of a job (2 nodes x 1 task) under a fake srun that runs its
// command: train gets the health flags and sees TRAIN_INTERFACE.
TEST(SbatchHealthRun, TrainGetsTheFlagsAndTheInterface) {
  test::TempDir dir("sbatch-health-run");
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.file(name), std::ios::binary | std::ios::trunc) << text;
    chmod(dir.file(name).c_str(), 0755);
  };
  mkdir(dir.file("bin").c_str(), 0755);
  write("bin/srun", "#!/bin/bash\nwhile [[ \"${1:-}\" == -* ]]; do shift; done\nexec \"$@\"\n");
  write("bin/train", "#!/bin/bash\nprintf 'train TRAIN_INTERFACE=%s' \"${TRAIN_INTERFACE:-unset}\"; printf ' [%s]' \"$@\"; echo\n");
  SbatchOptions o;
  o.health_check = true;
  o.exclude_bad_nodes = true;
  o.interface = "lo";
  o.preflight = false;
  write("job.sh", generate_sbatch_script(o));
  Env env = test::hermetic_env();
  env["PATH"] = dir.file("bin") + ":" + env["PATH"];
  env["SLURM_JOB_ID"] = "123";
  env["SLURM_SUBMIT_DIR"] = dir.path();
  env["SLURM_JOB_NUM_NODES"] = "2";
  env["SLURM_JOB_NODELIST"] = "node[1-2]";
  env["TRAIN_BIN"] = dir.file("bin/train");
  env["TRAIN_INTERFACE"] = "eth9";  // the submitter's environment: the script's export wins
  const auto p = test::run_process({"/bin/bash", dir.file("job.sh"), "--epochs", "1"}, env, 30);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_TRUE(contains(p->out(), "\ntrain TRAIN_INTERFACE=lo [--checkpoint-dir] [checkpoints/train-123] [--resume] "
                                 "[auto] [--health-check] [--exclude-bad-nodes] [--epochs] [1]\n")) << p->out();
}

TEST(SbatchHealth, ShellcheckFindsNothingInAScriptWithEveryHealthOption) {
  const std::string shellcheck = test::find_on_path("shellcheck");
  if (shellcheck.empty()) GTEST_SKIP() << "shellcheck is not installed (apt-get install shellcheck)";
  SbatchOptions o;
  o.health_check = true;
  o.health_min_fraction = "0.6";
  o.exclude_bad_nodes = true;
  o.interface = "ib0";
  o.array_chain = "2";
  o.train_args = {"--epochs", "1"};
  test::TempDir dir("sbatch-health-shellcheck");
  std::ofstream(dir.file("all.sh"), std::ios::binary | std::ios::trunc) << generate_sbatch_script(o);
  const auto p = test::run_process({shellcheck, dir.file("all.sh")}, test::hermetic_env(), 60);
  EXPECT_EQ(p->exit_code(), 0) << p->out() << p->err();
}

TEST(TrainctlEnvInterface, ShowsTrainInterfaceOrNull) {
  Env env = test::hermetic_env();
  env.erase("TRAIN_INTERFACE");
  auto p = run_trainctl({"env"}, env);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_TRUE(nlohmann::json::parse(p->out())["interface"].is_null()) << p->out();
  env["TRAIN_INTERFACE"] = "ib0";
  p = run_trainctl({"env"}, env);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(nlohmann::json::parse(p->out())["interface"], "ib0") << p->out();
}

}  // namespace
}  // namespace train
