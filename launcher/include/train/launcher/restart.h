// `trainctl run`: launches the training step inside a SLURM allocation and, when it ends with a lost
// rank or node, launches it again there. This header holds the pure decisions, tested
// without SLURM: what srun's and train's lines say, whether to restart, which nodes the next launch
// uses. run_step() (run_step.cpp) is the loop around srun. No LibTorch. See docs/slurm.md.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "train/base/run_record.h"

namespace train {

/// train's exit codes (docs/reference.md) that decide what `trainctl run` does.
namespace train_exit {
constexpr int kDone = 0;
constexpr int kError = 1;         ///< an error in the code, configuration or data
constexpr int kUsage = 2;         ///< a flag error
constexpr int kNonFinite = 65;    ///< a NaN or infinite loss or gradient
constexpr int kUnhealthy = 69;    ///< the health check named bad nodes
constexpr int kPreempted = 75;    ///< checkpointed on a preemption signal: the job is requeued
constexpr int kStalled = 79;      ///< a rank stalled or died (the roll-call names it)
constexpr int kInterrupted = 130; ///< SIGINT
constexpr int kTerminated = 143;  ///< SIGTERM (scancel, the time limit)
}  // namespace train_exit

/// What srun and train wrote on stderr about a step that ended, read line by line.
struct StepReport {
  int exit_code = 0;                          ///< srun's exit status
  /// The first failing task's own exit code ("srun: error: node2: task 1: Exited with exit code 69"),
  /// 0 when srun named none. srun's status is the highest of all tasks', and with
  /// --kill-on-bad-exit the tasks it then stops end with 143: this one says what went wrong.
  int task_exit_code = 0;
  std::vector<std::string> killed;            ///< "node2: task 1: Killed": tasks that died of a signal (not SIGTERM)
  std::vector<std::string> killed_nodes;      ///< their nodes, in order, once each
  std::vector<std::string> lost_nodes;        ///< nodes srun lost or could not reach (node failure, launch failure)
  std::vector<std::string> unhealthy_nodes;   ///< nodes train's health check named bad (its --exclude= hint)
  std::vector<std::string> silent_nodes;      ///< nodes of ranks train named dead, frozen or stalled ("rank 1 on node2")
  std::vector<std::string> stalled_nodes;     ///< nodes of the odd ones out in train's roll-call of a stall
  bool broken_connection = false;             ///< train reported a peer's connection closed or reset
  std::string first_error;                    ///< the first srun or train error line (for the log)
  /// Whether that first error line told of a lost rank or node (a killed task, a node failure, a
  /// broken connection, a rank named dead): when a rank fails with a bug, its peers' broken
  /// connections and srun's killing of them come after its own error.
  bool first_error_lost = false;
  bool got_term = false;                      ///< trainctl run itself got SIGTERM/SIGINT (scancel, the time limit)
};

/// Reads one stderr line of srun or train into `report` (lines that say nothing of a failure are ignored).
void read_step_line(const std::string& line, StepReport& report);

/// The exit code that tells what ended the step: the first failing task's, else srun's.
int step_exit_code(const StepReport& report);

/// What to do after a step ended.
struct RestartDecision {
  bool restart = false;
  std::string cause;               ///< "lost rank", "lost node", "node failed health check", "stalled rank", ...
  std::vector<std::string> nodes;  ///< the node(s) blamed ("" none known)
  bool exclude = false;            ///< the next launch leaves `nodes` out
  std::string why;                 ///< in words, for the log: why it restarts, or why not
};

/// A failure already restarted from: its cause and the step train had reached.
struct PastFailure {
  std::string cause;
  int64_t step = -1;
};

/// Decides from a step's report whether to launch it again. `step` is the step train last wrote
/// in the run record (-1 unknown), `previous` the failure the last restart came from (if any),
/// `restarts_done` how many restarts there were, `down_nodes` the blamed nodes SLURM reports
/// DOWN or NOT_RESPONDING (they are left out too), `nodes_left` how many nodes the next launch
/// would have before any exclusion. Pure: no SLURM, no files.
RestartDecision decide_restart(const StepReport& report, int64_t step, const std::optional<PastFailure>& previous,
                               int restarts_done, int max_restarts, const std::set<std::string>& down_nodes,
                               int nodes_left);

/// The nodes and tasks of one launch: the job's, less those left out.
struct LaunchShape {
  std::vector<std::string> job_nodes;  ///< the job's nodes, in SLURM's order
  std::vector<int> job_tasks;          ///< tasks on each of them (SLURM_TASKS_PER_NODE)
  std::vector<std::string> excluded;   ///< the job's nodes left out, in the order they were

  /// The nodes in use: the job's, less `excluded`.
  std::vector<std::string> nodes() const;
  /// The tasks over nodes().
  int tasks() const;
};

/// SLURM_TASKS_PER_NODE's counts, one per node: "2(x3),1" gives {2, 2, 2, 1}; {} for another form.
std::vector<int> tasks_per_node(const std::string& slurm_tasks_per_node);

/// The job's nodes and tasks from its environment: SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE
/// (else SLURM_NTASKS_PER_NODE). Throws train::ConfigError when they are missing or don't agree.
LaunchShape job_shape(const std::function<std::string(const std::string&)>& getenv_fn);

/// `shape` with `drop` left out as well.
LaunchShape without_nodes(const LaunchShape& shape, const std::vector<std::string>& drop);

/// srun's command line for a launch: `srun --kill-on-bad-exit=1`, with --exclude, --nodes and
/// --ntasks once nodes are left out, then `srun_args` and the program with its arguments.
std::vector<std::string> srun_command(const LaunchShape& shape, const std::vector<std::string>& srun_args,
                                      const std::vector<std::string>& program);

/// Whether `scontrol show node -o` text says the node is gone: DOWN, NOT_RESPONDING, FAIL, or a
/// state ending in '*' (not responding).
bool node_state_is_down(const std::string& scontrol_node_text);

/// The step a checkpoint file resumes from ("ckpt-40.pt" gives 40), -1 when the name says none.
int64_t checkpoint_step(const std::string& path);

/// One line per restart, as `trainctl run` logs it and `trainctl status` shows the last one.
std::string describe_restart(const RestartEntry& entry, int max_restarts);

/// What `trainctl run` does.
struct RunRequest {
  std::vector<std::string> program;    ///< the training program and its arguments (after "--")
  std::vector<std::string> srun_args;  ///< more srun options (--srun-arg), e.g. --output=... per rank
  int max_restarts = 3;
};

/// Launches the training step with srun inside this allocation (SLURM_JOB_ID set), relaunching it
/// after a lost rank or node as decide_restart() says; every line of srun's stderr is passed on.
/// Keeps the run record's `restarts` and `state` (between launches) up to date.
/// @return the last launch's step_exit_code() (0 when training finished).
/// @throws train::ConfigError outside an allocation or without srun.
int run_step(const RunRequest& request);

}  // namespace train
