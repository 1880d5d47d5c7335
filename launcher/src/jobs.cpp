// `trainctl status`: asks the controller with scontrol (always through train::run_command with a
// timeout), falls back to the jobcomp log for forgotten jobs, and reads the jobs' run records (their
// folders, state and restarts), logs and metrics files. `logs` and `cancel` are in job_control.cpp.
#include "train/launcher/jobs.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "train/base/error.h"
#include "train/base/text.h"
#include "train/base/files.h"
#include "train/base/env.h"
#include "train/launcher/local_launch.h"
#include "train/launcher/restart.h"
#include "train/launcher/sbatch.h"
#include "train/base/run_record.h"
#include "train/base/subprocess.h"
#include "slurm_client.h"

namespace train {
namespace {

using text::trim;

/// Seconds scontrol and scancel get: the controller answers in milliseconds, an unreachable one
/// makes them retry for about 10 s.
constexpr double kSlurmTimeoutSeconds = 15;

std::string value_of(const KeyValues& kv, const std::string& key) {
  const auto it = kv.find(key);
  if (it == kv.end() || it->second == "(null)") return "";
  return it->second;
}

int int_of(const KeyValues& kv, const std::string& key) {
  const std::string v = value_of(kv, key);
  if (v.empty() || std::isdigit(static_cast<unsigned char>(v[0])) == 0) return 0;
  try {
    return std::stoi(v);
  } catch (const std::exception&) {
    return 0;
  }
}

JobInfo job_from(const KeyValues& kv) {
  JobInfo j;
  j.job_id = value_of(kv, "JobId");
  j.array_job_id = value_of(kv, "ArrayJobId");
  j.array_task_id = value_of(kv, "ArrayTaskId");
  j.id = j.job_id;
  // An array's own record, once no task is left pending (the rest cancelled: `scancel --state=PENDING`
  // at the end of a chain), has no task id: scontrol prints NO_VAL (4294967294), squeue the job id alone.
  const bool no_task = j.array_task_id == "4294967294" || j.array_task_id == "4294967295";
  if (!j.array_job_id.empty() && !j.array_task_id.empty() && !no_task) {
    const bool single = std::all_of(j.array_task_id.begin(), j.array_task_id.end(),
                                    [](unsigned char c) { return std::isdigit(c) != 0; });
    j.id = j.array_job_id + "_" + (single ? j.array_task_id : "[" + j.array_task_id + "]");
  }
  j.name = value_of(kv, "JobName");
  if (j.name.empty()) j.name = value_of(kv, "Name");  // the jobcomp log's spelling
  j.user = value_of(kv, "UserId");
  j.user = j.user.substr(0, j.user.find('('));
  j.state = value_of(kv, "JobState");
  j.reason = value_of(kv, "Reason");
  j.elapsed = value_of(kv, "RunTime");
  j.time_limit = value_of(kv, "TimeLimit");
  j.nodes = value_of(kv, "NodeList");
  j.restarts = int_of(kv, "Restarts");
  j.std_out = value_of(kv, "StdOut");
  j.std_err = value_of(kv, "StdErr");
  if (no_task) j.std_out = j.std_err = "";  // it never ran: its %a-expanded log name names no file
  j.work_dir = value_of(kv, "WorkDir");
  j.partition = value_of(kv, "Partition");
  j.num_tasks = int_of(kv, "NumTasks");
  return j;
}

/// The jobcomp/filetxt log's path from `scontrol show config`, "" when the cluster keeps none.
std::string jobcomp_path() {
  const CommandResult r = run_slurm({"scontrol", "show", "config"});
  if (r.exit_code != 0) return "";
  std::string type, loc;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = trim(line.substr(0, eq));
    if (key == "JobCompType") type = trim(line.substr(eq + 1));
    if (key == "JobCompLoc") loc = trim(line.substr(eq + 1));
  }
  return type == "jobcomp/filetxt" && !loc.empty() && loc[0] == '/' ? loc : "";
}

}  // namespace

void require_program(const std::string& name) {
  try {
    find_program(name, current_environment());
  } catch (const ConfigError&) {
    throw ConfigError(name + ": expected SLURM's " + name + " on PATH, found none.",
                      "run trainctl on the cluster's login node (SLURM's client tools must be installed there).");
  }
}

