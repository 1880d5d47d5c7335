// trainctl: the launcher's command line (no LibTorch). One function per subcommand below adds its
// options and returns the action to run: hostnames, hostlist, env, local, sbatch, preflight, and the
// work around a job: sweep, sweep-report, plot, resources, interactive, status, logs, cancel.
// The logic behind them lives in the launcher library, where its tests reach it (sbatch.h,
// job_requests.h, plotting.h, jobs.h, ...): this file parses the flags, calls it, and prints.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "train/error.h"
#include "train/files.h"
#include "train/launcher/device.h"
#include "train/launcher/env.h"
#include "train/launcher/hostlist.h"
#include "train/launcher/job_requests.h"
#include "train/launcher/jobs.h"
#include "train/launcher/local_launch.h"
#include "train/launcher/plotting.h"
#include "train/launcher/preflight.h"
#include "train/launcher/resources.h"
#include "train/launcher/sbatch.h"
#include "train/launcher/sweep.h"
#include "train/subprocess.h"

#ifndef TRAIN_VERSION
#define TRAIN_VERSION "unknown"
#endif
#ifndef TRAIN_SOURCE_DIR
#define TRAIN_SOURCE_DIR "."
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

/// Writes a file in one go and gives it `mode`; when it can't, throws "WHAT PATH: expected EXPECTED,
/// found it unwritable." (`what` names the option the path came from).
void write_file(const std::string& path, const std::string& text, const std::string& what, mode_t mode = 0644,
                const std::string& expected = "a file to write") {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
  file.close();
  if (!file || ::chmod(path.c_str(), mode) != 0) {
    throw train::ConfigError(what + " " + path + ": expected " + expected + ", found it unwritable.",
                             "check that its folder exists and is writable.");
  }
}

/// Adds subcommand `name`: `description` is its line in trainctl --help, `footer` ends its own --help.
CLI::App* add_command(CLI::App& app, const std::string& name, const std::string& description,
                      const std::string& footer) {
  auto* cmd = app.add_subcommand(name, description);
  cmd->footer(footer);
  return cmd;
}

/// Throws, for a required argument left out, "NAME: expected WHAT, found none given." with `hint`.
/// Checked in the actions rather than with CLI11's required(), so that a mistyped flag is reported as such.
void require_given(bool given, const std::string& name, const std::string& what, const std::string& hint) {
  if (!given) throw train::ConfigError(name + ": expected " + what + ", found none given.", hint);
}

Command add_hostnames(CLI::App& app) {
  auto* cmd = add_command(app, "hostnames", "Expand a SLURM hostlist expression, one host per line",
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
  auto* cmd = add_command(app, "hostlist", "Compress host names into one SLURM hostlist expression",
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
  auto* cmd = add_command(app, "env", "Print the distributed environment this process resolves, as JSON",
      "Prints one JSON object: rank, world_size, local_rank, local_world_size, node_rank,\n"
      "num_nodes, master_addr, master_port, backend, device, source, job_id, nodes (and host,\n"
      "visible_gpus, device_reason, and interface: TRAIN_INTERFACE, or null). Run it the way the\n"
      "trainer runs to check a job's layout:\n"
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
    const auto interface = env.find("TRAIN_INTERFACE");  // train's --interface default (issue 24)
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
        {"interface", interface == env.end() || interface->second.empty() ? nlohmann::json(nullptr)
                                                                          : nlohmann::json(interface->second)},
    };
    return print(out.dump(*pretty ? 2 : -1) + "\n");
  }};
}

