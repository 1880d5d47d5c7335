// trainctl: the launcher's command line (no LibTorch). One function per subcommand below adds its
// options and returns the action to run: hostnames, hostlist, env, local, sbatch, preflight. New
// subcommands register the same way in main().
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "train/error.h"
#include "train/launcher/device.h"
#include "train/launcher/env.h"
#include "train/launcher/hostlist.h"
#include "train/launcher/local_launch.h"
#include "train/launcher/preflight.h"
#include "train/launcher/sbatch.h"

#ifndef TRAIN_VERSION
#define TRAIN_VERSION "unknown"
#endif

namespace {

/// Exit status for a command line that doesn't parse (as getopt-based tools use).
constexpr int kExitUsage = 2;
/// Exit status for an invalid input or environment.
constexpr int kExitError = 1;

using Action = std::function<int()>;
/// A subcommand and what it does once its options are parsed.
using Command = std::pair<CLI::App*, Action>;

/// Writes text to stdout in one go and reports whether it all got there.
int print(const std::string& text) {
  const std::size_t written = std::fwrite(text.data(), 1, text.size(), stdout);
  return (written == text.size() && std::fflush(stdout) == 0) ? 0 : kExitError;
}

Command add_hostnames(CLI::App& app) {
  auto* cmd = app.add_subcommand("hostnames", "Expand a SLURM hostlist expression, one host per line");
  cmd->footer(
      "Prints exactly what `scontrol show hostnames EXPR` prints, without needing SLURM.\n"
      "Invalid expressions are an error (exit 1). Example:\n"
      "  trainctl hostnames 'node[01-03],gpu[1-2]-ib[3-4]'\n");
  auto expr = std::make_shared<std::string>();
  cmd->add_option("EXPR", *expr,
                  "hostlist expression, e.g. node[01-04,07]; default: $SLURM_JOB_NODELIST");
  return {cmd, [expr, cmd]() {
    std::string value = *expr;
    if (cmd->count("EXPR") == 0) {
      const char* nodelist = std::getenv("SLURM_JOB_NODELIST");
      if (nodelist == nullptr || *nodelist == '\0') {
        throw train::ConfigError("EXPR: expected a hostlist expression, found none given and "
                                 "SLURM_JOB_NODELIST unset.",
                                 "pass one, e.g. trainctl hostnames 'node[01-04]', or run inside a job.");
      }
      value = nodelist;
    }
    std::string out;
    for (const std::string& host : train::hostlist_expand(value)) {
      out += host;
      out += '\n';
    }
    return print(out);
  }};
}

Command add_hostlist(CLI::App& app) {
  auto* cmd = app.add_subcommand("hostlist", "Compress host names into one SLURM hostlist expression");
  cmd->footer(
      "The inverse of hostnames; order and duplicates are kept. Example:\n"
      "  trainctl hostlist n1 n2 n3 n5 m1    prints n[1-3,5],m1\n");
  auto hosts = std::make_shared<std::vector<std::string>>();
  cmd->add_option("HOSTS", *hosts, "host names or expressions (comma- or space-separated); required");
  return {cmd, [hosts]() {
    if (hosts->empty()) {
      throw train::ConfigError("HOSTS: expected at least one host name, found none.",
                               "e.g. trainctl hostlist n1 n2 n3.");
    }
    std::vector<std::string> all;
    for (const std::string& item : *hosts) {
      for (std::string& host : train::hostlist_expand(item)) all.push_back(std::move(host));
    }
    return print(train::hostlist_compress(all) + "\n");
  }};
}

Command add_env(CLI::App& app) {
  auto* cmd = app.add_subcommand("env", "Print the distributed environment this process resolves, as JSON");
  cmd->footer(
      "Prints one JSON object: rank, world_size, local_rank, local_world_size, node_rank,\n"
      "num_nodes, master_addr, master_port, backend, device, source, job_id, nodes (and host,\n"
      "visible_gpus, device_reason). Run it the way the trainer runs to check a job's layout:\n"
      "  srun trainctl env        trainctl local --nproc 2 -- trainctl env\n"
      "Precedence: RANK/WORLD_SIZE (torchrun) > SLURM_PROCID & co. > a single process; see\n"
      "docs/environment.md. Inconsistent or malformed variables are an error (exit 1).\n");
  auto backend = std::make_shared<std::string>("auto");
  auto pretty = std::make_shared<bool>(false);
  cmd->add_option("--backend", *backend, "process-group backend to check for: auto, gloo or nccl")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}))
      ->capture_default_str();
  cmd->add_flag("--pretty", *pretty, "indent the JSON");
  return {cmd, [backend, pretty]() {
    const train::EnvMap env = train::current_environment();
    const train::DistEnv dist = train::resolve_env(env);
    const train::DeviceChoice device = train::choose_device(dist, env, *backend);
    nlohmann::json out = {
        {"rank", dist.rank},
        {"world_size", dist.world_size},
        {"local_rank", dist.local_rank},
        {"local_world_size", dist.local_world_size},
        {"node_rank", dist.node_rank},
        {"num_nodes", dist.num_nodes},
        {"master_addr", dist.master_addr},
        {"master_port", dist.master_port},
        {"backend", device.backend},
        {"device", device.device},
        {"visible_gpus", device.visible_gpus},
        {"device_reason", device.reason},
        {"source", train::to_string(dist.source)},
        {"job_id", dist.job_id.empty() ? nlohmann::json(nullptr) : nlohmann::json(dist.job_id)},
        {"nodes", dist.nodes},
        {"host", dist.host},
    };
    return print(out.dump(*pretty ? 2 : -1) + "\n");
  }};
}

