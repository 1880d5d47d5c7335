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

#include "train/absolute_path.h"
#include "train/error.h"
#include "train/files.h"
#include "train/launcher/env.h"
#include "train/launcher/local_launch.h"
#include "train/launcher/restart.h"
#include "train/run_record.h"
#include "train/subprocess.h"
#include "train/text.h"

namespace train {
namespace {

volatile sig_atomic_t g_got_term = 0;

void on_term(int) { g_got_term = 1; }
void on_ignored(int) {}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

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

// A relaunch waiting to be seen training: its run-record entry is completed once train writes the record.
struct PendingRestart {
  int index = -1;  // into the record's restarts
  int launch = 0;  // the relaunch's number (TRAIN_RESTART_COUNT)
  double failed_at = 0;
  double launched_at = 0;
};

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

// Once the relaunch has trained its first step (train's record says so), the restart's entry gets
// the launch's times, the step it resumed from and the seconds from the failure to then.
void StepWatch::check_record(std::optional<PendingRestart>& pending) {
  if (!pending || record_.empty()) return;
  std::optional<RunRecord> r;
  try {
    r = RunRecord::load(record_);
  } catch (const std::exception&) {
    return;  // a damaged record: the next look may find it whole
  }
  // Any state: a relaunch that trained to its end between two looks has its times all the same.
  // Its process started after srun was (a second of slack for clocks): not a launch of an earlier
  // run of the job (a requeue counts launches from 0 again).
  if (!r || r->launch.number != pending->launch || r->launch.training <= 0 ||
      r->launch.started < pending->launched_at - 1.0) {
    return;
  }
  const int index = pending->index;
  const PendingRestart p = *pending;
  RestartEntry done;
  const std::string error = RunRecord::update(record_, [&](RunRecord& rec) {
    if (index >= static_cast<int>(rec.restarts.size())) return;
    RestartEntry& e = rec.restarts[index];
    e.launch = rec.launch;
    e.relaunched = p.launched_at;
    e.resumed_step = rec.launch.resumed_step;
    e.seconds = std::max(0.0, rec.launch.training - p.failed_at);
    done = e;
  });
  if (error.empty() && done.number > 0) say(describe_restart(done, max_) + " (training again)");
  pending.reset();
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

// The run record when the step ended (std::nullopt: none or unreadable).
std::optional<RunRecord> record_at_end(const std::string& path) {
  if (path.empty()) return std::nullopt;
  try {
    return RunRecord::load(path);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The run record's state once no launch follows, where train left it "running" (a rank was lost
// and no restart follows) or trainctl run left it "restarting".
void settle_state(const std::string& path, const StepReport& r) {
  if (path.empty() || files::read_text(path).empty()) return;  // no record: nothing to settle
  RunRecord::update(path, [&](RunRecord& rec) {
    if (rec.state != "running" && rec.state != "restarting" && !rec.state.empty()) return;
    const int rc = step_exit_code(r);
    rec.state = rc == 0                                 ? "done"
                : r.got_term                            ? "cancelled"
                : rc == train_exit::kPreempted          ? "preempted"
                                                        : "failed";
  });
}

// The last value of `flag` among the program's arguments (`--flag V`, `--flag=V`, or with
// underscores), as train reads it: its last copy wins. "" when absent.
std::string flag_value(const std::vector<std::string>& args, const std::string& flag) {
  std::string under = flag;
  for (size_t i = 2; i < under.size(); ++i) {
    if (under[i] == '-') under[i] = '_';
  }
  std::string value;
  for (size_t i = 0; i < args.size(); ++i) {
    for (const std::string& f : {flag, under}) {
      if (args[i] == f && i + 1 < args.size()) value = args[i + 1];
      if (args[i].rfind(f + "=", 0) == 0) value = args[i].substr(f.size() + 1);
    }
  }
  return value;
}

// The record from the job's start, before train runs: the folders its arguments name, so that
// `trainctl status` finds them while the first launch starts (train writes the same, and more).
void start_record(const std::string& path, const std::vector<std::string>& program) {
  if (path.empty()) return;
  RunRecord::update(path, [&](RunRecord& rec) {
    rec.job_id = env_or("SLURM_JOB_ID");
    if (rec.state.empty()) rec.state = "starting";
    const std::string ck = flag_value(program, "--checkpoint-dir");
    if (!ck.empty()) rec.checkpoint_dir = files::absolute(ck);
    const std::string tb = flag_value(program, "--tensorboard");
    if (!tb.empty()) rec.tensorboard_dir = files::absolute(tb);
    const std::string metrics = flag_value(program, "--metrics");
    if (!metrics.empty()) rec.metrics_file = files::absolute(metrics);
  });
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
      settle_state(record, report);
      const int code = step_exit_code(report);
      const bool ended_by_train = code == train_exit::kDone || code == train_exit::kPreempted ||
                                  code == train_exit::kInterrupted || code == train_exit::kTerminated;
      if (!ended_by_train) remove_snapshots(shape, report);
      return step_exit_code(report);
    }
    if (d.exclude) shape = without_nodes(shape, d.nodes);
    RestartEntry entry;
    entry.number = launch + 1;
    entry.cause = d.cause;
    entry.nodes = d.nodes;
    entry.excluded = d.exclude;
    entry.exit_code = step_exit_code(report);
    entry.time = watch.failed_at();
    if (at_end && at_end->progress_time > 0) {
      entry.failed_step = at_end->progress_step;
      entry.failed_step_time = at_end->progress_time;
    }
    int index = -1;
    if (!record.empty()) {
      const std::string error = RunRecord::update(record, [&](RunRecord& rec) {
        rec.state = "restarting";
        rec.restarts.push_back(entry);
        index = static_cast<int>(rec.restarts.size()) - 1;
      });
      if (!error.empty()) say("warning: the run record " + record + " could not be written: " + error);
    }
    pending = PendingRestart{index, launch + 1, watch.failed_at(), 0};
    const int64_t reached = at_end && at_end->progress_time > 0 ? at_end->progress_step : step;
    say(describe_restart(entry, request.max_restarts) + "; relaunching on " +
        std::to_string(shape.nodes().size()) + " node(s), " + std::to_string(shape.tasks()) +
        " task(s), from the newest snapshot or checkpoint" +
        (reached >= 0 ? " (train had reached step " + std::to_string(reached) + ")" : "") + ", " +
        std::to_string(static_cast<int>(now_seconds() - watch.failed_at() + 0.5)) + " s after the failure.");
    previous = PastFailure{d.cause, step};
  }
}

}  // namespace train
