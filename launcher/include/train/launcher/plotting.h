#pragma once
// The drawing helpers behind `trainctl plot` and `trainctl sweep-report`: where the repository's
// scripts are, which Python has matplotlib (TRAIN_PYTHON, else the repository's .venv, then python3),
// and the gnuplot script a sweep report falls back on. No LibTorch. See docs/workflow.md.
#include <string>
#include <vector>

#include "train/launcher/sweep.h"

namespace train {

/// The repository's scripts/ folder: the first of up to three folders above `exe` (the running
/// program's path) that holds scripts/sweep_plot.py, else `source_dir`/scripts (the source tree it
/// was built from).
std::string scripts_folder(const std::string& exe, const std::string& source_dir);

/// The Pythons to try for matplotlib, in order: `train_python` (TRAIN_PYTHON's value) when not empty
/// (the user's choice, and no other), else the .venv next to `scripts` (its parent's
/// .venv/bin/python), then python3.
std::vector<std::string> python_candidates(const std::string& scripts, const std::string& train_python);

/// The first of `candidates` that runs `python -c "import MODULE"` with exit 0, or "" when none does.
/// A candidate with a '/' that doesn't exist is skipped without running it.
std::string first_python_with(const std::vector<std::string>& candidates, const std::string& module);

/// The gnuplot script of a sweep report's bar chart: one bar of `metric` per task that has it,
/// labelled with its parameters (NAME=VALUE ...), written to `png` (900x500).
std::string sweep_gnuplot_script(const std::string& png, const std::string& metric, const std::string& job_name,
                                 const std::vector<SweepResult>& results);

/// Draws a sweep report's PNG with the first Python of python_candidates() that has matplotlib
/// (`scripts`/sweep_plot.py CSV PNG METRIC), else gnuplot (sweep_gnuplot_script); returns what
/// happened, for stderr ("wrote PNG (matplotlib)", or why no PNG was made and a hint).
std::string draw_sweep_png(const std::string& csv, const std::string& png, const std::string& metric,
                           const SweepIndex& index, const std::vector<SweepResult>& results,
                           const std::string& scripts, const std::string& train_python);

/// Checks `trainctl plot`'s inputs: each must be a regular file.
/// @throws train::ConfigError "PATH: expected a metrics file written by train --metrics, found ..."
void check_metrics_files(const std::vector<std::string>& inputs);

/// `trainctl plot`'s Python: the first of python_candidates() with matplotlib.
/// @throws train::ConfigError naming the candidates tried, with a hint, when none has it.
std::string plot_python(const std::string& scripts, const std::string& train_python);

/// `trainctl plot`'s command: PYTHON SCRIPTS/plot_metrics.py OUT WIDTH HEIGHT INPUTS...
std::vector<std::string> plot_command(const std::string& python, const std::string& scripts, const std::string& out,
                                      int width, int height, const std::vector<std::string>& inputs);

}  // namespace train
