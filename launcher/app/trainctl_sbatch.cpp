// trainctl's subcommands for a batch job and the cluster it runs on: sbatch, resources and interactive.
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "train/base/error.h"
#include "train/base/env.h"
#include "train/launcher/job_requests.h"
#include "train/launcher/local_launch.h"
#include "train/launcher/resources.h"
#include "train/launcher/sbatch.h"
#include "trainctl.h"

namespace trainctl {

Command add_sbatch(CLI::App& app, const std::vector<std::string>& before_dashes,
                   const std::vector<std::string>& after_dashes) {
  auto* cmd = add_command(app, "sbatch", "Generate a batch script that trains with srun on a SLURM allocation",
      "Prints the script (or writes --out FILE); --test-only asks sbatch when the job would start,\n"
      "--submit submits it and prints the job id. Arguments after '--' go to train, and so do the\n"
      "script's own arguments at submission (sbatch SCRIPT --epochs 1; train keeps the last copy).\n"
      "The request is checked first (counts, --time format, GPUs vs tasks, --signal), then against\n"
      "the partition's nodes, CPUs, memory, MaxTime and GPUs when sinfo answers. Examples:\n"
      "  trainctl sbatch --nodes 2 --ntasks-per-node 1 --time 1:00:00 -- --epochs 1\n"
      "  trainctl sbatch --partition gpu --gres gpu:4 --cpus-per-task 8 --setup 'module load cuda' --submit\n"
      "  trainctl sbatch --array-chain 3 --time 1-00:00:00 --stage-data data.tar --stage-subdir fm --test-only\n"
      "  trainctl sbatch --nodes 4 --stage-data 'shards/train-{000000..000127}.tar' --submit -- --dataset webdataset\n"
      "  trainctl sbatch --ntasks 4 --output logs/out%j.log --error logs/err%j.log --per-rank-logs --submit\n"
      "With --per-rank-logs srun writes one file per rank (logs/out%j-%t.log); trainctl logs JOBID --rank R\n"
      "shows one. See docs/slurm.md, and docs/workflow.md for status, logs, cancel and sweeps.\n");
  auto o = std::make_shared<train::SbatchOptions>();
  auto out = std::make_shared<std::string>();
  add_shape_options(cmd, *o);
  add_batch_options(cmd, *o);
  cmd->add_option("--array-chain", o->array_chain, "N chunks run one after another (--array=1-N%1), each resuming from the last checkpoint")
      ->type_name("N");
  cmd->add_option("--out", *out, "write the script to FILE (mode 755) instead of stdout")
      ->type_name("FILE");
  cmd->add_flag("--submit", "submit the script with sbatch and print the job id");
  cmd->add_flag("--test-only", "ask sbatch --test-only when the job would start (nothing is submitted)");
  add_no_cluster_checks_flag(cmd);
  cmd->add_option("TRAIN_ARGS", o->train_args, "arguments for train, after '--'");
  return {cmd, [o, out, cmd, &before_dashes, &after_dashes]() {
    o->train_args.insert(o->train_args.end(), after_dashes.begin(), after_dashes.end());
    const bool submit = cmd->count("--submit") > 0;
    const bool test_only = cmd->count("--test-only") > 0;
    if (submit && test_only) {
      throw train::ConfigError("--submit with --test-only: expected one of them, found both.",
                               "use --test-only to see when the job would start, then --submit.");
    }
    o->command = train::recorded_command(before_dashes, o->train_args);
    const train::SbatchPlan plan = plan_job(*o, *cmd, /*with_plan_warnings=*/true);
    const std::string script = train::render_sbatch_script(*o, plan);
    if (!out->empty()) {
      write_file(*out, script, "--out", 0755, "a file to write the script to");
    } else if (!submit && !test_only) {
      return print(script);
    }
    if (test_only) {
      return print(train::render_test_only(train::sbatch_test_only(script), static_cast<int64_t>(std::time(nullptr))));
    }
    if (submit) {
      const std::string id = train::sbatch_submit(script, plan.output);
      const std::string log = train::submitted_log(plan.output, plan.job_name, id);
      std::cerr << "trainctl sbatch: submitted job " << id << " (" << plan.job_name << "), log " << log
                << "; follow it with squeue -j " << id << std::endl;
      return print(id + "\n");
    }
    return 0;
  }};
}

Command add_resources(CLI::App& app) {
  auto* cmd = add_command(app, "resources", "Summarise the cluster: partitions, nodes, CPUs, memory, GPUs, shards, time limits",
      "Asks sinfo (partitions, time limits) and scontrol show node (CPUs, memory, Gres, GresUsed),\n"
      "then sbatch --test-only in each partition for a job of the shape given (default 1 node x 1\n"
      "task) and points out where it could start soonest. Examples:\n"
      "  trainctl resources\n"
      "  trainctl resources --nodes 2 --gres gpu:4 --time 2:00:00\n"
      "  trainctl resources --json\n");
  auto o = std::make_shared<train::SbatchOptions>();
  auto json = std::make_shared<bool>(false);
  auto no_estimate = std::make_shared<bool>(false);
  add_shape_options(cmd, *o);
  cmd->add_flag("--json", *json, "print the partitions, nodes and GPU totals as JSON");
  cmd->add_flag("--no-estimate", *no_estimate, "don't ask sbatch --test-only where a job could start");
  return {cmd, [o, json, no_estimate]() {
    o->signal = "none";  // a shape, not a batch job
    const train::SbatchPlan plan = train::plan_sbatch(*o);
    const train::ClusterResources res = train::query_resources();
    if (*json) return print(train::render_resources_json(res));
    std::string text = train::render_resources(res);
    if (!*no_estimate) text += train::render_estimates(plan, train::estimate_starts(*o, plan, res.partitions));
    return print(text);
  }};
}

Command add_interactive(CLI::App& app) {
  auto* cmd = add_command(app, "interactive", "Print (or --run) the salloc command for an interactive session shaped like a batch job",
      "The same shape options and --setup lines as trainctl sbatch. Prints one command line:\n"
      "  salloc SHAPE bash -c 'SETUP; exec bash -i'\n"
      "a shell that holds the allocation, with the batch script's environment; `srun PROGRAM` there\n"
      "runs on the allocated nodes as in the batch job. --pty opens the shell on the first node\n"
      "instead (salloc SHAPE srun --pty --overlap -N1 -n1 bash -c ...). --run executes it. Example:\n"
      "  trainctl interactive --nodes 2 --time 30 --setup 'source .venv/bin/activate' --run\n"
      "  (then: srun build/bin/train --epochs 1 --dry-run)\n");
  auto o = std::make_shared<train::SbatchOptions>();
  auto run = std::make_shared<bool>(false);
  auto pty = std::make_shared<bool>(false);
  add_shape_options(cmd, *o);
  cmd->add_option("--setup", o->setup, "a shell line run before the shell starts, e.g. 'module load cuda' (repeatable)")
      ->allow_extra_args(false)
      ->type_name("LINE");
  cmd->add_flag("--pty", *pty, "open the shell on the allocation's first node (srun --pty)");
  cmd->add_flag("--run", *run, "execute the command instead of printing it");
  add_no_cluster_checks_flag(cmd);
  return {cmd, [o, run, pty, cmd]() {
    train::prepare_interactive(*o);
    const train::SbatchPlan plan = plan_job(*o, *cmd, /*with_plan_warnings=*/false);
    std::vector<std::string> argv = train::salloc_command(*o, plan, *pty);
    if (!*run) return print(train::command_line(argv) + "\n");
    try {
      train::find_program("salloc", train::current_environment());
    } catch (const train::ConfigError&) {
      throw train::ConfigError("salloc: expected SLURM's salloc on PATH, found none.",
                               "run this on the cluster's login node, or drop --run and copy the printed command there.");
    }
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    std::fflush(stdout);
    ::execvp(cargv[0], cargv.data());
    throw train::ConfigError("salloc: expected to start it, found exec failing: " + std::string(std::strerror(errno)) + ".",
                             "check that salloc is executable.");
  }};
}

}  // namespace trainctl
