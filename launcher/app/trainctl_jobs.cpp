// trainctl's subcommands for submitted jobs: status, logs and cancel.
#include <memory>
#include <string>
#include <vector>

#include "train/launcher/jobs.h"
#include "trainctl.h"

namespace trainctl {

Command add_status(CLI::App& app) {
  auto* cmd = add_command(app, "status", "Show your jobs of this project: state, reason, elapsed, nodes, requeues and restarts, checkpoint, TensorBoard folder, metrics",
      "Without JOBID: your jobs that the controller knows (pending, running, or ended within\n"
      "MinJobAge) submitted from this folder or below it; --all shows all your jobs. With JOBID\n"
      "(an array's id shows all its tasks): that job, also from the job completion log once the\n"
      "controller has forgotten it. For each job: its log; from the run record train and trainctl\n"
      "run keep (WORKDIR/.train/runs/JOBID.json), its newest checkpoint, TensorBoard folder, state,\n"
      "step and restarts inside the allocation (count, and the last one's cause and nodes); and its\n"
      "last metrics line. Examples:\n"
      "  trainctl status\n"
      "  trainctl status 1234\n");
  auto id = std::make_shared<std::string>();
  auto all = std::make_shared<bool>(false);
  cmd->add_option("JOBID", *id, "a job id, ARRAY_TASK for an array task; default: your jobs of this project");
  cmd->add_flag("--all", *all, "all your jobs, wherever they were submitted from");
  return {cmd, [id, all]() {
    std::vector<train::JobInfo> jobs = train::query_jobs(*id);
    if (id->empty()) jobs = train::jobs_under(jobs, user_name(), *all ? "/" : current_folder());
    if (jobs.empty()) {
      return print("No jobs of " + user_name() + (*all ? "" : " submitted from " + current_folder() + " or below") +
                   " (scontrol show job)." + (*all ? "" : " --all lists all your jobs.") + "\n");
    }
    std::vector<train::JobProgress> progress;
    for (const train::JobInfo& j : jobs) progress.push_back(train::job_progress(j));
    return print(train::render_status(jobs, progress));
  }};
}

Command add_logs(CLI::App& app) {
  auto* cmd = add_command(app, "logs", "Print (or -f follow) a job's log, per rank where it is split",
      "Prints the job's log (StdOut in scontrol show job); where srun wrote one file per rank\n"
      "(trainctl sbatch --per-rank-logs: LOG-R.EXT), their lines follow with an '[rR] ' prefix.\n"
      "--rank R prints rank R's own file, else the log's lines with train's '[rank R/' prefix (train\n"
      "logs info lines from rank 0 only unless told to log every rank). -f follows until the job ends.\n"
      "Examples:\n"
      "  trainctl logs 1234 -f\n"
      "  trainctl logs 1234_2 --rank 1\n");
  auto r = std::make_shared<train::LogsRequest>();
  cmd->add_option("JOBID", r->job_id, "the job (ARRAY_TASK for an array's task); required");
  cmd->add_flag("-f,--follow", r->follow, "keep printing new lines until the job ends");
  cmd->add_option("--rank", r->rank, "only this rank's lines")->check(CLI::Range(0, 1 << 20))->type_name("R");
  cmd->add_flag("--err", r->errors, "the job's --error file instead of its log");
  return {cmd, [r]() {
    require_given(!r->job_id.empty(), "JOBID", "the job whose log to show",
                  "e.g. trainctl logs 1234; trainctl status lists your jobs.");
    return train::show_logs(*r, [](const std::string& text) { return print(text) == 0; });
  }};
}

Command add_cancel(CLI::App& app) {
  auto* cmd = add_command(app, "cancel", "Cancel a job, with --signal SIG to let train checkpoint first",
      "Without --signal: scancel JOBID. With --signal SIG (USR2 for the generated scripts): sends SIG\n"
      "to the job's tasks (scancel --signal, not the batch shell), waits up to --grace seconds until\n"
      "they stop (train saves a checkpoint and exits), then cancels what is left, and prints the\n"
      "newest checkpoint. Example:\n"
      "  trainctl cancel 1234 --signal USR2\n");
  auto r = std::make_shared<train::CancelRequest>();
  cmd->add_option("JOBID", r->job_id, "the job (or array) to cancel; required");
  cmd->add_option("--signal", r->signal, "signal train checkpoints on (USR2, its default --preempt-signals, or TERM) to send first")
      ->type_name("SIG");
  cmd->add_option("--grace", r->grace_seconds, "seconds to wait for the tasks to stop after --signal")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  return {cmd, [r]() {
    require_given(!r->job_id.empty(), "JOBID", "the job to cancel",
                  "e.g. trainctl cancel 1234 --signal USR2; trainctl status lists your jobs.");
    return print(train::cancel_job(*r));
  }};
}

}  // namespace trainctl