/// `trainctl local`; `after_dashes` holds the arguments after the first "--" (the program and its
/// arguments), which main() keeps away from CLI11 so that a mistyped flag before it is reported
/// by name rather than as a stray program argument.
Command add_local(CLI::App& app, const std::vector<std::string>& after_dashes) {
  auto* cmd = app.add_subcommand("local", "Start N ranks of a program on this machine, like torchrun --standalone");
  cmd->footer(
      "Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK=0,\n"
      "GROUP_WORLD_SIZE=1, MASTER_ADDR=127.0.0.1 and MASTER_PORT, and stdin from /dev/null.\n"
      "Each line of rank N's stdout/stderr is prefixed with '[rN] ' (unless --no-prefix).\n"
      "SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded to every rank.\n"
      "When a rank fails, the others get SIGTERM (SIGKILL after the grace period) and trainctl\n"
      "exits with that rank's exit code, or 128+N when signal N killed it; 127 when PROGRAM\n"
      "can't be found. Example:\n"
      "  trainctl local --nproc 2 -- ./build/bin/train --epochs 1\n");
  auto options = std::make_shared<train::LocalLaunchOptions>();
  cmd->add_option("-n,--nproc", options->nproc, "number of ranks to start; required")
      ->check(CLI::Range(1, train::kMaxLocalRanks));
  cmd->add_option("--master-port", options->master_port, "MASTER_PORT for the ranks (default: a free port)")
      ->check(CLI::Range(1024, 65535));
  cmd->add_option("--grace-period", options->grace_seconds,
                  "seconds between SIGTERM and SIGKILL when stopping the ranks")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  cmd->add_flag("--no-prefix", "pass the ranks' output through untouched (no '[rN] ' prefix)");
  cmd->add_option("PROGRAM", options->command, "the program and its arguments, after '--'; required");
  return {cmd, [options, cmd, &after_dashes]() {
    options->command.insert(options->command.end(), after_dashes.begin(), after_dashes.end());
    // Checked here rather than with required(), so that a mistyped flag is reported as such.
    if (cmd->count("--nproc") == 0) {
      throw train::ConfigError("--nproc: expected the number of ranks to start, found none given.",
                               "e.g. trainctl local --nproc 2 -- ./build/bin/train.");
    }
    if (options->command.empty()) {
      throw train::ConfigError("PROGRAM: expected a program to run after '--', found none.",
                               "e.g. trainctl local --nproc 2 -- ./build/bin/train --epochs 1.");
    }
    options->prefix_output = cmd->count("--no-prefix") == 0;
    try {
      train::find_program(options->command.front(), train::current_environment());
    } catch (const train::ConfigError& e) {
      std::cerr << "trainctl local: " << e.what() << std::endl;
      return train::kExitProgramNotFound;
    }
    return train::launch_local(*options);
  }};
}

