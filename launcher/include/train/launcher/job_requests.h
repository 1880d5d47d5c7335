#pragma once
// What trainctl's job subcommands work out before they act, as plain functions of their inputs (the
// program itself only parses flags, prints and submits): the command line a generated script records,
// the salloc line of `trainctl interactive`, and the checks, folders and index of `trainctl sweep`.
// No LibTorch. See docs/workflow.md.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "train/launcher/sbatch.h"
#include "train/launcher/sweep.h"

namespace train {

/// The words of a trainctl command line to record in a script's header: `before_dashes` without where
/// the script went (--out FILE, --out=FILE) or what was done with it (--submit, --test-only), then
/// "--" and `train_args` when there are any.
std::vector<std::string> recorded_command(const std::vector<std::string>& before_dashes,
                                          const std::vector<std::string>& train_args);

/// A submitted job's log: `output` (an --output pattern) with %x the job name, %j and %A `job_id`,
/// and %a "*" (any array task).
std::string submitted_log(const std::string& output, const std::string& job_name, const std::string& job_id);

/// What `trainctl sbatch --test-only` prints for sbatch's answer `r` at `now_epoch`: when, where and
/// on how many processors the job would start, ", now." when that is at most a minute away, else
/// "in about H h M min" and a hint (squeue --start, a shorter --time or fewer nodes).
std::string render_test_only(const TestOnlyResult& r, std::int64_t now_epoch);

/// `path` made absolute against `cwd` (an absolute folder), without "." or empty parts.
std::string absolute_path(const std::string& path, const std::string& cwd);

/// The options an interactive session's shape needs before plan_sbatch: no --signal (nothing to
/// checkpoint), and the job name "interactive" unless one was given.
void prepare_interactive(SbatchOptions& o);

/// `trainctl interactive`'s command: salloc with the job's shape flags (job_shape_flags, as sbatch's
/// #SBATCH lines), then with `pty` srun --pty --overlap --nodes=1 --ntasks=1, then
/// bash -c 'set +u; SETUP...; export SRUN_CPUS_PER_TASK...; echo ...; exec bash -i'.
std::vector<std::string> salloc_command(const SbatchOptions& o, const SbatchPlan& plan, bool pty);

/// `argv` as one shell line, each word shell_quote()d.
std::string command_line(const std::vector<std::string>& argv);

/// A sweep checked and laid out, before its script is written.
struct SweepPlan {
  std::vector<SweepParam> params;  ///< the --param values, parsed
  std::vector<SweepPoint> grid;    ///< task i's combination
  std::string root;                ///< the sweep's folder, absolute
  std::string script_path;         ///< ROOT/sweep.sh
  std::string index_path;          ///< ROOT/sweep.json
  int at_once = 0;                 ///< tasks that may run at once: --throttle, at most the task count
};

/// Checks a sweep request and plans it: parses `params` (--param NAME=V1,...) into the grid, requires
/// `dir` (--output-dir; made absolute against `cwd`) to hold no sweep yet, and no swept flag among
/// o.train_args. Sets o.job_name to "sweep" when empty and o.array_tasks to one task per combination
/// (run folders under the root, throttle `throttle`, 0 for none).
/// @throws train::ConfigError naming the flag at fault, with what was expected and found, and a hint.
SweepPlan plan_sweep(SbatchOptions& o, const std::vector<std::string>& params, const std::string& dir, int throttle,
                     const std::string& cwd);

/// Creates the run folder of each of the plan's tasks (SLURM opens a task's log before its script
/// runs, so they must exist first). `dir` is --output-dir as given, for errors.
/// @throws train::ConfigError "--output-dir DIR: expected to create FOLDER, found WHY." with a hint.
void make_sweep_task_dirs(const SweepPlan& plan, const std::string& dir);

/// The sweep's index (DIR/sweep.json's content before submission: no job id yet).
SweepIndex sweep_index(const SweepPlan& plan, const std::string& job_name, const std::vector<std::string>& train_args);

/// What `trainctl sweep` without --submit prints: the task count, where the script and index went,
/// and how to submit.
std::string render_sweep_written(const SweepPlan& plan);

}  // namespace train
