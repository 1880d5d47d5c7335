// The pieces of the trainctl program (private to launcher/app): one add_* function per subcommand,
// grouped by file (trainctl_node.cpp, trainctl_sbatch.cpp, trainctl_sweep.cpp, trainctl_jobs.cpp),
// the job options they share (trainctl_job_options.cpp) and small helpers (trainctl_common.cpp).
#pragma once

#include <CLI/CLI.hpp>
#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "train/base/error.h"
#include "train/launcher/sbatch.h"

namespace trainctl {

/// Exit status for a command line that doesn't parse (train/base/error.h: the same as train's).
using train::kExitUsage;
/// Exit status for an invalid input or environment.
constexpr int kExitError = 1;

using Action = std::function<int()>;
/// A subcommand and what it does once its options are parsed.
using Command = std::pair<CLI::App*, Action>;

// ---- helpers (trainctl_common.cpp) ----------------------------------------------------------------

/// Writes text to stdout in one go and reports whether it all got there.
int print(const std::string& text);

/// Writes a file in one go and gives it `mode`; when it can't, throws "WHAT PATH: expected EXPECTED,
/// found it unwritable." (`what` names the option the path came from).
void write_file(const std::string& path, const std::string& text, const std::string& what, mode_t mode = 0644,
                const std::string& expected = "a file to write");

/// Adds subcommand `name`: `description` is its line in trainctl --help, `footer` ends its own --help.
CLI::App* add_command(CLI::App& app, const std::string& name, const std::string& description,
                      const std::string& footer);

/// Throws, for a required argument left out, "NAME: expected WHAT, found none given." with `hint`.
/// Checked in the actions rather than with CLI11's required(), so that a mistyped flag is reported as such.
void require_given(bool given, const std::string& name, const std::string& what, const std::string& hint);

/// The folder trainctl runs in.
std::string current_folder();

/// The name of the user trainctl runs as ("" when unknown).
std::string user_name();

/// TRAIN_PYTHON's value: the Python the user chose for plots, "" when unset.
std::string train_python();

/// The repository's scripts/ folder: next to the build tree trainctl lives in, else the source tree it
/// was built from.
std::string scripts_folder();

// ---- options shared by the job subcommands (trainctl_job_options.cpp) -----------------------------

/// The options that give a job its shape (nodes, tasks, CPUs, memory, GPUs, time, where), shared by
/// sbatch, sweep, interactive and resources.
void add_shape_options(CLI::App* cmd, train::SbatchOptions& o);

/// The options of a generated batch script beyond its shape (logs, signal, environment, data, what
/// runs), shared by sbatch and sweep.
void add_batch_options(CLI::App* cmd, train::SbatchOptions& o);

/// Adds --no-cluster-checks to a subcommand whose action calls plan_job().
void add_no_cluster_checks_flag(CLI::App* cmd);

/// Plans the job `cmd` (sbatch, sweep or interactive) asks for and prints its warnings on stderr as
/// "trainctl SUB: warning: ...": the plan's own when `with_plan_warnings`, then the partition
/// checks' (unless --no-cluster-checks, or sinfo doesn't answer).
train::SbatchPlan plan_job(const train::SbatchOptions& o, const CLI::App& cmd, bool with_plan_warnings);

// ---- subcommands on this machine or node (trainctl_node.cpp) --------------------------------------

Command add_hostnames(CLI::App& app);
Command add_hostlist(CLI::App& app);
Command add_env(CLI::App& app);

/// `trainctl local`; `after_dashes` holds the arguments after the first "--" (the program and its
/// arguments), which main() keeps away from CLI11 so that a mistyped flag before it is reported
/// by name rather than as a stray program argument.
Command add_local(CLI::App& app, const std::vector<std::string>& after_dashes);

/// `trainctl run` (inside a SLURM allocation: srun the training step, relaunch it after a lost rank or
/// node); `after_dashes` holds the program and its arguments.
Command add_run(CLI::App& app, const std::vector<std::string>& after_dashes);

/// `trainctl preflight`; `after_dashes` holds train's arguments (after the first "--").
Command add_preflight(CLI::App& app, const std::vector<std::string>& after_dashes);

// ---- batch jobs, their shape and the cluster (trainctl_sbatch.cpp) --------------------------------

/// `trainctl sbatch`; `before_dashes` and `after_dashes` hold the command line around the first
/// "--" (the train arguments come after it), kept by main() so the script can record its command.
Command add_sbatch(CLI::App& app, const std::vector<std::string>& before_dashes,
                   const std::vector<std::string>& after_dashes);
Command add_resources(CLI::App& app);
Command add_interactive(CLI::App& app);

// ---- sweeps and curves (trainctl_sweep.cpp) -------------------------------------------------------

/// `trainctl sweep`; `before_dashes` and `after_dashes` as for sbatch.
Command add_sweep(CLI::App& app, const std::vector<std::string>& before_dashes,
                  const std::vector<std::string>& after_dashes);
Command add_sweep_report(CLI::App& app);
Command add_plot(CLI::App& app);

// ---- submitted jobs (trainctl_jobs.cpp) -----------------------------------------------------------

Command add_status(CLI::App& app);
Command add_logs(CLI::App& app);
Command add_cancel(CLI::App& app);

}  // namespace trainctl