/// Runs a SLURM client command; throws when it can't run or hangs, returns its result otherwise.
CommandResult run_slurm(const std::vector<std::string>& argv) {
  require_program(argv.front());
  CommandResult r = run_command(argv, "", kSlurmTimeoutSeconds);
  if (!r.started) {
    throw ConfigError(argv.front() + ": expected it to run, found it could not be started.",
                      "check that SLURM's client tools are installed and executable.");
  }
  if (r.timed_out) {
    throw ConfigError(argv.front() + ": expected an answer within " + std::to_string(int(kSlurmTimeoutSeconds)) +
                          " s, found none (killed).",
                      "the controller may be down or overloaded; check with scontrol ping and sinfo.");
  }
  return r;
}

std::vector<KeyValues> parse_key_value_lines(const std::string& text) {
  static const std::regex kKey(R"(^[A-Za-z][A-Za-z0-9_:/]*=)");
  std::vector<KeyValues> records;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty()) continue;
    KeyValues kv;
    std::string key;
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      std::smatch m;
      if (std::regex_search(word, m, kKey)) {
        key = word.substr(0, m.length(0) - 1);
        kv[key] = word.substr(m.length(0));
      } else if (!key.empty()) {
        kv[key] += " " + word;  // a value with spaces
      }
    }
    if (!kv.empty()) records.push_back(std::move(kv));
  }
  return records;
}

std::vector<JobInfo> parse_scontrol_jobs(const std::string& text) {
  std::vector<JobInfo> jobs;
  for (const KeyValues& kv : parse_key_value_lines(text)) {
    if (kv.count("JobId") != 0) jobs.push_back(job_from(kv));
  }
  return jobs;
}

std::vector<JobInfo> parse_jobcomp(const std::string& text) {
  std::vector<JobInfo> jobs = parse_scontrol_jobs(text);
  for (JobInfo& j : jobs) j.from_jobcomp = true;
  return jobs;
}

bool is_final_state(const std::string& state) {
  static const std::set<std::string> kFinal = {"COMPLETED", "FAILED",    "CANCELLED", "TIMEOUT",  "NODE_FAIL",
                                               "PREEMPTED", "BOOT_FAIL", "DEADLINE",  "OUT_OF_MEMORY",
                                               "SPECIAL_EXIT", "REVOKED"};
  return kFinal.count(state) != 0;
}

void check_job_id(const std::string& id) {
  static const std::regex kId(R"(^[0-9]+(_([0-9]+|\[[0-9,%\-]+\]))?$)");
  if (!std::regex_match(id, kId)) {
    throw ConfigError("JOBID '" + id + "': expected a job id such as 12, or 12_3 for task 3 of array 12, found '" + id +
                          "'.",
                      "trainctl status (or squeue -u $USER) lists your jobs' ids.");
  }
}

std::vector<JobInfo> query_jobs(const std::string& id) {
  if (!id.empty()) check_job_id(id);
  std::vector<std::string> argv = {"scontrol", "show", "job", "-o"};
  if (!id.empty()) argv.push_back(id);
  const CommandResult r = run_slurm(argv);
  if (r.exit_code == 0) {
    std::vector<JobInfo> jobs = parse_scontrol_jobs(r.out);
    // scontrol lists the newest first; users read job and task ids upwards.
    const auto key = [](const JobInfo& j) {
      const std::string& base = j.array_job_id.empty() ? j.job_id : j.array_job_id;
      const std::string& task = j.array_task_id;
      const bool single = !task.empty() && task.size() < 10 && task.find_first_not_of("0123456789") == std::string::npos;
      const long order = task.empty() ? -1L : single ? std::stol(task) : 1L << 40;  // pending groups last
      return std::make_tuple(base.size(), base, order);
    };
    std::stable_sort(jobs.begin(), jobs.end(), [&](const JobInfo& a, const JobInfo& b) { return key(a) < key(b); });
    if (!jobs.empty() || id.empty()) return jobs;
  }
  const std::string message = trim(r.err + r.out);
  const bool unknown = r.exit_code == 0 || message.find("Invalid job id") != std::string::npos;
  if (id.empty() || !unknown) {
    throw ConfigError("scontrol show job" + (id.empty() ? std::string() : " " + id) +
                          ": expected the controller's list of jobs, found exit code " + std::to_string(r.exit_code) +
                          ": " + message + ".",
                      "check that the controller answers (scontrol ping) and that SLURM_CONF names this cluster.");
  }
  // Forgotten by the controller (MinJobAge after its end): the completion log may still have it.
  const std::string log = jobcomp_path();
  if (!log.empty()) {
    std::vector<JobInfo> found;
    for (const JobInfo& j : parse_jobcomp(files::read_text(log))) {
      if (j.job_id == id) found = {j};  // the last record of a requeued job is its last run
    }
    if (!found.empty()) return found;
  }
  throw ConfigError("JOBID " + id + ": expected a job the controller knows (scontrol show job" +
                        std::string(log.empty() ? "" : ") or the job completion log (" + log) +
                        "), found no job with that id.",
                    "check the id with trainctl status or squeue -u $USER; the controller forgets finished jobs "
                    "MinJobAge seconds after they end (scontrol show config | grep MinJobAge).");
}

