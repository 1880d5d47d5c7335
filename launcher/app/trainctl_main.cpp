// trainctl: the launcher's command line (no LibTorch). One function per subcommand below adds its
// options and returns the action to run: hostnames, hostlist, env, local. New subcommands (such as
// `sbatch`) register the same way in main().
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "trainctl: launcher tools for libtrain. Expands SLURM host lists, shows the distributed\n"
      "environment a rank resolves, and starts ranks on one machine.\n"
      "Run 'trainctl SUBCOMMAND --help' for a subcommand's options.",
      "trainctl"};
  app.set_version_flag("--version", "trainctl " TRAIN_VERSION);
  app.require_subcommand(1);

  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::string> after_dashes;
  if (!args.empty() && args.front() == "local") {
    const auto dashes = std::find(args.begin(), args.end(), "--");
    if (dashes != args.end()) {
      after_dashes.assign(dashes + 1, args.end());
      args.erase(dashes, args.end());
    }
  }
  const std::vector<Command> commands = {add_hostnames(app), add_hostlist(app), add_env(app),
                                         add_local(app, after_dashes)};

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
