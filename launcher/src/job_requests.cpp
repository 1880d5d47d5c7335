// What trainctl's job subcommands (sbatch, interactive, sweep) work out before they act; see
// job_requests.h. launcher/app/trainctl_*.cpp parse the flags, call these, then print, write and submit.
#include "train/launcher/job_requests.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "train/base/error.h"
#include "train/base/files.h"
#include "train/base/slurm_time.h"

namespace train {
namespace {

/// Each swept parameter comes from the grid only: a copy after '--' would fight the task's own value.
void check_params_not_in_train_args(const std::vector<SweepParam>& parsed, const std::vector<std::string>& train_args) {
  for (const SweepParam& p : parsed) {
    bool given = false;
    train_flag_value(train_args, {"--" + p.name}, &given);
    if (given) {
      throw ConfigError("--param " + p.name + ": expected --" + p.name + " only in the sweep, found it "
                        "among the train arguments after '--' as well.",
                        "drop --" + p.name + " after '--': each task gets its own value from the grid.");
    }
  }
}

}  // namespace

std::vector<std::string> recorded_command(const std::vector<std::string>& before_dashes,
                                          const std::vector<std::string>& train_args) {
  std::vector<std::string> command;
  for (std::size_t i = 0; i < before_dashes.size(); ++i) {
    const std::string& word = before_dashes[i];
    if (word == "--submit" || word == "--test-only" || word.rfind("--out=", 0) == 0) continue;
    if (word == "--out") {
      ++i;
      continue;
    }
    command.push_back(word);
  }
  if (!train_args.empty()) {
    command.push_back("--");
    command.insert(command.end(), train_args.begin(), train_args.end());
  }
  return command;
}

std::string submitted_log(const std::string& output, const std::string& job_name, const std::string& job_id) {
  std::string log = output;
  for (const auto& [pattern, value] : std::vector<std::pair<std::string, std::string>>{
           {"%x", job_name}, {"%j", job_id}, {"%A", job_id}, {"%a", "*"}}) {
    for (std::size_t at = log.find(pattern); at != std::string::npos; at = log.find(pattern, at + value.size())) {
      log.replace(at, pattern.size(), value);
    }
  }
  return log;
}

std::string render_test_only(const TestOnlyResult& r, std::int64_t now_epoch) {
  std::string text = "sbatch --test-only: the job would start at " + r.start_time + " on " + r.nodes +
                     " in partition " + r.partition + " (" + r.processors + " processors)";
  const std::int64_t at = parse_slurm_timestamp(r.start_time);
  const std::int64_t wait = at == 0 ? 0 : std::max<std::int64_t>(0, at - now_epoch);
  if (wait > 60) {
    text += ", in about " + std::to_string(wait / 3600) + " h " + std::to_string(wait / 60 % 60) +
            " min. Hint: squeue --start -p " + r.partition + " shows the jobs ahead; a shorter --time or "
            "fewer nodes can start sooner (backfill)";
  } else {
    text += ", now";
  }
  return text + ".\n";
}

std::string absolute_path(const std::string& path, const std::string& cwd) {
  const std::string full = !path.empty() && path[0] == '/' ? path : cwd + "/" + path;
  std::string out;
  std::size_t start = 0;
  while (start <= full.size()) {
    std::size_t slash = full.find('/', start);
    if (slash == std::string::npos) slash = full.size();
    const std::string part = full.substr(start, slash - start);
    if (!part.empty() && part != ".") out += "/" + part;
    start = slash + 1;
  }
  return out.empty() ? "/" : out;
}

void prepare_interactive(SbatchOptions& o) {
  o.signal = "none";
  if (o.job_name.empty()) o.job_name = "interactive";
}

std::vector<std::string> salloc_command(const SbatchOptions& o, const SbatchPlan& plan, bool pty) {
  std::vector<std::string> argv = {"salloc"};
  for (const std::string& flag : job_shape_flags(o, plan)) argv.push_back(flag);
  if (pty) {
    for (const char* a : {"srun", "--pty", "--overlap", "--nodes=1", "--ntasks=1"}) argv.push_back(a);
  }
  // The batch script's environment: its --setup lines and SRUN_CPUS_PER_TASK, then an interactive shell.
  std::string code = "set +u";
  for (const std::string& line : o.setup) code += "; " + line;
  code += "; if [[ -n \"${SLURM_CPUS_PER_TASK:-}\" ]]; then export SRUN_CPUS_PER_TASK=\"$SLURM_CPUS_PER_TASK\"; fi";
  code += "; echo \"interactive: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST; srun runs on it, exit ends it\" >&2";
  code += "; exec bash -i";
  argv.push_back("bash");
  argv.push_back("-c");
  argv.push_back(code);
  return argv;
}

std::string command_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& a : argv) line += (line.empty() ? "" : " ") + shell_quote(a);
  return line;
}