std::vector<JobInfo> jobs_under(const std::vector<JobInfo>& jobs, const std::string& user, const std::string& folder) {
  std::vector<JobInfo> out;
  std::string prefix = folder;
  while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
  for (const JobInfo& j : jobs) {
    if (!user.empty() && j.user != user) continue;
    const bool under = j.work_dir == prefix || (j.work_dir.rfind(prefix + "/", 0) == 0) || prefix == "/";
    if (under) out.push_back(j);
  }
  return out;
}

std::string newest_checkpoint(const std::string& dir) {
  static const std::regex kName(R"(ckpt-(\d+)\.pt)");
  long best = -1;
  std::string found;
  for (const std::string& name : files::list_dir(dir)) {
    std::smatch m;
    if (!std::regex_match(name, m, kName)) continue;
    const long step = std::stol(m[1]);
    if (step > best) {
      best = step;
      found = files::join(dir, name);
    }
  }
  return found;
}

std::string last_metrics_line(const std::string& log_text) {
  std::string json, progress;
  std::istringstream in(log_text);
  std::string line;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (t.empty()) continue;
    if (t.front() == '{' && t.back() == '}') json = t;
    if (t.find("Test set:") != std::string::npos || t.find("Train Epoch") != std::string::npos) progress = t;
  }
  return json.empty() ? progress : json;
}

JobProgress job_progress(const JobInfo& job) {
  JobProgress p;
  p.log = job.std_out;
  std::string text;
  if (!p.log.empty() && p.log.find('%') == std::string::npos) text = files::read_text(p.log, &p.log_exists);
  // The folders come from the run record train and trainctl run keep (train/base/run_record.h), not the log.
  if (!job.work_dir.empty() && !job.job_id.empty()) {
    p.record = RunRecord::path_for(job.work_dir, job.job_id);
    try {
      p.run = RunRecord::load(p.record);
    } catch (const ConfigError& e) {
      p.record_problem = e.what();
    }
  }
  std::string metrics_file;
  if (p.run) {
    p.checkpoint_dir = p.run->checkpoint_dir;
    p.checkpoint = p.run->last_checkpoint;
    if (p.checkpoint.empty() && !p.checkpoint_dir.empty()) p.checkpoint = newest_checkpoint(p.checkpoint_dir);
    p.tensorboard_dir = p.run->tensorboard_dir;
    // A sweep's task writes its epoch lines to its own metrics file; train's done line, once
    // there, is the last JSON line of the log.
    if (!p.run->metrics_file.empty()) metrics_file = files::read_text(p.run->metrics_file);
  }
  if (!p.log_exists) return p;
  std::string metrics = last_metrics_line(metrics_file + "\n" + text);
  // With --per-rank-logs, train's lines are in the ranks' files; rank 0 logs the progress.
  if (metrics.empty()) metrics = last_metrics_line(files::read_text(rank_log_path(p.log, 0)));
  p.metrics = metrics;
  return p;
}

