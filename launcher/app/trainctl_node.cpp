// trainctl's subcommands for this machine or node: hostnames, hostlist, env, local and preflight.
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "train/base/error.h"
#include "train/base/device.h"
#include "train/base/env.h"
#include "train/base/hostlist.h"
#include "train/launcher/local_launch.h"
#include "train/launcher/preflight.h"
#include "train/launcher/restart.h"
#include "trainctl.h"

namespace trainctl {

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
    const auto interface = env.find("TRAIN_INTERFACE");  // train's --interface default
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

Command add_local(CLI::App& app, const std::vector<std::string>& after_dashes) {
  auto* cmd = add_command(app, "local", "Start N ranks of a program on this machine, like torchrun --standalone",
      "Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK=0,\n"
      "GROUP_WORLD_SIZE=1, MASTER_ADDR=127.0.0.1 and MASTER_PORT, and stdin from /dev/null.\n"
      "Each line of rank N's stdout/stderr is prefixed with '[rN] ' (unless --no-prefix).\n"
      "SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded to every rank.\n"
      "When a rank fails, the others get SIGTERM (SIGKILL after the grace period) and trainctl\n"
      "exits with that rank's exit code, or 128+N when signal N killed it; 127 when PROGRAM\n"
      "can't be found. With --max-restarts N, a launch that lost a rank (killed by a signal, or\n"
      "train's exit 79 for a dead or stalled rank) is started again, at most N times, as trainctl run\n"
      "does in a SLURM allocation (one line per restart); the program resumes with --resume auto\n"
      "from the newest snapshot in this machine's memory or checkpoint. Examples:\n"
      "  trainctl local --nproc 2 -- ./build/bin/train --epochs 1\n"
      "  trainctl local --nproc 2 --max-restarts 3 -- ./build/bin/train --checkpoint-dir ck --resume auto\n");
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
  cmd->add_option("--max-restarts", options->max_restarts,
                  "launch the ranks again after a lost or stalled rank, at most this often")
      ->check(CLI::Range(0, train::kMaxLocalRestarts))
      ->capture_default_str();
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

Command add_run(CLI::App& app, const std::vector<std::string>& after_dashes) {
  auto* cmd = add_command(app, "run", "Inside a SLURM allocation: srun the training step, and launch it again after a lost rank or node",
      "Run it in a batch script in place of srun: it starts the step with srun --kill-on-bad-exit=1\n"
      "over the job's tasks. When the step ends with a lost rank or node (a task killed by a signal,\n"
      "a node srun lost, train's exit 79 for a dead or stalled rank, a broken connection), it\n"
      "launches it again in the same allocation, without a trip through the queue; train resumes\n"
      "with --resume auto. A node the health check names bad (exit 69), or one SLURM reports DOWN,\n"
      "is left out (srun --exclude, fewer nodes). Not restarted: exit 0, 75 (preempted: the script\n"
      "requeues the job), 1, 2 and 65 (an error a new launch would meet again), SIGTERM/SIGINT\n"
      "(scancel), and the same failure at the same step twice in a row. One line per restart (cause,\n"
      "nodes, exit code, the step resumed from, the seconds it took), kept in the run record that\n"
      "trainctl status reads. The step sees TRAIN_RESTART_COUNT (0, then 1, 2, ...). Exits with the\n"
      "last launch's first failing task's exit code as srun names it (else srun's status). Ask\n"
      "sbatch for --no-kill so that a lost node leaves the allocation alive (trainctl sbatch's\n"
      "scripts do). Example, in a batch script:\n"
      "  trainctl run --max-restarts 3 -- build/bin/train --checkpoint-dir ckpt --resume auto\n");
  auto request = std::make_shared<train::RunRequest>();
  cmd->add_option("--max-restarts", request->max_restarts, "how often the step is launched again at most")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--srun-arg", request->srun_args,
                  "an option for srun itself, e.g. --srun-arg=--output=logs/x-%t.out (repeat it for more)")
      ->type_name("OPT")
      ->allow_extra_args(false);
  cmd->add_option("PROGRAM", request->program, "the training program and its arguments, after '--'; required");
  return {cmd, [request, &after_dashes]() {
    request->program.insert(request->program.end(), after_dashes.begin(), after_dashes.end());
    return train::run_step(*request);
  }};
}

Command add_preflight(CLI::App& app, const std::vector<std::string>& after_dashes) {
  auto* cmd = add_command(app, "preflight", "Check this node before training: data, GPUs, tasks per GPU",
      "Run as one task per node before the training step (the generated sbatch scripts do):\n"
      "  srun --ntasks=$SLURM_JOB_NUM_NODES --ntasks-per-node=1 trainctl preflight \\\n"
      "       --tasks-per-node \"$SLURM_TASKS_PER_NODE\" -- TRAIN ARGS\n"
      "Checks that the data folder train will read (--data, else train's args) holds readable IDX or\n"
      "CIFAR-10 files, or, for --dataset imagefolder and webdataset, that every image is whole (its\n"
      "header and end; --decode-images decodes each) and the bad ones named; that CUDA sees the GPUs the job asked for (--expect-gpus, else\n"
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
  cmd->add_flag("--decode-images", o->decode_images,
               "imagefolder, webdataset: decode every image whole (slower; finds damage inside the compressed "
               "data too), not just its header and end");
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

}  // namespace trainctl
