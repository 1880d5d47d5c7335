// `trainctl logs` and `cancel`: print (and follow) a job's log, per rank where srun split it, and
// cancel a job after signalling its tasks so that train checkpoints first. The controller is asked
// through run_slurm (slurm_client.h), always with a timeout.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "train/base/error.h"
#include "train/base/files.h"
#include "train/launcher/jobs.h"
#include "train/launcher/sbatch.h"
#include "train/base/subprocess.h"
#include "train/base/text.h"
#include "slurm_client.h"

namespace train {

using text::trim;

std::string rank_log_path(const std::string& log_path, int rank) {
  std::string pattern = per_rank_pattern(log_path);
  const std::size_t at = pattern.rfind("%t");
  return pattern.replace(at, 2, std::to_string(rank));
}

bool is_rank_line(const std::string& line, int rank) {
  const std::string r = std::to_string(rank);
  return line.find("[rank " + r + "/") != std::string::npos || line.rfind("[r" + r + "] ", 0) == 0;
}

namespace {

/// One file `trainctl logs` prints from, and how far it got.
struct LogSource {
  LogSource(std::string file, std::string line_prefix, int rank = -1)
      : path(std::move(file)), prefix(std::move(line_prefix)), filter_rank(rank) {}
  std::string path;
  std::string prefix;       ///< put before each line ("[rR] " for a rank's own file)
  int filter_rank = -1;     ///< keep only this rank's lines; -1: all
  std::streamoff offset = 0;
  std::string partial;      ///< a last line without its '\n' yet
};

/// Prints what was added to a source since the last call; false when writing fails.
bool pump(LogSource& s, bool final, const std::function<bool(const std::string&)>& write) {
  std::ifstream in(s.path, std::ios::binary);
  if (!in) return true;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < s.offset) s.offset = 0;  // truncated: start again
  std::string chunk;
  if (size > s.offset) {
    in.seekg(s.offset);
    chunk.resize(static_cast<std::size_t>(size - s.offset));
    in.read(&chunk[0], static_cast<std::streamsize>(chunk.size()));
    chunk.resize(static_cast<std::size_t>(in.gcount()));
    s.offset += static_cast<std::streamoff>(chunk.size());
  }
  std::string text = s.partial + chunk;
  s.partial.clear();
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos && !final) {
      s.partial = text.substr(start);
      break;
    }
    const std::string line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    start = nl == std::string::npos ? text.size() : nl + 1;
    if (s.filter_rank >= 0 && !is_rank_line(line, s.filter_rank)) continue;
    out += s.prefix + line + "\n";
  }
  return out.empty() || write(out);
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

/// The one job an id names for `logs`.
JobInfo single_job(const std::string& id) {
  const std::vector<JobInfo> jobs = query_jobs(id);
  if (jobs.size() != 1) {
    std::string ids;
    for (const JobInfo& j : jobs) ids += (ids.empty() ? "" : ", ") + j.id;
    throw ConfigError("JOBID " + id + ": expected one job, found an array of " + std::to_string(jobs.size()) +
                          " tasks (" + ids + ").",
                      "name one task, e.g. trainctl logs " + jobs.front().id + ".");
  }
  return jobs.front();
}

}  // namespace

