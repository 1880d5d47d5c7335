// `trainctl status`, `logs` and `cancel`: the user's jobs as SLURM's controller describes them
// (`scontrol show job -o`, or the job completion log once the controller has forgotten a job), their
// logs (per rank where srun split them), checkpoints and metrics. No LibTorch. See docs/workflow.md.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "train/base/run_record.h"

namespace train {

/// One record of SLURM's key=value text: a line of `scontrol show job -o`, `scontrol show node -o`
/// or of the jobcomp/filetxt log.
using KeyValues = std::map<std::string, std::string>;

/// Parses key=value text, one record per non-empty line. A value runs up to the next " Key=" (so
/// values may hold spaces and '='); "(null)" stays as it is.
std::vector<KeyValues> parse_key_value_lines(const std::string& text);

/// A job (or an array task) as the controller or the completion log describes it.
struct JobInfo {
  std::string id;             ///< as users write it: "12", or "12_3" for task 3 of array 12
  std::string job_id;         ///< JobId, SLURM's own number for this job or task
  std::string array_job_id;   ///< ArrayJobId, "" when not in an array
  std::string array_task_id;  ///< ArrayTaskId ("3", or "2-3%2" for tasks still pending together)
  std::string name;           ///< JobName
  std::string user;           ///< UserId without the "(uid)"
  std::string state;          ///< JobState: PENDING, RUNNING, COMPLETED, ...
  std::string reason;         ///< Reason ("None" while nothing holds it)
  std::string elapsed;        ///< RunTime, e.g. 00:01:05
  std::string time_limit;     ///< TimeLimit
  std::string nodes;          ///< NodeList ("" while pending)
  int restarts = 0;           ///< Restarts: how often it was requeued
  std::string std_out;        ///< StdOut: the log file's path
  std::string std_err;        ///< StdErr
  std::string work_dir;       ///< WorkDir: where it was submitted from
  std::string partition;      ///< Partition
  int num_tasks = 0;          ///< NumTasks
  bool from_jobcomp = false;  ///< true when only the completion log still knows it
};

/// The jobs in `scontrol show job -o` output.
std::vector<JobInfo> parse_scontrol_jobs(const std::string& text);

/// The jobs in a jobcomp/filetxt log (one line per finished run; a requeued job has several).
std::vector<JobInfo> parse_jobcomp(const std::string& text);

/// Whether a job in this state has ended for good (COMPLETED, FAILED, CANCELLED, TIMEOUT, ...).
bool is_final_state(const std::string& state);

/// Checks a job id as users type it: N, N_T (an array task) or N_[...]. 
/// @throws train::ConfigError for anything else.
void check_job_id(const std::string& id);

/// The jobs the controller knows (`scontrol show job -o [ID]`, 15 s at most); for an array's id,
/// all its tasks. With an id the controller has forgotten, the job completion log's last record of it
/// (jobcomp/filetxt, as `scontrol show config` names it).
/// @param id a job id, or "" for all jobs.
/// @throws train::ConfigError when scontrol is missing or fails, or `id` is known nowhere.
std::vector<JobInfo> query_jobs(const std::string& id);

/// The jobs of `user` whose WorkDir is `folder` or below it (the jobs of the project in `folder`).
std::vector<JobInfo> jobs_under(const std::vector<JobInfo>& jobs, const std::string& user, const std::string& folder);

/// What a job's files say about it.
struct JobProgress {
  std::string log;             ///< the log's path ("" when unknown)
  bool log_exists = false;
  std::string record;          ///< the run record's path (RunRecord::path_for the job's WorkDir and id)
  std::optional<RunRecord> run;   ///< the run record, when train or trainctl run wrote one
  std::string record_problem;  ///< why the record could not be read ("" when fine or missing)
  std::string checkpoint_dir;  ///< the run record's checkpoint folder
  std::string checkpoint;      ///< the record's last checkpoint, else the newest ckpt-N.pt there, "" when none
  std::string tensorboard_dir; ///< where train writes TensorBoard event files (the run record's, "" when none)
  std::string metrics;         ///< the last metrics line: JSON from the metrics file or log, else a progress line
};

/// The newest checkpoint (highest step N of ckpt-N.pt) in a folder, "" when there is none.
std::string newest_checkpoint(const std::string& dir);

/// The last metrics line of a log: a JSON object line, else train's last "Test set:" or
/// "Train Epoch" line; "" when there is none.
std::string last_metrics_line(const std::string& log_text);

/// Reads a job's run record (its folders, state and restarts), log and metrics.
JobProgress job_progress(const JobInfo& job);

/// What a pending job's Reason means for the user, and whether it will ever start ("" for reasons
/// without an explanation here).
std::string pending_reason_text(const std::string& reason);

/// The table `trainctl status` prints: one row per job (id, name, state, reason, elapsed, nodes,
/// requeues), then for each job what its pending reason means, its log, newest checkpoint, TensorBoard
/// folder, the run's state and its restarts inside the allocation (from the run record), and last metrics line.
std::string render_status(const std::vector<JobInfo>& jobs, const std::vector<JobProgress>& progress);

/// The file srun wrote for one rank with --per-rank-logs, given the job's log path (logs/x-12.out
/// gives logs/x-12-R.out; see per_rank_pattern).
std::string rank_log_path(const std::string& log_path, int rank);

/// Whether a log line came from rank R: train's "[rank R/W host]" prefix, or trainctl local's "[rR] ".
bool is_rank_line(const std::string& line, int rank);

/// What `trainctl logs` shows.
struct LogsRequest {
  std::string job_id;
  int rank = -1;          ///< only this rank's lines (its own file, else lines with its prefix); -1: all
  bool follow = false;    ///< keep printing until the job ends
  bool errors = false;    ///< the job's --error file instead of its log
  double poll_seconds = 0.5;  ///< how often -f looks at the files and the job's state
};

/// Prints a job's log through `write` (and, where srun split it per rank, each rank's file with an
/// "[rR] " prefix on its lines); with `follow`, keeps printing new lines until the job ends.
/// @return 0, or 1 when writing fails (a closed pipe).
/// @throws train::ConfigError for an unknown job, an array without a task, or no log where one should be.
int show_logs(const LogsRequest& request, const std::function<bool(const std::string&)>& write);

/// What `trainctl cancel` does.
struct CancelRequest {
  std::string job_id;
  std::string signal;          ///< "" to cancel at once, else the signal that makes train checkpoint first
  double grace_seconds = 120;  ///< how long to wait for the tasks to stop after the signal
  double poll_seconds = 0.5;
};

/// Cancels a job with scancel; with a signal, first sends it to the job's tasks (`scancel --signal`,
/// not to the batch shell), waits until they stop (train checkpoints, then exits or requeues), then
/// cancels what is left.
/// @return what happened, for the user.
/// @throws train::ConfigError for an unknown or finished job, a bad signal, or a failing scancel.
std::string cancel_job(const CancelRequest& request);

}  // namespace train