/// Seconds from now until a SLURM timestamp such as 2026-11-26T02:42:19 (local time); 0 when it
/// doesn't parse or lies in the past.
long seconds_until(const std::string& when) {
  std::tm tm{};
  if (::strptime(when.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) return 0;
  tm.tm_isdst = -1;
  const long diff = static_cast<long>(std::mktime(&tm) - std::time(nullptr));
  return diff > 0 ? diff : 0;
}

/// `trainctl sbatch`; `before_dashes` and `after_dashes` hold the command line around the first
/// "--" (the train arguments come after it), kept by main() so the script can record its command.
Command add_sbatch(CLI::App& app, const std::vector<std::string>& before_dashes,
                   const std::vector<std::string>& after_dashes) {
  auto* cmd = app.add_subcommand("sbatch", "Generate a batch script that trains with srun on a SLURM allocation");
  cmd->footer(
      "Prints the script (or writes --out FILE); --test-only asks sbatch when the job would start,\n"
      "--submit submits it and prints the job id. Arguments after '--' go to train, and so do the\n"
      "script's own arguments at submission (sbatch SCRIPT --epochs 1; train keeps the last copy).\n"
      "The request is checked first (counts, --time format, GPUs vs tasks, --signal), then against\n"
      "the partition's nodes, CPUs, memory, MaxTime and GPUs when sinfo answers. Examples:\n"
      "  trainctl sbatch --nodes 2 --ntasks-per-node 1 --time 1:00:00 -- --epochs 1\n"
      "  trainctl sbatch --partition gpu --gres gpu:4 --cpus-per-task 8 --setup 'module load cuda' --submit\n"
      "  trainctl sbatch --array-chain 3 --time 1-00:00:00 --stage-data data.tar --stage-subdir fm --test-only\n"
      "See docs/slurm.md.\n");
  auto o = std::make_shared<train::SbatchOptions>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("--nodes", o->nodes, "nodes (default 1)")
      ->type_name("N");
  cmd->add_option("--ntasks-per-node", o->ntasks_per_node, "ranks per node (default: the GPUs per node, else 1)")
      ->type_name("N");
  cmd->add_option("--gpus-per-node", o->gpus_per_node, "GPUs per node, [TYPE:]N; one rank per GPU")
      ->type_name("[TYPE:]N");
  cmd->add_option("--cpus-per-task", o->cpus_per_task, "CPU cores per rank")
      ->type_name("N");
  cmd->add_option("--mem", o->mem, "memory per node, N[K|M|G|T]")
      ->type_name("SIZE");
  cmd->add_option("--time", o->time, "time limit: minutes, m:s, h:m:s, d-h, d-h:m, d-h:m:s or INFINITE")
      ->type_name("LIMIT");
  cmd->add_option("--partition", o->partition, "partition (default: the cluster's default)")
      ->type_name("NAME");
  cmd->add_option("--account", o->account, "account to charge")
      ->type_name("NAME");
  cmd->add_option("--qos", o->qos, "quality of service")
      ->type_name("NAME");
  cmd->add_option("--gres", o->gres, "generic resources per node: gpu:N, gpu:TYPE:N, shard:N")
      ->type_name("SPEC");
  cmd->add_option("--constraint", o->constraint, "node features, e.g. v100")
      ->type_name("FEATURES");
  cmd->add_option("--job-name", o->job_name, std::string("job name (default ") + train::kDefaultJobName + ")")
      ->type_name("NAME");
  cmd->add_option("--output", o->output, std::string("log file pattern (default ") + train::kDefaultOutput + ")")
      ->type_name("PATTERN");
  cmd->add_option("--array-chain", o->array_chain, "N chunks run one after another (--array=1-N%1), each resuming from the last checkpoint")
      ->type_name("N");
  cmd->add_option("--signal", o->signal, std::string("[R:]SIG[@SECONDS] sent to the tasks before the time limit, or none (default ") +
                                             train::kDefaultSignal + ")")
      ->type_name("SPEC");
  cmd->add_option("--setup", o->setup, "a shell line run before srun, e.g. 'module load cuda' (repeatable)")
      ->allow_extra_args(false)
      ->type_name("LINE");
  cmd->add_option("--container", o->container, "run the tasks in `apptainer exec --nv IMAGE`")
      ->type_name("IMAGE");
  cmd->add_option("--stage-data", o->stage_data, "tar archive extracted onto every node ($SLURM_TMPDIR) and given to train as --data")
      ->type_name("ARCHIVE");
  cmd->add_option("--stage-subdir", o->stage_subdir, "the folder inside the --stage-data archive that holds the data files")
      ->type_name("DIR");
  cmd->add_option("--out", *out, "write the script to FILE (mode 755) instead of stdout")
      ->type_name("FILE");
  cmd->add_flag("--submit", "submit the script with sbatch and print the job id");
  cmd->add_flag("--test-only", "ask sbatch --test-only when the job would start (nothing is submitted)");
  cmd->add_flag("--no-cluster-checks", "don't compare the request with the partitions sinfo reports");
  cmd->add_option("TRAIN_ARGS", o->train_args, "arguments for train, after '--'");
  return {cmd, [o, out, cmd, &before_dashes, &after_dashes]() {
    o->train_args.insert(o->train_args.end(), after_dashes.begin(), after_dashes.end());
    const bool submit = cmd->count("--submit") > 0;
    const bool test_only = cmd->count("--test-only") > 0;
    if (submit && test_only) {
      throw train::ConfigError("--submit with --test-only: expected one of them, found both.",
                               "use --test-only to see when the job would start, then --submit.");
    }
    // The header records the command without where the script went (--out) or what was done with it.
    o->command.clear();
    for (std::size_t i = 0; i < before_dashes.size(); ++i) {
      const std::string& word = before_dashes[i];
      if (word == "--submit" || word == "--test-only" || word.rfind("--out=", 0) == 0) continue;
      if (word == "--out") {
        ++i;
        continue;
      }
      o->command.push_back(word);
    }
    if (!o->train_args.empty()) {
      o->command.push_back("--");
      o->command.insert(o->command.end(), o->train_args.begin(), o->train_args.end());
    }
    const train::SbatchPlan plan = train::plan_sbatch(*o);
    std::vector<std::string> warnings = plan.warnings;
    if (cmd->count("--no-cluster-checks") == 0) {
      if (const auto partitions = train::query_partitions()) {
        for (std::string& w : train::check_against_partitions(*o, plan, *partitions)) warnings.push_back(std::move(w));
      }
    }
    for (const std::string& w : warnings) std::cerr << "trainctl sbatch: warning: " << w << std::endl;
    const std::string script = train::render_sbatch_script(*o, plan);
    if (!out->empty()) {
      std::ofstream file(*out, std::ios::binary | std::ios::trunc);
      file << script;
      file.close();
      if (!file || ::chmod(out->c_str(), 0755) != 0) {
        throw train::ConfigError("--out " + *out + ": expected a file to write the script to, found it unwritable.",
                                 "check that its folder exists and is writable.");
      }
    } else if (!submit && !test_only) {
      return print(script);
    }
    if (test_only) {
      const train::TestOnlyResult r = train::sbatch_test_only(script);
      std::string text = "sbatch --test-only: the job would start at " + r.start_time + " on " + r.nodes +
                         " in partition " + r.partition + " (" + r.processors + " processors)";
      const long wait = seconds_until(r.start_time);
      if (wait > 60) {
        text += ", in about " + std::to_string(wait / 3600) + " h " + std::to_string(wait / 60 % 60) +
                " min. Hint: squeue --start -p " + r.partition + " shows the jobs ahead; a shorter --time or "
                "fewer nodes can start sooner (backfill)";
      } else {
        text += ", now";
      }
      return print(text + ".\n");
    }
    if (submit) {
      const std::string id = train::sbatch_submit(script, plan.output);
      std::string log = plan.output;
      for (const auto& [pattern, value] : std::vector<std::pair<std::string, std::string>>{
               {"%x", plan.job_name}, {"%j", id}, {"%A", id}, {"%a", "*"}}) {
        for (std::size_t at = log.find(pattern); at != std::string::npos; at = log.find(pattern, at + value.size())) {
          log.replace(at, pattern.size(), value);
        }
      }
      std::cerr << "trainctl sbatch: submitted job " << id << " (" << plan.job_name << "), log " << log
                << "; follow it with squeue -j " << id << std::endl;
      return print(id + "\n");
    }
    return 0;
  }};
}

/// `trainctl preflight`; `after_dashes` holds train's arguments (after the first "--").
Command add_preflight(CLI::App& app, const std::vector<std::string>& after_dashes) {
  auto* cmd = app.add_subcommand("preflight", "Check this node before training: data, GPUs, tasks per GPU");
  cmd->footer(
      "Run as one task per node before the training step (the generated sbatch scripts do):\n"
      "  srun --ntasks=$SLURM_JOB_NUM_NODES --ntasks-per-node=1 trainctl preflight \\\n"
      "       --tasks-per-node \"$SLURM_TASKS_PER_NODE\" -- TRAIN ARGS\n"
      "Checks that the data folder train will read (--data, else train's args) holds readable IDX or\n"
      "CIFAR-10 files; that CUDA sees the GPUs the job asked for (--expect-gpus, else\n"
      "SLURM_GPUS_ON_NODE); that there is one task per GPU. Prints one line per node; a failed check\n"
      "prints its error and a hint on stderr and exits 1.\n");
  auto o = std::make_shared<train::PreflightOptions>();
  cmd->add_option("--data", o->data_dir, "the data folder (default: train's --data, else its default folder)")
      ->type_name("DIR");
  cmd->add_option("--expect-gpus", o->expect_gpus, "GPUs the job asked for per node (default: SLURM_GPUS_ON_NODE, else 0)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--tasks-per-node", o->tasks_per_node,
                  "the job's tasks per node, SLURM notation like 2(x2) (default: SLURM_TASKS_PER_NODE)")
      ->type_name("TPN");
  cmd->add_option("TRAIN_ARGS", o->train_args, "train's arguments, after '--'");
  return {cmd, [o, &after_dashes]() {
    o->train_args.insert(o->train_args.end(), after_dashes.begin(), after_dashes.end());
    const train::PreflightReport report = train::run_preflight(*o, train::current_environment());
    const std::string who = "preflight " + report.host;
    for (const std::string& w : report.warnings) std::cerr << who << ": warning: " << w << std::endl;
    for (const std::string& e : report.errors) std::cerr << who << ": FAILED: " << e << std::endl;
    if (!report.ok()) return kExitError;
    std::string line = who + ": ok";
    for (std::size_t i = 0; i < report.passed.size(); ++i) line += (i == 0 ? " (" : "; ") + report.passed[i];
    return print(line + (report.passed.empty() ? "" : ")") + "\n");
  }};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "trainctl: launcher tools for libtrain. Expands SLURM host lists, shows the distributed\n"
      "environment a rank resolves, starts ranks on one machine, generates and submits sbatch\n"
      "scripts, and checks a job's nodes before training.\n"
      "Run 'trainctl SUBCOMMAND --help' for a subcommand's options.",
      "trainctl"};
  app.set_version_flag("--version", "trainctl " TRAIN_VERSION);
  app.require_subcommand(1);

  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::string> after_dashes;
  if (!args.empty() && (args.front() == "local" || args.front() == "sbatch" || args.front() == "preflight")) {
    const auto dashes = std::find(args.begin(), args.end(), "--");
    if (dashes != args.end()) {
      after_dashes.assign(dashes + 1, args.end());
      args.erase(dashes, args.end());
    }
  }
  const std::vector<std::string> before_dashes = args;
  const std::vector<Command> commands = {add_hostnames(app), add_hostlist(app), add_env(app),
                                         add_local(app, after_dashes), add_sbatch(app, before_dashes, after_dashes),
                                         add_preflight(app, after_dashes)};

  if (argc >= 2 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const auto& command : commands) {
      known = known || command.first->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + command.first->get_name();
    }
    if (!known) {
      std::cerr << "trainctl: unknown subcommand '" << argv[1] << "': expected one of " << names
                << ".\nHint: run 'trainctl --help' for the usage." << std::endl;
      return kExitUsage;
    }
  }

  try {
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last-first
    app.parse(args);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    std::string where = "trainctl";
    for (const CLI::App* sub : app.get_subcommands()) where += " " + sub->get_name();
    std::cerr << where << ": " << e.what() << "\nHint: run '" << where << " --help' for the usage"
              << (where == "trainctl local" ? "; put PROGRAM and its arguments after '--'." : ".")
              << std::endl;
    return kExitUsage;
  }

  for (const auto& [sub, action] : commands) {
    if (!sub->parsed()) continue;
    try {
      return action();
    } catch (const train::Error& e) {
      std::cerr << "trainctl " << sub->get_name() << ": " << e.what() << std::endl;
      return kExitError;
    } catch (const std::exception& e) {
      std::cerr << "trainctl " << sub->get_name() << ": unexpected error: " << e.what() << std::endl;
      return kExitError;
    }
  }
  return kExitError;  // unreachable: require_subcommand(1)
}