int show_logs(const LogsRequest& request, const std::function<bool(const std::string&)>& write) {
  JobInfo job = single_job(request.job_id);
  const std::string log = request.errors ? job.std_err : job.std_out;
  if (job.from_jobcomp || log.empty()) {
    throw ConfigError("JOBID " + request.job_id + ": expected the controller to know the job's log file, found only " +
                          "its completion record (" + job.state + ").",
                      "the controller forgets a job MinJobAge seconds after it ends; its log is where --output "
                      "put it, relative to the folder it was submitted from" +
                          (job.work_dir.empty() ? std::string(".") : " (" + job.work_dir + ")."));
  }
  std::vector<LogSource> sources;
  auto add_rank_files = [&]() {
    // srun's per-rank files (--per-rank-logs) sit next to the job's log: NAME-R.EXT.
    const int ranks = std::max(job.num_tasks, 1);
    for (int r = 0; r < ranks; ++r) {
      if (request.rank >= 0 && r != request.rank) continue;
      const std::string path = rank_log_path(log, r);
      if (!file_exists(path)) continue;
      if (std::any_of(sources.begin(), sources.end(), [&](const LogSource& s) { return s.path == path; })) continue;
      sources.emplace_back(path, request.rank >= 0 ? "" : "[r" + std::to_string(r) + "] ");
    }
  };
  if (request.rank >= 0) {
    if (file_exists(rank_log_path(log, request.rank))) {
      add_rank_files();
    } else {
      sources.emplace_back(log, "", request.rank);  // one log: the lines with the rank's prefix
    }
  } else {
    sources.emplace_back(log, "");
    add_rank_files();
  }
  if (!request.follow) {
    if (!file_exists(sources.front().path)) {
      throw ConfigError("JOBID " + job.id + ": expected its log " + sources.front().path + ", found no such file (job " +
                            job.state + (job.reason.empty() || job.reason == "None" ? "" : ", " + job.reason) + ").",
                        "a pending job has no log yet; trainctl logs -f " + job.id + " waits for it.");
    }
    for (LogSource& s : sources) {
      if (!pump(s, true, write)) return 1;
    }
    return 0;
  }
  std::string state = job.state;
  auto next_state_check = std::chrono::steady_clock::now();
  while (true) {
    add_rank_files();  // srun opens the ranks' files after the script's first lines
    for (LogSource& s : sources) {
      if (!pump(s, false, write)) return 1;
    }
    if (is_final_state(state)) break;
    std::this_thread::sleep_for(std::chrono::duration<double>(request.poll_seconds));
    if (std::chrono::steady_clock::now() >= next_state_check) {
      next_state_check = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      try {
        const std::vector<JobInfo> now = query_jobs(job.id);
        state = now.empty() ? "COMPLETED" : now.front().state;
      } catch (const ConfigError&) {
        state = "COMPLETED";  // forgotten: it ended long ago
      }
    }
  }
  for (LogSource& s : sources) {
    if (!pump(s, true, write)) return 1;
  }
  return 0;
}

namespace {

// cancel_job()'s steps: check there is something to cancel, signal the running tasks (with
// --signal), cancel what is left, and say where the newest checkpoints are.

/// A job (or array) with no pending or running task left: nothing to signal or cancel.
void check_something_to_cancel(const std::string& job_id, const std::vector<JobInfo>& jobs) {
  const bool any_left = std::any_of(jobs.begin(), jobs.end(), [](const JobInfo& j) {
    return !j.from_jobcomp && !is_final_state(j.state);
  });
  if (!any_left) {
    throw ConfigError("JOBID " + job_id + ": expected a pending or running job to cancel, found it ended (" +
                          jobs.front().state + ").",
                      "nothing to do; trainctl status " + job_id + " shows its log and last checkpoint.");
  }
}

/// --signal: a bare signal name or number; scancel has no use for B:, R: or a lead time.
SignalSpec plain_signal(const std::string& signal) {
  const SignalSpec spec = parse_signal_spec("--signal", signal);
  if (spec.batch_only || spec.reservation || signal.find('@') != std::string::npos) {
    throw ConfigError("--signal '" + signal + "': expected a plain signal such as USR2, found a prefix or '@'.",
                      "give the signal train checkpoints on, e.g. --signal USR2 (its default --preempt-signals; TERM and INT "
                      "checkpoint without a requeue).");
  }
  return spec;
}

/// Polls the job until none of `running_restarts`' tasks runs in the same incarnation (it ended, or
/// runs again after a requeue), or until --grace seconds after `t0`, when the signal went. Returns
/// whether they all stopped.
bool wait_until_stopped(const CancelRequest& request, const std::map<std::string, int>& running_restarts,
                        std::chrono::steady_clock::time_point t0) {
  const auto deadline = t0 + std::chrono::duration<double>(request.grace_seconds);
  bool stopped = false;
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::duration<double>(request.poll_seconds));
    std::vector<JobInfo> now;
    try {
      now = query_jobs(request.job_id);
    } catch (const ConfigError&) {
      stopped = true;
      break;
    }
    stopped = std::none_of(now.begin(), now.end(), [&](const JobInfo& j) {
      const auto it = running_restarts.find(j.id);
      return j.state == "RUNNING" && it != running_restarts.end() && j.restarts == it->second;
    });
    if (stopped) break;
  }
  return stopped;
}