SweepPlan plan_sweep(SbatchOptions& o, const std::vector<std::string>& params, const std::string& dir, int throttle,
                     const std::string& cwd) {
  SweepPlan plan;
  for (const std::string& p : params) plan.params.push_back(parse_sweep_param(p));
  plan.grid = sweep_grid(plan.params);
  if (dir.empty()) {
    throw ConfigError("--output-dir: expected the folder that will hold the sweep, found none given.",
                      "e.g. --output-dir sweeps/lr-bs: each task gets its run folder there, and sweep-report reads it.");
  }
  check_params_not_in_train_args(plan.params, o.train_args);
  if (o.job_name.empty()) o.job_name = "sweep";
  plan.root = absolute_path(dir, cwd);
  plan.index_path = files::join(plan.root, kSweepIndexFile);
  plan.script_path = files::join(plan.root, kSweepScriptFile);
  if (files::exists(plan.index_path)) {
    throw ConfigError("--output-dir " + dir + ": expected a new or empty folder, found a sweep there already (" +
                          plan.index_path + ").",
                      "pick another folder, so that the runs of both sweeps stay apart; trainctl "
                      "sweep-report " + dir + " shows the old one.");
  }
  ArrayTasks tasks;
  tasks.run_root = plan.root;
  tasks.throttle = throttle;
  for (const SweepPoint& point : plan.grid) tasks.task_args.push_back(sweep_point_args(point));
  o.array_tasks = tasks;
  const int count = static_cast<int>(plan.grid.size());
  plan.at_once = throttle > 0 ? std::min(throttle, count) : count;
  return plan;
}

void make_sweep_task_dirs(const SweepPlan& plan, const std::string& dir) {
  for (std::size_t i = 0; i < plan.grid.size(); ++i) {
    const std::string task_dir = sweep_task_dir(plan.root, static_cast<int>(i));
    const std::string err = files::make_dirs(task_dir);
    if (!err.empty()) {
      throw ConfigError("--output-dir " + dir + ": expected to create " + task_dir + ", found " + err + ".",
                        "pick a folder you can write to, on a file system the nodes share.");
    }
  }
}

SweepIndex sweep_index(const SweepPlan& plan, const std::string& job_name, const std::vector<std::string>& train_args) {
  SweepIndex index;
  index.job_name = job_name;
  index.output_dir = plan.root;
  for (const SweepParam& p : plan.params) index.param_names.push_back(p.name);
  index.tasks = plan.grid;
  index.train_args = train_args;
  return index;
}

std::string render_sweep_written(const SweepPlan& plan) {
  return "sweep of " + std::to_string(plan.grid.size()) + " tasks (at most " + std::to_string(plan.at_once) +
         " at once) written to " + plan.root + ":\n  script " + plan.script_path + "\n  index  " + plan.index_path +
         "\nSubmit it with: sbatch " + plan.script_path + "   (or rerun with --submit)\n";
}

}  // namespace train
