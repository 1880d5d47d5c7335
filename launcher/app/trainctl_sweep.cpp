// trainctl's subcommands for comparing runs: sweep (a grid as a job array), sweep-report and plot.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "train/base/error.h"
#include "train/base/files.h"
#include "train/launcher/job_requests.h"
#include "train/launcher/plotting.h"
#include "train/launcher/sbatch.h"
#include "train/launcher/sweep.h"
#include "train/base/subprocess.h"
#include "trainctl.h"

namespace trainctl {
namespace {

/// `trainctl sweep`'s action once its options are parsed (train's arguments included): checks the
/// grid, writes the script, the index and the run folders under `dir`, and with --submit submits.
int run_sweep(train::SbatchOptions& o, const std::vector<std::string>& params, const std::string& dir, int throttle,
              const CLI::App& cmd, const std::vector<std::string>& before_dashes) {
  const train::SweepPlan sweep = train::plan_sweep(o, params, dir, throttle, current_folder());
  o.command = train::recorded_command(before_dashes, o.train_args);
  const train::SbatchPlan plan = plan_job(o, cmd, /*with_plan_warnings=*/true);
  const std::string script = train::render_sbatch_script(o, plan);

  train::make_sweep_task_dirs(sweep, dir);
  train::SweepIndex index = train::sweep_index(sweep, plan.job_name, o.train_args);
  write_file(sweep.script_path, script, "--output-dir", 0755);
  write_file(sweep.index_path, train::render_sweep_index(index), "--output-dir");
  if (cmd.count("--submit") == 0) return print(train::render_sweep_written(sweep));
  const std::string id = train::sbatch_submit(script, plan.output);
  index.job_id = id;
  write_file(sweep.index_path, train::render_sweep_index(index), "--output-dir");
  std::cerr << "trainctl sweep: submitted array job " << id << " (" << sweep.grid.size() << " tasks, at most "
            << sweep.at_once << " at once), run folders " << sweep.root << "/task-N; follow it with trainctl status "
            << id << ", then trainctl sweep-report " << dir << std::endl;
  return print(id + "\n");
}

}  // namespace

Command add_sweep(CLI::App& app, const std::vector<std::string>& before_dashes,
                  const std::vector<std::string>& after_dashes) {
  auto* cmd = add_command(app, "sweep", "Run a hyperparameter grid as one SLURM job array, one task per combination",
      "Writes DIR/sweep.sh (the batch script, as trainctl sbatch makes it, with #SBATCH --array=0-N%T),\n"
      "DIR/sweep.json (the index: task id -> parameters) and one run folder DIR/task-ID per task, which\n"
      "gets the task's log (train.out), checkpoints and metrics.jsonl. Task ID trains with its\n"
      "combination appended as --NAME VALUE. --submit submits the array and prints its job id.\n"
      "Example:\n"
      "  trainctl sweep --param lr=0.1,0.5,1.0 --param batch-size=64,128 --throttle 2 --nodes 1 \\\n"
      "      --output-dir sweeps/lr-bs --submit -- --epochs 2\n"
      "Then: trainctl status ARRAYID, trainctl sweep-report sweeps/lr-bs. See docs/workflow.md.\n");
  auto o = std::make_shared<train::SbatchOptions>();
  auto params = std::make_shared<std::vector<std::string>>();
  auto dir = std::make_shared<std::string>();
  auto throttle = std::make_shared<int>(0);
  cmd->add_option("--param", *params, "NAME=V1,V2,...: train's --NAME takes each value (repeatable; the grid is every combination)")
      ->allow_extra_args(false)
      ->type_name("NAME=VALUES");
  cmd->add_option("--output-dir", *dir, "the sweep's folder: script, index and one run folder per task; required")
      ->type_name("DIR");
  cmd->add_option("--throttle", *throttle, "at most N tasks at once (the array's %N; default: all)")
      ->check(CLI::Range(1, train::kMaxSweepTasks))
      ->type_name("N");
  add_shape_options(cmd, *o);
  add_batch_options(cmd, *o);
  cmd->add_flag("--submit", "submit the array with sbatch and print its job id");
  add_no_cluster_checks_flag(cmd);
  cmd->add_option("TRAIN_ARGS", o->train_args, "arguments every task gives train, after '--'");
  return {cmd, [o, params, dir, throttle, cmd, &before_dashes, &after_dashes]() {
    o->train_args.insert(o->train_args.end(), after_dashes.begin(), after_dashes.end());
    return run_sweep(*o, *params, *dir, *throttle, *cmd, before_dashes);
  }};
}

Command add_sweep_report(CLI::App& app) {
  auto* cmd = add_command(app, "sweep-report", "Print a table (and a PNG) of a sweep's final metrics per combination",
      "Reads DIR/sweep.json and each task's DIR/task-ID/metrics.jsonl, prints one row per task: its\n"
      "parameters, status (done, epoch N while running, no metrics) and the final test_accuracy,\n"
      "test_loss, train_loss, epochs and images_per_sec. Writes DIR/sweep-report.csv, and\n"
      "DIR/sweep-report.png with matplotlib or gnuplot when one is available. Example:\n"
      "  trainctl sweep-report sweeps/lr-bs\n");
  auto dir = std::make_shared<std::string>();
  auto metric = std::make_shared<std::string>("test_accuracy");
  auto no_png = std::make_shared<bool>(false);
  cmd->add_option("DIR", *dir, "the sweep's --output-dir; required")->type_name("DIR");
  cmd->add_option("--metric", *metric, "the metric the PNG plots")->capture_default_str();
  cmd->add_flag("--no-png", *no_png, "print the table only");
  return {cmd, [dir, metric, no_png]() {
    require_given(!dir->empty(), "DIR", "a sweep's --output-dir", "e.g. trainctl sweep-report sweeps/lr-bs.");
    const auto [index, results] = train::read_sweep(*dir);
    int rc = print(train::render_sweep_table(index, results));
    if (rc != 0) return rc;
    const std::string csv = train::files::join(*dir, "sweep-report.csv");
    write_file(csv, train::render_sweep_csv(index, results), "sweep-report");
    if (!*no_png) {
      std::cerr << "trainctl sweep-report: "
                << train::draw_sweep_png(csv, train::files::join(*dir, "sweep-report.png"), *metric, index, results,
                                         scripts_folder(), train_python())
                << std::endl;
    }
    return 0;
  }};
}

Command add_plot(CLI::App& app) {
  auto* cmd = add_command(app, "plot", "Draw training curves from train --metrics files into a PNG, one line per file",
      "Reads the JSON lines `train --metrics FILE` writes and draws three panels: loss per epoch (train\n"
      "and test), test accuracy per epoch, and images/s per logged step, one line per file so runs\n"
      "compare. Needs Python with matplotlib (TRAIN_PYTHON, else the repository's .venv, then python3).\n"
      "Example:\n"
      "  trainctl plot run-a/metrics.jsonl run-b/metrics.jsonl -o curves.png\n");
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto width = std::make_shared<int>(1200);
  auto height = std::make_shared<int>(400);
  cmd->add_option("METRICS", *inputs, "metrics files (train --metrics), one or more")->type_name("FILE...");
  cmd->add_option("-o,--output", *out, "the PNG to write; required")->type_name("PNG");
  cmd->add_option("--width", *width, "width in pixels")->check(CLI::Range(200, 8000))->capture_default_str();
  cmd->add_option("--height", *height, "height in pixels")->check(CLI::Range(150, 8000))->capture_default_str();
  return {cmd, [inputs, out, width, height]() {
    const std::string example = "e.g. trainctl plot metrics.jsonl -o curves.png.";
    require_given(!inputs->empty(), "METRICS", "one or more files written by train --metrics", example);
    require_given(!out->empty(), "-o", "the PNG to write", example);
    train::check_metrics_files(*inputs);
    const std::string scripts = scripts_folder();
    const std::string python = train::plot_python(scripts, train_python());
    const std::vector<std::string> argv = train::plot_command(python, scripts, *out, *width, *height, *inputs);
    const train::CommandResult r = train::run_command(argv, "", 120);
    if (!r.started || r.timed_out || r.exit_code != 0) {
      std::string why = r.err;
      while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
      throw train::DataError("trainctl plot: expected " + scripts + "/plot_metrics.py to write " + *out + ", found " +
                                 (r.timed_out ? std::string("it still running after 120 s") :
                                  !r.started  ? std::string("that " + python + " could not start")
                                              : "exit " + std::to_string(r.exit_code) + ": " + why),
                             "check the metrics files named above (one JSON object per line, as train --metrics writes).");
    }
    std::cerr << "trainctl plot: wrote " << *out << " (" << *width << "x" << *height << ", " << inputs->size()
              << (inputs->size() == 1 ? " run)" : " runs)") << std::endl;
    return 0;
  }};
}

}  // namespace trainctl
