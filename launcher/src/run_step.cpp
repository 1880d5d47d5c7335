// `trainctl run` (restart.h): launches the training step with srun, passes srun's stderr on while
// reading it for failures, and launches the step again inside the allocation after a lost rank or
// node, as decide_restart() says; keeps the run record's restarts.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "train/base/error.h"
#include "train/base/env.h"
#include "train/base/files.h"
#include "train/launcher/local_launch.h"
#include "train/launcher/restart.h"
#include "restart_record.h"
#include "train/base/run_record.h"
#include "train/base/subprocess.h"
#include "train/base/text.h"

namespace train {
namespace {

using detail::PendingRestart;
using detail::begin_restart;
using detail::complete_restart;
using detail::now_seconds;
using detail::record_at_end;
using detail::settle_state;
using detail::start_record;

volatile sig_atomic_t g_got_term = 0;

void on_term(int) { g_got_term = 1; }
void on_ignored(int) {}

void say(const std::string& text) { std::cerr << "trainctl run: " << text << std::endl; }

std::string env_or(const std::string& name, const std::string& fallback = "") {
  const char* v = std::getenv(name.c_str());
  return v != nullptr ? v : fallback;
}

// SIGTERM/SIGINT/SIGHUP (scancel, the time limit, ^C) reach srun and the tasks as well: here they
// only stop the restarts. USR1/USR2 (`scancel --signal=USR2 --full`) are the tasks' to handle.
void install_handlers() {
  struct sigaction sa {};
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_term;
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
  sa.sa_handler = on_ignored;
  for (int sig : {SIGUSR1, SIGUSR2}) sigaction(sig, &sa, nullptr);
}

class StepWatch {
 public:
  StepWatch(std::string record_path, int max_restarts) : record_(std::move(record_path)), max_(max_restarts) {}

  // Runs one launch to its end; returns what srun and train said.
  StepReport launch(const std::vector<std::string>& argv, int launch_number, std::optional<PendingRestart>& pending);
  double failed_at() const { return failed_at_; }

 private:
  void feed(const std::string& chunk, StepReport& report);
  void check_record(std::optional<PendingRestart>& pending);