std::string pending_reason_text(const std::string& reason) {
  static const std::map<std::string, std::string> kReasons = {
      {"Priority", "other jobs come first; it starts when they have run (squeue --start shows an estimate)."},
      {"Resources", "it is next, waiting for nodes to free up (trainctl resources shows what is in use)."},
      {"JobArrayTaskLimit", "the array's %N throttle: it starts when a running task of the array ends."},
      {"BeginTime", "it may not start before its begin time (a requeued job waits a moment before it runs again)."},
      {"Dependency", "it waits for the job it depends on (--dependency)."},
      {"DependencyNeverSatisfied", "it will never start: the job it depends on failed. Cancel it (trainctl cancel)."},
      {"PartitionTimeLimit", "it will never start: its --time is above the partition's MaxTime. Cancel it and resubmit "
                             "with a shorter --time (trainctl resources shows the limits)."},
      {"PartitionNodeLimit", "it will never start: it asks for more nodes than the partition allows. Cancel it and ask "
                             "for fewer (trainctl resources)."},
      {"ReqNodeNotAvail", "a node it needs is down, drained or reserved (trainctl resources shows node states)."},
      {"PartitionDown", "its partition is down; it starts when an administrator brings it up."},
      {"PartitionInactive", "its partition is inactive; it starts when an administrator brings it up."},
      {"QOSMaxJobsPerUserLimit", "you have as many jobs running as your QOS allows; it starts when one ends."},
      {"AssocGrpGRES", "your account's GPU limit is reached; it starts when your other jobs free GPUs."},
      {"AssocGrpCpuLimit", "your account's CPU limit is reached; it starts when your other jobs free CPUs."},
      {"InvalidAccount", "it will never start: the account is not valid here. Cancel it and resubmit with --account."},
      {"InvalidQOS", "it will never start: the QOS is not valid here. Cancel it and resubmit with --qos."},
      {"BadConstraints", "it will never start: no node has the requested features. Cancel it and check --constraint."},
      {"JobHeldUser", "you held it (scontrol hold): scontrol release JOBID lets it start."},
      {"JobHeldAdmin", "an administrator held it; ask them, or cancel it."},
  };
  const auto it = kReasons.find(reason);
  return it == kReasons.end() ? "" : it->second;
}

namespace {

// The run record's lines of a job in `trainctl status`: the run's state and its restarts.
std::string render_run(const JobProgress& p) {
  if (!p.record_problem.empty()) return "  run record  " + p.record_problem + "\n";
  if (!p.run) return "";
  const RunRecord& r = *p.run;
  std::string out;
  if (!r.state.empty()) {
    out += "  run         " + r.state + (r.step > 0 ? ", step " + std::to_string(r.step) : "") +
           (r.epoch > 0 ? ", epoch " + std::to_string(r.epoch) : "") +
           (r.world_size > 0 ? ", " + std::to_string(r.world_size) + " rank(s)" : "") + "\n";
  }
  if (!r.restarts.empty()) {
    out += "  restarts    " + std::to_string(r.restarts.size()) + " in the allocation (trainctl run); last: " +
           describe_restart(r.restarts.back(), 0) + "\n";
  }
  return out;
}

}  // namespace

std::string render_status(const std::vector<JobInfo>& jobs, const std::vector<JobProgress>& progress) {
  std::vector<std::vector<std::string>> rows = {{"JOBID", "NAME", "STATE", "REASON", "ELAPSED", "NODES", "RESTARTS"}};
  for (const JobInfo& j : jobs) {
    rows.push_back({j.id, j.name.empty() ? "-" : j.name, j.state + (j.from_jobcomp ? " (ended)" : ""),
                    j.reason.empty() || j.reason == "None" ? "-" : j.reason, j.elapsed.empty() ? "-" : j.elapsed,
                    j.nodes.empty() ? "-" : j.nodes, std::to_string(j.restarts)});
  }
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::string line;
    for (std::size_t c = 0; c < rows[r].size(); ++c) {
      line += rows[r][c];
      if (c + 1 < rows[r].size()) line += std::string(width[c] - rows[r][c].size() + 2, ' ');
    }
    out += line + "\n";
  }
  for (std::size_t i = 0; i < jobs.size() && i < progress.size(); ++i) {
    const JobProgress& p = progress[i];
    out += "\n" + jobs[i].id + ":\n";
    if (jobs[i].state == "PENDING") {
      const std::string why = pending_reason_text(jobs[i].reason);
      if (!why.empty()) out += "  waiting     " + jobs[i].reason + ": " + why + "\n";
    }
    const std::string missing = is_final_state(jobs[i].state) ? " (no such file)" : " (not written yet)";
    out += "  log         " + (p.log.empty() ? std::string("-") : p.log + (p.log_exists ? "" : missing)) + "\n";
    out += "  checkpoint  " +
           (!p.checkpoint.empty()       ? p.checkpoint
            : !p.checkpoint_dir.empty() ? "none yet in " + p.checkpoint_dir
                                        : std::string("-")) +
           "\n";
    if (!p.tensorboard_dir.empty()) out += "  tensorboard " + p.tensorboard_dir + "\n";
    out += render_run(p);
    out += "  metrics     " + (p.metrics.empty() ? std::string("-") : p.metrics) + "\n";
  }
  return out;
}

}  // namespace train
