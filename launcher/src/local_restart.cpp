// `trainctl local --max-restarts N` (local_launch.h): the ranks on this machine are launched again
// after a lost or stalled rank, as `trainctl run` does inside a SLURM allocation: the same
// decision (decide_restart), the same run record entries and lines (restart_record.h), snapshots
// in this machine's memory kept between launches and removed at the end.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include "local_supervisor.h"
#include "restart_record.h"
#include "train/base/files.h"
#include "train/launcher/local_launch.h"
#include "train/launcher/restart.h"
#include "train/base/run_record.h"

namespace train::detail {
namespace {

// A variable set for the ranks for the whole run, removed with what it names at the end when
// trainctl local made it (an explicit one is the user's).
class RunFolder {
 public:
  RunFolder(const char* variable, const std::string& made) : variable_(variable) {
    const char* given = std::getenv(variable);
    if (given != nullptr && *given != '\0') {
      path_ = given;
      return;
    }
    path_ = made;
    ours_ = true;
    setenv(variable, made.c_str(), 1);
  }
  ~RunFolder() {
    if (!ours_) return;
    unsetenv(variable_);
    files::remove_tree(remove_);
  }
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;
  void remove_at_end(const std::string& what) { remove_ = what; }
  const std::string& path() const { return path_; }
  bool ours() const { return ours_; }

 private:
  const char* variable_;
  std::string path_;
  std::string remove_;
  bool ours_ = false;
};

// What the ranks' ends say, in the form decide_restart() reads (srun's report in `trainctl run`):
// a rank killed by a signal other than SIGTERM/SIGINT is a lost rank; train's exit 79 a dead or
// stalled peer; else the first failing rank's exit code.
StepReport local_report(const LaunchEnd& e) {
  StepReport r;
  r.exit_code = e.exit_code;
  r.got_term = e.by_request;
  for (const auto& [rank, status] : e.ended) {
    if (WIFSIGNALED(status) && WTERMSIG(status) != SIGTERM && WTERMSIG(status) != SIGINT) {
      r.killed.push_back("rank " + std::to_string(rank) + ": " + signal_name(WTERMSIG(status)));
      if (r.task_exit_code == 0) r.task_exit_code = 128 + WTERMSIG(status);
    }
  }
  if (r.task_exit_code == 0) {
    for (const auto& [rank, status] : e.ended) {
      if (WIFEXITED(status) && WEXITSTATUS(status) == train_exit::kStalled) r.task_exit_code = train_exit::kStalled;
    }
  }
  if (r.task_exit_code == 0) r.task_exit_code = e.exit_code;
  return r;
}

}  // namespace

int launch_local_restarting(const LocalLaunchOptions& options, const std::string& program) {
  const std::string tag = std::to_string(::getuid()) + "-local-" + std::to_string(::getpid());
  const std::vector<std::string> args(options.command.begin() + 1, options.command.end());
  if (flag_value(args, "--resume").empty()) {
    say("warning: --max-restarts " + std::to_string(options.max_restarts) +
        " but the program's arguments have no --resume: a relaunch would start again from step 0. Hint: add "
        "--checkpoint-dir DIR --resume auto after '--'.");
  }
  // The run record (the step reached, each launch's times, the restarts) and the snapshots'
  // folder: the user's when set, else this run's own, removed at the end.
  const std::string own = files::join(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp", "trainctl-" + tag);
  RunFolder record("TRAIN_RUN_RECORD", files::join(own, "run.json"));
  if (record.ours()) {
    files::make_dirs(own);
    record.remove_at_end(own);
  }
  RunFolder snapshots("TRAIN_SNAPSHOT_DIR", "/dev/shm/libtrain-" + tag);
  if (snapshots.ours()) snapshots.remove_at_end(snapshots.path());
  start_record(record.path(), options.command);

  std::optional<PastFailure> previous;
  std::optional<PendingRestart> pending;
  for (int launch = 0;; ++launch) {
    setenv("TRAIN_RESTART_COUNT", std::to_string(launch).c_str(), 1);
    if (pending) pending->launched_at = now_seconds();
    LaunchEnd end;
    {
      Supervisor supervisor(options, program);
      supervisor.open_dev_null();
      supervisor.set_tick([&] { complete_restart(record.path(), pending, options.max_restarts, say); });
      supervisor.run();
      end = supervisor.end();
    }
    complete_restart(record.path(), pending, options.max_restarts, say);  // a launch that ended before the last look
    const StepReport report = local_report(end);
    const std::optional<RunRecord> at_end = record_at_end(record.path());
    const int64_t step = at_end ? at_end->step : -1;
    const RestartDecision d = end.by_request ? RestartDecision{}
                                             : decide_restart(report, step, previous, launch, options.max_restarts,
                                                              {}, /*nodes_left=*/1);
    if (!d.restart) {
      if (!d.why.empty()) say(d.why + ".");
      settle_state(record.path(), end.exit_code, end.by_request);
      unsetenv("TRAIN_RESTART_COUNT");
      return end.exit_code;
    }
    const double failed_at = end.failed_at > 0 ? end.failed_at : now_seconds();
    pending = begin_restart(record.path(), launch, d, step_exit_code(report), failed_at, at_end, options.max_restarts,
                            "relaunching " + std::to_string(options.nproc) + " rank(s)", say);
    previous = PastFailure{d.cause, step};
  }
}

}  // namespace train::detail
