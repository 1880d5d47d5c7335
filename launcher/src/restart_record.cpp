// The run record's side of a restart (restart_record.h), for trainctl run and trainctl local.
#include "restart_record.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "train/base/absolute_path.h"
#include "train/base/files.h"

namespace train::detail {
namespace {

std::string env_or(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v != nullptr ? v : "";
}

}  // namespace

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

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

std::optional<RunRecord> record_at_end(const std::string& path) {
  if (path.empty()) return std::nullopt;
  try {
    return RunRecord::load(path);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void settle_state(const std::string& path, int rc, bool got_term) {
  if (path.empty() || files::read_text(path).empty()) return;  // no record: nothing to settle
  RunRecord::update(path, [&](RunRecord& rec) {
    if (rec.state != "running" && rec.state != "restarting" && !rec.state.empty()) return;
    rec.state = rc == 0                        ? "done"
                : got_term                     ? "cancelled"
                : rc == train_exit::kPreempted ? "preempted"
                                               : "failed";
  });
}

PendingRestart begin_restart(const std::string& record, int launch, const RestartDecision& d, int exit_code,
                             double failed_at, const std::optional<RunRecord>& at_end, int max_restarts,
                             const std::string& relaunch_text, const std::function<void(const std::string&)>& say) {
  RestartEntry entry;
  entry.number = launch + 1;
  entry.cause = d.cause;
  entry.nodes = d.nodes;
  entry.excluded = d.exclude;
  entry.exit_code = exit_code;
  entry.time = failed_at;
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
  const int64_t reached = at_end && at_end->progress_time > 0 ? at_end->progress_step : at_end ? at_end->step : -1;
  say(describe_restart(entry, max_restarts) + "; " + relaunch_text + ", from the newest snapshot or checkpoint" +
      (reached >= 0 ? " (train had reached step " + std::to_string(reached) + ")" : "") + ", " +
      std::to_string(static_cast<int>(now_seconds() - failed_at + 0.5)) + " s after the failure.");
  return PendingRestart{index, launch + 1, failed_at, 0};
}

void complete_restart(const std::string& record, std::optional<PendingRestart>& pending, int max_restarts,
                      const std::function<void(const std::string&)>& say) {
  if (!pending || record.empty()) return;
  std::optional<RunRecord> r;
  try {
    r = RunRecord::load(record);
  } catch (const std::exception&) {
    return;  // a damaged record: the next look may find it whole
  }
  // Any state: a relaunch that trained to its end between two looks has its times all the same.
  // Its process started after the relaunch was (a second of slack for clocks): not a launch of an
  // earlier run of the job (a requeue counts launches from 0 again).
  if (!r || r->launch.number != pending->launch || r->launch.training <= 0 ||
      r->launch.started < pending->launched_at - 1.0) {
    return;
  }
  const int index = pending->index;
  const PendingRestart p = *pending;
  RestartEntry done;
  const std::string error = RunRecord::update(record, [&](RunRecord& rec) {
    if (index < 0 || index >= static_cast<int>(rec.restarts.size())) return;
    RestartEntry& e = rec.restarts[index];
    e.launch = rec.launch;
    e.relaunched = p.launched_at;
    e.resumed_step = rec.launch.resumed_step;
    e.seconds = std::max(0.0, rec.launch.training - p.failed_at);
    done = e;
  });
  if (error.empty() && done.number > 0) say(describe_restart(done, max_restarts) + " (training again)");
  pending.reset();
}

}  // namespace train::detail