  std::string record_;
  int max_;
  std::string partial_;
  double failed_at_ = 0;
};

void StepWatch::feed(const std::string& chunk, StepReport& report) {
  partial_ += chunk;
  std::size_t nl;
  while ((nl = partial_.find('\n')) != std::string::npos) {
    const std::string line = partial_.substr(0, nl);
    partial_.erase(0, nl + 1);
    const std::string before = report.first_error;
    const std::size_t killed = report.killed.size() + report.lost_nodes.size();
    const int task_exit = report.task_exit_code;
    read_step_line(line, report);
    if (failed_at_ == 0 && (report.first_error != before || report.killed.size() + report.lost_nodes.size() != killed ||
                            report.task_exit_code != task_exit)) {
      failed_at_ = now_seconds();
    }
  }
}

void StepWatch::check_record(std::optional<PendingRestart>& pending) {
  complete_restart(record_, pending, max_, say);
}

StepReport StepWatch::launch(const std::vector<std::string>& argv, int launch_number,
                             std::optional<PendingRestart>& pending) {
  StepReport report;
  partial_.clear();
  failed_at_ = 0;
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) throw Error(std::string("pipe2: ") + std::strerror(errno));
  setenv("TRAIN_RESTART_COUNT", std::to_string(launch_number).c_str(), 1);
  const std::string srun = find_program(argv.front(), current_environment());
  const pid_t child = fork();
  if (child < 0) throw Error(std::string("fork: ") + std::strerror(errno));
  if (child == 0) {
    dup2(err_pipe[1], STDERR_FILENO);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    signal(SIGUSR1, SIG_DFL);
    signal(SIGUSR2, SIG_DFL);
    execv(srun.c_str(), args.data());
    _exit(127);
  }
  close(err_pipe[1]);
  char buf[4096];
  for (bool open = true; open;) {
    pollfd p{err_pipe[0], POLLIN, 0};
    const int ready = poll(&p, 1, 500);
    if (ready > 0) {
      const ssize_t n = read(err_pipe[0], buf, sizeof(buf));
      if (n > 0) {
        (void)!write(STDERR_FILENO, buf, static_cast<std::size_t>(n));
        feed(std::string(buf, static_cast<std::size_t>(n)), report);
      } else if (n == 0 || errno != EINTR) {
        open = false;
      }
    }
    check_record(pending);
  }
  close(err_pipe[0]);
  check_record(pending);  // a launch that ended before the last look
  if (!partial_.empty()) feed("\n", report);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  report.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (failed_at_ == 0) failed_at_ = now_seconds();
  report.got_term = g_got_term != 0;
  return report;
}

// The nodes SLURM reports gone among those blamed (scontrol show node -o NODE).
std::set<std::string> down_nodes(const StepReport& r) {
  std::set<std::string> down;
  std::set<std::string> blamed(r.killed_nodes.begin(), r.killed_nodes.end());
  blamed.insert(r.silent_nodes.begin(), r.silent_nodes.end());
  for (const std::string& node : blamed) {
    const CommandResult c = run_command({"scontrol", "show", "node", "-o", node}, "", 15);
    if (c.exit_code == 0 && node_state_is_down(c.out)) down.insert(node);
  }
  return down;
}

void check_inside_allocation(const RunRequest& request) {
  if (env_or("SLURM_JOB_ID").empty()) {
    throw ConfigError("SLURM_JOB_ID: expected trainctl run inside a SLURM allocation (a batch script or an salloc "
                      "session), found it unset.",
                      "put `trainctl run -- PROGRAM ARGS` in a batch script in place of `srun PROGRAM ARGS` and submit "
                      "it with sbatch, or use trainctl sbatch to write one; on one machine without SLURM: trainctl "
                      "local --nproc N -- PROGRAM ARGS.");
  }
  if (request.program.empty()) {
    throw ConfigError("PROGRAM: expected the training program after '--', found none.",
                      "e.g. trainctl run --max-restarts 3 -- build/bin/train --epochs 1.");
  }
  try {
    find_program("srun", current_environment());
  } catch (const ConfigError&) {
    throw ConfigError("srun: expected SLURM's srun on PATH, found none.",
                      "run trainctl run on a node of a SLURM allocation, where srun is installed.");
  }
}

// After a step that failed for good, the snapshots its ranks left in the nodes' memory (train
// removes them itself when a run ends; a failed one leaves them for a restart): one task a node
// removes the job's folder, so that no snapshot outlives the job. Errors are ignored.
void remove_snapshots(const LaunchShape& shape, const StepReport& report) {
  const std::string job = env_or("SLURM_JOB_ID");
  if (job.empty() || report.got_term || !env_or("TRAIN_SNAPSHOT_DIR").empty()) return;
  std::string nodes;
  for (const std::string& n : shape.nodes()) nodes += (nodes.empty() ? "" : ",") + n;
  if (nodes.empty()) return;
  const std::string dir = "/dev/shm/libtrain-" + std::to_string(::getuid()) + "-" + job;
  run_command({"srun", "--quiet", "--nodelist=" + nodes, "--nodes=" + std::to_string(shape.nodes().size()),
               "--ntasks-per-node=1", "rm", "-rf", dir},
              "", 30);
}

}  // namespace

int run_step(const RunRequest& request) {
  check_inside_allocation(request);
  install_handlers();
  const std::string record = RunRecord::path_from_env();
  start_record(record, request.program);
  LaunchShape shape = job_shape([](const std::string& name) { return env_or(name); });
  StepWatch watch(record, request.max_restarts);
  std::optional<PastFailure> previous;
  std::optional<PendingRestart> pending;
  for (int launch = 0;; ++launch) {
    const double launched_at = now_seconds();
    if (pending) pending->launched_at = launched_at;
    const StepReport report = watch.launch(srun_command(shape, request.srun_args, request.program), launch, pending);
    const std::optional<RunRecord> at_end = record_at_end(record);
    const int64_t step = at_end ? at_end->step : -1;
    const RestartDecision d = decide_restart(report, step, previous, launch, request.max_restarts,
                                             down_nodes(report), static_cast<int>(shape.nodes().size()));
    if (!d.restart) {
      if (!d.why.empty()) say(d.why + ".");
      settle_state(record, step_exit_code(report), report.got_term);
      const int code = step_exit_code(report);
      const bool ended_by_train = code == train_exit::kDone || code == train_exit::kPreempted ||
                                  code == train_exit::kInterrupted || code == train_exit::kTerminated;
      if (!ended_by_train) remove_snapshots(shape, report);
      return step_exit_code(report);
    }
    if (d.exclude) shape = without_nodes(shape, d.nodes);
    pending = begin_restart(record, launch, d, step_exit_code(report), watch.failed_at(), at_end, request.max_restarts,
                            "relaunching on " + std::to_string(shape.nodes().size()) + " node(s), " +
                                std::to_string(shape.tasks()) + " task(s)",
                            say);
    previous = PastFailure{d.cause, step};
  }
}

}  // namespace train
