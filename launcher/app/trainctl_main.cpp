// trainctl: the launcher's command line (no LibTorch). One function per subcommand adds its
// options and returns the action to run: hostnames, hostlist, env, local, run, sbatch, preflight, and the
// work around a job: sweep, sweep-report, plot, resources, interactive, status, logs, cancel. They
// live in trainctl_node.cpp, trainctl_sbatch.cpp, trainctl_sweep.cpp and trainctl_jobs.cpp (see
// trainctl.h); the logic behind them lives in the launcher library, where its tests reach it
// (sbatch.h, job_requests.h, plotting.h, jobs.h, ...). This file registers them and dispatches.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "train/base/error.h"
#include "train/base/text.h"
#include "train/base/version.h"
#include "trainctl.h"

namespace trainctl {
namespace {

/// Takes the arguments after the first "--" off `args` for the subcommands that pass them on (a
/// program and its arguments, or train's), so that CLI11 never sees them.
std::vector<std::string> split_at_dashes(std::vector<std::string>& args) {
  std::vector<std::string> after_dashes;
  if (!args.empty() && (args.front() == "local" || args.front() == "sbatch" || args.front() == "preflight" ||
                         args.front() == "sweep" || args.front() == "run")) {
    const auto dashes = std::find(args.begin(), args.end(), "--");
    if (dashes != args.end()) {
      after_dashes.assign(dashes + 1, args.end());
      args.erase(dashes, args.end());
    }
  }
  return after_dashes;
}

/// False, after saying so on stderr, when `name` (the first argument, not an option) names no subcommand.
bool known_subcommand(const std::string& name, const std::vector<Command>& commands) {
  std::string names;
  bool known = false;
  for (const auto& command : commands) {
    known = known || command.first->get_name() == name;
    names += (names.empty() ? "" : ", ") + command.first->get_name();
  }
  if (!known) {
    std::vector<std::string> all;
    for (const auto& command : commands) all.push_back(command.first->get_name());
    const std::vector<std::string> near = train::text::closest(name, all);
    std::cerr << "trainctl: unknown subcommand '" << name << "': expected one of " << names << ".\nHint: "
              << (near.empty() ? "" : "did you mean " + train::text::or_list(near) + "? ")
              << "run 'trainctl --help' for the usage." << std::endl;
  }
  return known;
}

/// "did you mean --nproc? " for an unknown flag of the parsed subcommand close to one it has; else "".
std::string did_you_mean(const CLI::App& app, const CLI::ParseError& e) {
  const CLI::App* sub = app.get_subcommands().empty() ? &app : app.get_subcommands().back();
  if (dynamic_cast<const CLI::ExtrasError*>(&e) == nullptr) return "";
  for (const std::string& extra : app.remaining(/*recurse=*/true)) {
    if (extra.size() < 3 || extra.compare(0, 2, "--") != 0) continue;
    std::vector<std::string> names;
    for (const CLI::Option* o : sub->get_options()) {
      for (const std::string& n : o->get_lnames()) names.push_back(n);
    }
    std::vector<std::string> near = train::text::closest(extra.substr(2, extra.find('=') - 2), names);
    if (near.empty()) return "";
    for (std::string& n : near) n = "--" + n;
    return "did you mean " + train::text::or_list(near) + "? ";
  }
  return "";
}

/// Runs the action of the subcommand parsed; its errors end up on stderr, named by the subcommand.
int run_parsed(const std::vector<Command>& commands) {
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

}  // namespace
}  // namespace trainctl

using namespace trainctl;

int main(int argc, char** argv) {
  CLI::App app{
      "trainctl: launcher tools for libtrain. Expands SLURM host lists, shows the distributed\n"
      "environment a rank resolves, starts ranks on one machine, generates and submits sbatch\n"
      "scripts, runs the training step in an allocation (again after a lost rank or node), and\n"
      "checks a job's nodes before training. Around the jobs: hyperparameter sweeps as job arrays,\n"
      "training curves (plot), the cluster's resources, interactive sessions, status, logs and cancel.\n"
      "Run 'trainctl SUBCOMMAND --help' for a subcommand's options.",
      "trainctl"};
  app.set_version_flag("--version", "trainctl " TRAIN_VERSION_STRING);
  app.require_subcommand(1);

  std::vector<std::string> args(argv + 1, argv + argc);
  const std::vector<std::string> after_dashes = split_at_dashes(args);
  const std::vector<std::string> before_dashes = args;
  const std::vector<Command> commands = {add_hostnames(app), add_hostlist(app), add_env(app),
                                         add_local(app, after_dashes), add_run(app, after_dashes), add_sbatch(app, before_dashes, after_dashes),
                                         add_preflight(app, after_dashes), add_sweep(app, before_dashes, after_dashes),
                                         add_sweep_report(app), add_plot(app), add_resources(app), add_interactive(app),
                                         add_status(app), add_logs(app), add_cancel(app)};
  if (argc >= 2 && argv[1][0] != '-' && !known_subcommand(argv[1], commands)) return kExitUsage;

  try {
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last-first
    app.parse(args);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    std::string where = "trainctl";
    for (const CLI::App* sub : app.get_subcommands()) where += " " + sub->get_name();
    std::cerr << where << ": " << e.what() << "\nHint: " << did_you_mean(app, e) << "run '" << where << " --help' for the usage"
              << (where == "trainctl local" ? "; put PROGRAM and its arguments after '--'." : ".")
              << std::endl;
    return kExitUsage;
  }
  return run_parsed(commands);
}
