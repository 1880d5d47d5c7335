// The `train` command line for any program: every flag `train` takes, bound to a TrainConfig,
// and a main() that resolves the environment, trains, prints the done line and exits with the
// documented status. A user's own program accepts what the generated job scripts pass.
#pragma once

#include "train/config.h"
#include "train/launcher/env.h"

#include <functional>
#include <string>

namespace CLI {
class App;
}

namespace train::cli {

/// Adds every `train` flag to `app`, bound to `config`, each with its checks (a zero or negative
/// --batch-size, an unknown --device... are errors naming the flag). Later copies of a flag win,
/// so arguments appended to a job script override its defaults. Needs CLI11 (CLI/CLI.hpp).
void add_train_flags(CLI::App& app, TrainConfig& config);

/// Applies --init-method and --world-size to the resolved environment: tcp://HOST:PORT sets the
/// rendezvous; a world size is checked against SLURM's or torchrun's numbers.
/// @throws train::ConfigError naming both numbers when they differ.
void apply_rendezvous_flags(const TrainConfig& config, DistEnv& env);

/// What a program trains once its flags are parsed and its environment resolved.
using TrainFn = std::function<TrainResult(const TrainConfig& config, const DistEnv& env)>;

/// Lets a program add flags of its own to main(): called with the App before parsing; the returned
/// action runs after parsing and, when it returns 0 or more, main() exits with that status
/// without training (e.g. `train --list-models`); -1 goes on to train. Its exceptions are reported
/// like the run's (train::ConfigError exits 2, anything else 1).
using ExtraFlags = std::function<std::function<int()>(CLI::App& app)>;

/// A whole main(): parses the `train` flags (plus --heap and --version), resolves the
/// distributed environment, configures logging with the rank prefix, runs `train_fn`, prints the
/// done line on rank 0's stdout, and returns the exit status: 0 done, 2 bad flags or
/// configuration, 1 any other error (logged with rank and host), 75 preempted, 128 + signal cancelled.
int main(int argc, char** argv, const std::string& description, const TrainFn& train_fn,
         const ExtraFlags& extra_flags = nullptr);

}  // namespace train::cli
