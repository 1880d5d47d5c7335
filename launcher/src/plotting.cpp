// Drawing helpers of `trainctl plot` and `trainctl sweep-report`; see plotting.h.
#include "train/launcher/plotting.h"

#include <string>
#include <vector>

#include "train/base/text.h"
#include "train/base/error.h"
#include "train/base/files.h"
#include "train/base/subprocess.h"

namespace train {
namespace {

/// Runs a program briefly and says whether it exited 0.
bool runs_ok(const std::vector<std::string>& argv, const std::string& input = "", double timeout_s = 60) {
  const CommandResult r = run_command(argv, input, timeout_s);
  return r.started && !r.timed_out && r.exit_code == 0;
}

}  // namespace

std::string scripts_folder(const std::string& exe, const std::string& source_dir) {
  std::string path = exe;
  for (int up = 0; up < 3 && path.rfind('/') != std::string::npos; ++up) {
    path = path.substr(0, path.rfind('/'));
    if (files::exists(path + "/scripts/sweep_plot.py")) return path + "/scripts";
  }
  return source_dir + "/scripts";
}

std::vector<std::string> python_candidates(const std::string& scripts, const std::string& train_python) {
  if (!train_python.empty()) return {train_python};
  return {scripts.substr(0, scripts.rfind('/')) + "/.venv/bin/python", "python3"};
}

std::string first_python_with(const std::vector<std::string>& candidates, const std::string& module) {
  for (const std::string& python : candidates) {
    if (python.find('/') != std::string::npos && !files::exists(python)) continue;
    if (runs_ok({python, "-c", "import " + module})) return python;
  }
  return "";
}

std::string sweep_gnuplot_script(const std::string& png, const std::string& metric, const std::string& job_name,
                                 const std::vector<SweepResult>& results) {
  std::string data;
  for (const SweepResult& r : results) {
    const auto it = r.metrics.find(metric);
    if (it == r.metrics.end()) continue;
    std::string label;
    for (const auto& [name, value] : r.params) label += (label.empty() ? "" : " ") + name + "=" + value;
    data += "\"" + label + "\" " + std::to_string(it->second) + "\n";
  }
  return "set terminal png size 900,500\nset output '" + png + "'\nset style fill solid\n"
         "set boxwidth 0.6\nset xtics rotate by -30\nset ylabel '" + metric + "'\nset title '" + job_name + ": " +
         metric + " per combination'\n$d << EOD\n" + data + "EOD\nplot $d using 0:2:xtic(1) with boxes notitle\n";
}

std::string draw_sweep_png(const std::string& csv, const std::string& png, const std::string& metric,
                           const SweepIndex& index, const std::vector<SweepResult>& results,
                           const std::string& scripts, const std::string& train_python) {
  const std::vector<std::string> pythons = python_candidates(scripts, train_python);
  if (const std::string python = first_python_with(pythons, "matplotlib"); !python.empty()) {
    const CommandResult r = run_command({python, scripts + "/sweep_plot.py", csv, png, metric}, "", 120);
    if (r.exit_code == 0) return "wrote " + png + " (matplotlib)";
    return "no PNG: " + scripts + "/sweep_plot.py failed (exit " + std::to_string(r.exit_code) + "): " + r.err;
  }
  if (runs_ok({"gnuplot", "--version"}) && runs_ok({"gnuplot"}, sweep_gnuplot_script(png, metric, index.job_name, results))) {
    return "wrote " + png + " (gnuplot)";
  }
  const std::string venv = pythons.size() > 1 ? pythons[pythons.size() - 2] : pythons.front();
  return "no PNG made (the table above is complete): neither Python with matplotlib (TRAIN_PYTHON, " + venv +
         " or python3) nor gnuplot is available. Hint: install one, e.g. " + venv +
         " -m pip install matplotlib, or apt-get install gnuplot-nox; " + csv + " has the numbers.";
}

void check_metrics_files(const std::vector<std::string>& inputs) {
  for (const std::string& in : inputs) {
    if (!files::is_regular_file(in)) {
      throw ConfigError(in + ": expected a metrics file written by train --metrics, found " +
                            (files::exists(in) ? "something that is not a file" : "nothing at that path") + ".",
                        "pass the file given to train --metrics (a sweep keeps one per task: DIR/task-N/metrics.jsonl).");
    }
  }
}

std::string plot_python(const std::string& scripts, const std::string& train_python) {
  const std::vector<std::string> candidates = python_candidates(scripts, train_python);
  const std::string python = first_python_with(candidates, "matplotlib");
  if (python.empty()) {
    throw ConfigError("trainctl plot: expected a Python with matplotlib, found none among " +
                          text::join(candidates, ", ") + ".",
                      "run scripts/setup.sh (it installs matplotlib into .venv), or set TRAIN_PYTHON to a "
                      "Python that has it.");
  }
  return python;
}

std::vector<std::string> plot_command(const std::string& python, const std::string& scripts, const std::string& out,
                                      int width, int height, const std::vector<std::string>& inputs) {
  std::vector<std::string> argv = {python, scripts + "/plot_metrics.py", out, std::to_string(width),
                                   std::to_string(height)};
  argv.insert(argv.end(), inputs.begin(), inputs.end());
  return argv;
}

}  // namespace train