/// `trainctl local`; `after_dashes` holds the arguments after the first "--" (the program and its
/// arguments), which main() keeps away from CLI11 so that a mistyped flag before it is reported
/// by name rather than as a stray program argument.
Command add_local(CLI::App& app, const std::vector<std::string>& after_dashes) {
  auto* cmd = add_command(app, "local", "Start N ranks of a program on this machine, like torchrun --standalone",
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
    require_given(cmd->count("--nproc") > 0, "--nproc", "the number of ranks to start",
                  "e.g. trainctl local --nproc 2 -- ./build/bin/train.");
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

/// A text option of a job request: its flag, the field of SbatchOptions it sets, its --help line and
/// the name its value gets there.
struct JobOption {
  const char* flag;
  std::string train::SbatchOptions::*field;
  std::string help;
  const char* type_name;
};

/// Adds the options of `table` to `cmd` in order, each setting its field of `o`.
void add_job_options(CLI::App* cmd, train::SbatchOptions& o, const std::vector<JobOption>& table) {
  for (const JobOption& opt : table) cmd->add_option(opt.flag, o.*opt.field, opt.help)->type_name(opt.type_name);
}

/// The options that give a job its shape (nodes, tasks, CPUs, memory, GPUs, time, where), shared by
/// sbatch, sweep, interactive and resources.
void add_shape_options(CLI::App* cmd, train::SbatchOptions& o) {
  using O = train::SbatchOptions;
  add_job_options(cmd, o, {
      {"--nodes", &O::nodes, "nodes (default 1)", "N"},
      {"--ntasks-per-node", &O::ntasks_per_node, "ranks per node (default: the GPUs per node, else 1)", "N"},
      {"--ntasks", &O::ntasks, "ranks in all, spread over the nodes (instead of --ntasks-per-node)", "N"},
      {"--gpus-per-node", &O::gpus_per_node, "GPUs per node, [TYPE:]N; one rank per GPU", "[TYPE:]N"},
      {"--cpus-per-task", &O::cpus_per_task, "CPU cores per rank", "N"},
      {"--mem", &O::mem, "memory per node, N[K|M|G|T]", "SIZE"},
      {"--time", &O::time, "time limit: minutes, m:s, h:m:s, d-h, d-h:m, d-h:m:s or INFINITE", "LIMIT"},
      {"--partition", &O::partition, "partition (default: the cluster's default)", "NAME"},
      {"--account", &O::account, "account to charge", "NAME"},
      {"--qos", &O::qos, "quality of service", "NAME"},
      {"--gres", &O::gres, "generic resources per node: gpu:N, gpu:TYPE:N, shard:N", "SPEC"},
      {"--constraint", &O::constraint, "node features, e.g. v100", "FEATURES"},
      {"--job-name", &O::job_name, std::string("job name (default ") + train::kDefaultJobName + ")", "NAME"},
  });
}

/// issue 24: the nodes' health check and the network interface, which the script passes on to train
/// (checked by train::check_health_options); shared by sbatch and sweep through add_batch_options.
void add_health_options(CLI::App* cmd, train::SbatchOptions& o) {
  cmd->add_flag("--health-check", o.health_check,
                "train measures each node's GEMM throughput and all-reduce bandwidth before training and stops "
                "(exit 69) naming the nodes below --health-min-fraction of the others' median");
  cmd->add_option_function<std::string>("--health-min-fraction", [&o](const std::string& v) { o.health_min_fraction = v; },
                                        "with --health-check: a node is bad below F x the others' median GEMM "
                                        "throughput, F in (0, 1] (train's default 0.5)")
      ->type_name("F");
  cmd->add_flag("--health-warn-only", o.health_warn_only, "with --health-check: name the bad nodes, then train anyway");
  cmd->add_flag("--exclude-bad-nodes", o.exclude_bad_nodes,
                "with --health-check: train requeues the job without the bad nodes (at most 3 times; the script "
                "keeps #SBATCH --requeue)");
  cmd->add_option_function<std::string>("--interface", [&o](const std::string& v) { o.interface = v; },
                                        "network interface for train's Gloo, NCCL and rendezvous store, e.g. ib0: "
                                        "exported as TRAIN_INTERFACE. Only the name's syntax is checked here, not "
                                        "that it exists: the compute nodes must have it (train checks it there)")
      ->type_name("IF");
}

/// The options of a generated batch script beyond its shape (logs, signal, environment, data, what
/// runs), shared by sbatch and sweep.
void add_batch_options(CLI::App* cmd, train::SbatchOptions& o) {
  using O = train::SbatchOptions;
  add_job_options(cmd, o, {
      {"--output", &O::output, std::string("log file pattern (default ") + train::kDefaultOutput + ")", "PATTERN"},
      {"--error", &O::error, "stderr's own file pattern, e.g. logs/err%j.log (default: in the --output log)", "PATTERN"},
  });
  cmd->add_flag("--per-rank-logs", o.per_rank_logs,
                "one log per rank: srun --output=LOG-%t.EXT (and --error), next to the job's log");
  add_job_options(cmd, o, {
      {"--signal", &O::signal, std::string("[R:]SIG[@SECONDS] sent to the tasks before the time limit, or none (default ") +
                                   train::kDefaultSignal + ")", "SPEC"},
  });
  cmd->add_option("--setup", o.setup, "a shell line run before srun, e.g. 'module load cuda' (repeatable)")
      ->allow_extra_args(false)
      ->type_name("LINE");
  add_job_options(cmd, o, {
      {"--container", &O::container, "run the tasks in `apptainer exec --nv IMAGE`", "IMAGE"},
      {"--stage-data", &O::stage_data, "tar archive extracted onto every node ($SLURM_TMPDIR) and given to train as --data",
       "ARCHIVE"},
      {"--stage-subdir", &O::stage_subdir, "the folder inside the --stage-data archive that holds the data files", "DIR"},
      {"--program", &O::program, "run PATH in the tasks instead of train (default: $TRAIN_BIN, else build/bin/train)", "PATH"},
      {"--tensorboard", &O::tensorboard,
       "train writes TensorBoard event files into a folder per job under ROOT (ROOT/NAME-JOBID), where a requeued "
       "run goes on; trainctl status shows it", "ROOT"},
  });
  // A callback rather than CLI11's "!--no-preflight" negation, which --help shows as `--no-preflight{false}`.
  cmd->add_flag_callback("--no-preflight", [&o] { o.preflight = false; },
                         "skip the `trainctl preflight` step before training");
  add_health_options(cmd, o);
}

/// The flag that turns plan_job()'s partition checks off.
constexpr char kNoClusterChecks[] = "--no-cluster-checks";

/// Adds --no-cluster-checks to a subcommand whose action calls plan_job().
void add_no_cluster_checks_flag(CLI::App* cmd) {
  cmd->add_flag(kNoClusterChecks, "don't compare the request with the partitions sinfo reports");
}

/// Plans the job `cmd` (sbatch, sweep or interactive) asks for and prints its warnings on stderr as
/// "trainctl SUB: warning: ...": the plan's own when `with_plan_warnings`, then the partition
/// checks' (unless --no-cluster-checks, or sinfo doesn't answer).
train::SbatchPlan plan_job(const train::SbatchOptions& o, const CLI::App& cmd, bool with_plan_warnings) {
  const train::SbatchPlan plan = train::plan_sbatch(o);
  std::vector<std::string> warnings;
  if (with_plan_warnings) warnings = plan.warnings;
  if (cmd.count(kNoClusterChecks) == 0) {
    if (const auto partitions = train::query_partitions()) {
      for (std::string& w : train::check_against_partitions(o, plan, *partitions)) warnings.push_back(std::move(w));
    }
  }
  for (const std::string& w : warnings) std::cerr << "trainctl " << cmd.get_name() << ": warning: " << w << std::endl;
  return plan;
}

/// `trainctl sbatch`; `before_dashes` and `after_dashes` hold the command line around the first
/// "--" (the train arguments come after it), kept by main() so the script can record its command.
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

/// `trainctl preflight`; `after_dashes` holds train's arguments (after the first "--").
Command add_preflight(CLI::App& app, const std::vector<std::string>& after_dashes) {
  auto* cmd = add_command(app, "preflight", "Check this node before training: data, GPUs, tasks per GPU",
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

/// The folder trainctl runs in.
std::string current_folder() {
  char buf[4096];
  if (::getcwd(buf, sizeof(buf)) == nullptr) {
    throw train::ConfigError("the current folder: expected to read its path, found getcwd failing.",
                             "run trainctl from a folder that still exists.");
  }
  return buf;
}

std::string user_name() {
  const passwd* pw = ::getpwuid(::getuid());
  return pw != nullptr ? pw->pw_name : "";
}

/// `trainctl sweep`'s action once its options are parsed (train's arguments included): checks the
/// grid, writes the script, the index and the run folders under `dir`, and with --submit submits.
int run_sweep(train::SbatchOptions& o, const std::vector<std::string>& params, const std::string& dir, int throttle,
              const CLI::App& cmd, const std::vector<std::string>& before_dashes) {
  const train::SweepPlan sweep = train::plan_sweep(o, params, dir, throttle, current_folder());
  o.command = train::recorded_command(before_dashes, o.train_args);
  const train::SbatchPlan plan = plan_job(o, cmd, /*with_plan_warnings=*/true);
  const std::string script = train::render_sbatch_script(o, plan);

  train::make_sweep_task_dirs(sweep, dir);
  train::SweepIndex index = train::sweep_index(sweep, plan.job_name, o.train_args);
  write_file(sweep.script_path, script, "--output-dir", 0755);
  write_file(sweep.index_path, train::render_sweep_index(index), "--output-dir");
  if (cmd.count("--submit") == 0) return print(train::render_sweep_written(sweep));
  const std::string id = train::sbatch_submit(script, plan.output);
  index.job_id = id;
  write_file(sweep.index_path, train::render_sweep_index(index), "--output-dir");
  std::cerr << "trainctl sweep: submitted array job " << id << " (" << sweep.grid.size() << " tasks, at most "
            << sweep.at_once << " at once), run folders " << sweep.root << "/task-N; follow it with trainctl status "
            << id << ", then trainctl sweep-report " << dir << std::endl;
  return print(id + "\n");
}

/// `trainctl sweep`; `before_dashes` and `after_dashes` as for sbatch.
Command add_sweep(CLI::App& app, const std::vector<std::string>& before_dashes,
                  const std::vector<std::string>& after_dashes) {
  auto* cmd = add_command(app, "sweep", "Run a hyperparameter grid as one SLURM job array, one task per combination",
      "Writes DIR/sweep.sh (the batch script, as trainctl sbatch makes it, with #SBATCH --array=0-N%T),\n"
      "DIR/sweep.json (the index: task id -> parameters) and one run folder DIR/task-ID per task, which\n"
      "gets the task's log (train.out), checkpoints and metrics.jsonl. Task ID trains with its\n"
      "combination appended as --NAME VALUE. --submit submits the array and prints its job id.\n"
      "Example:\n"
      "  trainctl sweep --param lr=0.1,0.5,1.0 --param batch-size=64,128 --throttle 2 --nodes 1 \\\n"
      "      --output-dir sweeps/lr-bs --submit -- --epochs 2\n"
      "Then: trainctl status ARRAYID, trainctl sweep-report sweeps/lr-bs. See docs/workflow.md.\n");
  auto o = std::make_shared<train::SbatchOptions>();
  auto params = std::make_shared<std::vector<std::string>>();
  auto dir = std::make_shared<std::string>();
  auto throttle = std::make_shared<int>(0);
  cmd->add_option("--param", *params, "NAME=V1,V2,...: train's --NAME takes each value (repeatable; the grid is every combination)")
      ->allow_extra_args(false)
      ->type_name("NAME=VALUES");
  cmd->add_option("--output-dir", *dir, "the sweep's folder: script, index and one run folder per task; required")
      ->type_name("DIR");
  cmd->add_option("--throttle", *throttle, "at most N tasks at once (the array's %N; default: all)")
      ->check(CLI::Range(1, train::kMaxSweepTasks))
      ->type_name("N");
  add_shape_options(cmd, *o);
  add_batch_options(cmd, *o);
  cmd->add_flag("--submit", "submit the array with sbatch and print its job id");
  add_no_cluster_checks_flag(cmd);
  cmd->add_option("TRAIN_ARGS", o->train_args, "arguments every task gives train, after '--'");
  return {cmd, [o, params, dir, throttle, cmd, &before_dashes, &after_dashes]() {
    o->train_args.insert(o->train_args.end(), after_dashes.begin(), after_dashes.end());
    return run_sweep(*o, *params, *dir, *throttle, *cmd, before_dashes);
  }};
}

/// TRAIN_PYTHON's value: the Python the user chose for plots, "" when unset.
std::string train_python() {
  const char* p = std::getenv("TRAIN_PYTHON");
  return p != nullptr ? p : "";
}

/// The repository's scripts/ folder: next to the build tree trainctl lives in, else the source tree it
/// was built from.
std::string scripts_folder() {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  return train::scripts_folder(n > 0 ? std::string(exe, static_cast<std::size_t>(n)) : std::string(), TRAIN_SOURCE_DIR);
}

Command add_sweep_report(CLI::App& app) {
  auto* cmd = add_command(app, "sweep-report", "Print a table (and a PNG) of a sweep's final metrics per combination",
      "Reads DIR/sweep.json and each task's DIR/task-ID/metrics.jsonl, prints one row per task: its\n"
      "parameters, status (done, epoch N while running, no metrics) and the final test_accuracy,\n"
      "test_loss, train_loss, epochs and images_per_sec. Writes DIR/sweep-report.csv, and\n"
      "DIR/sweep-report.png with matplotlib or gnuplot when one is available. Example:\n"
      "  trainctl sweep-report sweeps/lr-bs\n");
  auto dir = std::make_shared<std::string>();
  auto metric = std::make_shared<std::string>("test_accuracy");
  auto no_png = std::make_shared<bool>(false);
  cmd->add_option("DIR", *dir, "the sweep's --output-dir; required")->type_name("DIR");
  cmd->add_option("--metric", *metric, "the metric the PNG plots")->capture_default_str();
  cmd->add_flag("--no-png", *no_png, "print the table only");
  return {cmd, [dir, metric, no_png]() {
    require_given(!dir->empty(), "DIR", "a sweep's --output-dir", "e.g. trainctl sweep-report sweeps/lr-bs.");
    const auto [index, results] = train::read_sweep(*dir);
    int rc = print(train::render_sweep_table(index, results));
    if (rc != 0) return rc;
    const std::string csv = train::files::join(*dir, "sweep-report.csv");
    write_file(csv, train::render_sweep_csv(index, results), "sweep-report");
    if (!*no_png) {
      std::cerr << "trainctl sweep-report: "
                << train::draw_sweep_png(csv, train::files::join(*dir, "sweep-report.png"), *metric, index, results,
                                         scripts_folder(), train_python())
                << std::endl;
    }
    return 0;
  }};
}

Command add_plot(CLI::App& app) {
  auto* cmd = add_command(app, "plot", "Draw training curves from train --metrics files into a PNG, one line per file",
      "Reads the JSON lines `train --metrics FILE` writes and draws three panels: loss per epoch (train\n"
      "and test), test accuracy per epoch, and images/s per logged step, one line per file so runs\n"
      "compare. Needs Python with matplotlib (TRAIN_PYTHON, else the repository's .venv, then python3).\n"
      "Example:\n"
      "  trainctl plot run-a/metrics.jsonl run-b/metrics.jsonl -o curves.png\n");
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto width = std::make_shared<int>(1200);
  auto height = std::make_shared<int>(400);
  cmd->add_option("METRICS", *inputs, "metrics files (train --metrics), one or more")->type_name("FILE...");
  cmd->add_option("-o,--output", *out, "the PNG to write; required")->type_name("PNG");
  cmd->add_option("--width", *width, "width in pixels")->check(CLI::Range(200, 8000))->capture_default_str();
  cmd->add_option("--height", *height, "height in pixels")->check(CLI::Range(150, 8000))->capture_default_str();
  return {cmd, [inputs, out, width, height]() {
    const std::string example = "e.g. trainctl plot metrics.jsonl -o curves.png.";
    require_given(!inputs->empty(), "METRICS", "one or more files written by train --metrics", example);
    require_given(!out->empty(), "-o", "the PNG to write", example);
    train::check_metrics_files(*inputs);
    const std::string scripts = scripts_folder();
    const std::string python = train::plot_python(scripts, train_python());
    const std::vector<std::string> argv = train::plot_command(python, scripts, *out, *width, *height, *inputs);
    const train::CommandResult r = train::run_command(argv, "", 120);
    if (!r.started || r.timed_out || r.exit_code != 0) {
      std::string why = r.err;
      while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
      throw train::DataError("trainctl plot: expected " + scripts + "/plot_metrics.py to write " + *out + ", found " +
                                 (r.timed_out ? std::string("it still running after 120 s") :
                                  !r.started  ? std::string("that " + python + " could not start")
                                              : "exit " + std::to_string(r.exit_code) + ": " + why),
                             "check the metrics files named above (one JSON object per line, as train --metrics writes).");
    }
    std::cerr << "trainctl plot: wrote " << *out << " (" << *width << "x" << *height << ", " << inputs->size()
              << (inputs->size() == 1 ? " run)" : " runs)") << std::endl;
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

Command add_status(CLI::App& app) {
  auto* cmd = add_command(app, "status", "Show your jobs of this project: state, reason, elapsed, nodes, restarts, checkpoint, TensorBoard folder, metrics",
      "Without JOBID: your jobs that the controller knows (pending, running, or ended within\n"
      "MinJobAge) submitted from this folder or below it; --all shows all your jobs. With JOBID\n"
      "(an array's id shows all its tasks): that job, also from the job completion log once the\n"
      "controller has forgotten it. For each job: its log, newest checkpoint (ckpt-N.pt in the folder\n"
      "the generated script announced) and last metrics line. Examples:\n"
      "  trainctl status\n"
      "  trainctl status 1234\n");
  auto id = std::make_shared<std::string>();
  auto all = std::make_shared<bool>(false);
  cmd->add_option("JOBID", *id, "a job id, ARRAY_TASK for an array task; default: your jobs of this project");
  cmd->add_flag("--all", *all, "all your jobs, wherever they were submitted from");
  return {cmd, [id, all]() {
    std::vector<train::JobInfo> jobs = train::query_jobs(*id);
    if (id->empty()) jobs = train::jobs_under(jobs, user_name(), *all ? "/" : current_folder());
    if (jobs.empty()) {
      return print("No jobs of " + user_name() + (*all ? "" : " submitted from " + current_folder() + " or below") +
                   " (scontrol show job)." + (*all ? "" : " --all lists all your jobs.") + "\n");
    }
    std::vector<train::JobProgress> progress;
    for (const train::JobInfo& j : jobs) progress.push_back(train::job_progress(j));
    return print(train::render_status(jobs, progress));
  }};
}

Command add_logs(CLI::App& app) {
  auto* cmd = add_command(app, "logs", "Print (or -f follow) a job's log, per rank where it is split",
      "Prints the job's log (StdOut in scontrol show job); where srun wrote one file per rank\n"
      "(trainctl sbatch --per-rank-logs: LOG-R.EXT), their lines follow with an '[rR] ' prefix.\n"
      "--rank R prints rank R's own file, else the log's lines with train's '[rank R/' prefix (train\n"
      "logs info lines from rank 0 only unless told to log every rank). -f follows until the job ends.\n"
      "Examples:\n"
      "  trainctl logs 1234 -f\n"
      "  trainctl logs 1234_2 --rank 1\n");
  auto r = std::make_shared<train::LogsRequest>();
  cmd->add_option("JOBID", r->job_id, "the job (ARRAY_TASK for an array's task); required");
  cmd->add_flag("-f,--follow", r->follow, "keep printing new lines until the job ends");
  cmd->add_option("--rank", r->rank, "only this rank's lines")->check(CLI::Range(0, 1 << 20))->type_name("R");
  cmd->add_flag("--err", r->errors, "the job's --error file instead of its log");
  return {cmd, [r]() {
    require_given(!r->job_id.empty(), "JOBID", "the job whose log to show",
                  "e.g. trainctl logs 1234; trainctl status lists your jobs.");
    return train::show_logs(*r, [](const std::string& text) { return print(text) == 0; });
  }};
}

Command add_cancel(CLI::App& app) {
  auto* cmd = add_command(app, "cancel", "Cancel a job, with --signal SIG to let train checkpoint first",
      "Without --signal: scancel JOBID. With --signal SIG (USR2 for the generated scripts): sends SIG\n"
      "to the job's tasks (scancel --signal, not the batch shell), waits up to --grace seconds until\n"
      "they stop (train saves a checkpoint and exits), then cancels what is left, and prints the\n"
      "newest checkpoint. Example:\n"
      "  trainctl cancel 1234 --signal USR2\n");
  auto r = std::make_shared<train::CancelRequest>();
  cmd->add_option("JOBID", r->job_id, "the job (or array) to cancel; required");
  cmd->add_option("--signal", r->signal, "signal train checkpoints on (USR1, USR2 or TERM by default) to send first")
      ->type_name("SIG");
  cmd->add_option("--grace", r->grace_seconds, "seconds to wait for the tasks to stop after --signal")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  return {cmd, [r]() {
    require_given(!r->job_id.empty(), "JOBID", "the job to cancel",
                  "e.g. trainctl cancel 1234 --signal USR2; trainctl status lists your jobs.");
    return print(train::cancel_job(*r));
  }};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "trainctl: launcher tools for libtrain. Expands SLURM host lists, shows the distributed\n"
      "environment a rank resolves, starts ranks on one machine, generates and submits sbatch\n"
      "scripts, and checks a job's nodes before training. Around the jobs: hyperparameter sweeps as\n"
      "job arrays, training curves (plot), the cluster's resources, interactive sessions, status, logs\n"
      "and cancel.\n"
      "Run 'trainctl SUBCOMMAND --help' for a subcommand's options.",
      "trainctl"};
  app.set_version_flag("--version", "trainctl " TRAIN_VERSION);
  app.require_subcommand(1);

  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::string> after_dashes;
  if (!args.empty() && (args.front() == "local" || args.front() == "sbatch" || args.front() == "preflight" ||
                         args.front() == "sweep")) {
    const auto dashes = std::find(args.begin(), args.end(), "--");
    if (dashes != args.end()) {
      after_dashes.assign(dashes + 1, args.end());
      args.erase(dashes, args.end());
    }
  }
  const std::vector<std::string> before_dashes = args;
  const std::vector<Command> commands = {add_hostnames(app), add_hostlist(app), add_env(app),
                                         add_local(app, after_dashes), add_sbatch(app, before_dashes, after_dashes),
                                         add_preflight(app, after_dashes), add_sweep(app, before_dashes, after_dashes),
                                         add_sweep_report(app), add_plot(app), add_resources(app), add_interactive(app),
                                         add_status(app), add_logs(app), add_cancel(app)};

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