/// --signal: sends it to the running tasks, so that train checkpoints, and gives them --grace
/// seconds to stop. Returns the lines of the report that say what happened.
std::string signal_running_tasks(const CancelRequest& request, const std::vector<JobInfo>& jobs) {
  const SignalSpec spec = plain_signal(request.signal);
  // The tasks running now, and how often each had been requeued: a task has stopped once it no
  // longer runs, or runs again after a requeue.
  std::map<std::string, int> running_restarts;
  bool pending = false;
  for (const JobInfo& j : jobs) {
    if (j.state == "RUNNING") running_restarts[j.id] = j.restarts;
    pending = pending || j.state == "PENDING";
  }
  const bool running = !running_restarts.empty();
  std::string report;
  if (running && pending) {
    // An array's waiting tasks have nothing to checkpoint; dropped first, they can't start meanwhile.
    const CommandResult r = run_slurm({"scancel", "--state=PENDING", request.job_id});
    if (r.exit_code == 0) report += "job " + request.job_id + ": cancelled its pending tasks.\n";
  }
  if (!running) {
    return report + "job " + request.job_id + ": no task running (" + jobs.front().state +
           "), so no signal sent and nothing to checkpoint.\n";
  }
  // To the tasks of the job's steps, where train runs; not to the batch shell (no --full).
  const CommandResult r = run_slurm({"scancel", "--signal=" + spec.name, request.job_id});
  if (r.exit_code != 0) {
    throw ConfigError("scancel --signal=" + spec.name + " " + request.job_id + ": expected the signal to be sent, "
                          "found exit code " + std::to_string(r.exit_code) + ": " + trim(r.err + r.out) + ".",
                      "check the job with trainctl status " + request.job_id + ".");
  }
  const auto t0 = std::chrono::steady_clock::now();
  const bool stopped = wait_until_stopped(request, running_restarts, t0);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.1f", waited);
  return report + "job " + request.job_id + ": sent SIG" + spec.name + " to its tasks; " +
         (stopped ? std::string("they stopped after ") + secs + " s"
                  : "they were still running after " + std::to_string(int(request.grace_seconds)) +
                        " s (--grace), cancelling anyway") +
         ".\n";
}

/// The job's tasks as the controller knows them now; none once it has forgotten the job.
std::vector<JobInfo> jobs_now(const std::string& job_id) {
  std::vector<JobInfo> left;
  try {
    left = query_jobs(job_id);
  } catch (const ConfigError&) {
  }
  return left;
}

/// scancel for the tasks still pending or running; the tasks may all have ended after the signal.
std::string cancel_remaining(const std::string& job_id, const std::vector<JobInfo>& left) {
  const bool cancel_needed = std::any_of(left.begin(), left.end(), [](const JobInfo& j) {
    return !j.from_jobcomp && !is_final_state(j.state);
  });
  if (!cancel_needed) {
    return "job " + job_id + ": already ended (" + (left.empty() ? std::string("gone") : left.front().state) +
           "), nothing left to cancel.\n";
  }
  const CommandResult r = run_slurm({"scancel", job_id});
  if (r.exit_code != 0) {
    throw ConfigError("scancel " + job_id + ": expected the job to be cancelled, found exit code " +
                          std::to_string(r.exit_code) + ": " + trim(r.err + r.out) + ".",
                      "check the job with trainctl status " + job_id + " (or squeue -j " + job_id + ").");
  }
  return "job " + job_id + ": cancelled (scancel).\n";
}

/// One line per task with a checkpoint: where a resubmitted job would resume from.
std::string newest_checkpoints(const std::vector<JobInfo>& jobs) {
  std::string report;
  for (const JobInfo& j : jobs) {
    const JobProgress p = job_progress(j);
    if (!p.checkpoint.empty()) report += "job " + j.id + ": newest checkpoint " + p.checkpoint + "\n";
  }
  return report;
}

}  // namespace

std::string cancel_job(const CancelRequest& request) {
  const std::vector<JobInfo> jobs = query_jobs(request.job_id);
  check_something_to_cancel(request.job_id, jobs);
  require_program("scancel");
  std::string report;
  if (!request.signal.empty()) report += signal_running_tasks(request, jobs);
  const std::vector<JobInfo> left = jobs_now(request.job_id);
  report += cancel_remaining(request.job_id, left);
  if (!request.signal.empty()) report += newest_checkpoints(left.empty() ? jobs : left);
  return report;
}

}  // namespace train
