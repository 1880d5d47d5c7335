// Tests for the drawing helpers of `trainctl plot` and `sweep-report` (train/launcher/plotting.h):
// the Python lookup order, run against a temp folder of fake Pythons; the scripts folder; the
// gnuplot script of a sweep report; the plot command and its input checks.
#include "train/launcher/plotting.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "train/base/error.h"
#include "train/base/files.h"

namespace train {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// Writes an executable shell script that exits `code` when asked to import `module`, and 3 otherwise.
void fake_python(const std::string& path, int code, const std::string& module = "matplotlib") {
  std::ofstream(path) << "#!/bin/sh\n[ \"$1\" = -c ] && [ \"$2\" = 'import " << module << "' ] && exit " << code
                      << "\nexit 3\n";
  ASSERT_EQ(::chmod(path.c_str(), 0755), 0) << path;
}

TEST(PlotPython, CandidatesAreTrainPythonAloneElseTheVenvThenPython3) {
  EXPECT_EQ(python_candidates("/repo/scripts", ""), (std::vector<std::string>{"/repo/.venv/bin/python", "python3"}));
  EXPECT_EQ(python_candidates("/repo/scripts", "/opt/py"), (std::vector<std::string>{"/opt/py"}));
}

TEST(PlotPython, PicksTheFirstCandidateThatImportsTheModule) {
  test::TempDir dir("fake-pythons");
  fake_python(dir.file("without"), 1);
  fake_python(dir.file("with"), 0);
  fake_python(dir.file("also-with"), 0);
  const std::string missing = dir.file("missing");
  EXPECT_EQ(first_python_with({missing, dir.file("without"), dir.file("with"), dir.file("also-with")}, "matplotlib"),
            dir.file("with"));
  EXPECT_EQ(first_python_with({dir.file("also-with"), dir.file("with")}, "matplotlib"), dir.file("also-with"));
  EXPECT_EQ(first_python_with({dir.file("without"), missing}, "matplotlib"), "");
  EXPECT_EQ(first_python_with({dir.file("with")}, "numpy"), "");  // the module asked for, not any import
}

TEST(PlotPython, LooksInTheRepositorysVenvAndHonoursTrainPython) {
  test::TempDir repo("fake-repo");
  ASSERT_EQ(files::make_dirs(repo.file(".venv/bin")), "");
  ASSERT_EQ(files::make_dirs(repo.file("scripts")), "");
  fake_python(repo.file(".venv/bin/python"), 0);
  fake_python(repo.file("other"), 0);
  fake_python(repo.file("broken"), 1);
  const std::string scripts = repo.file("scripts");
  EXPECT_EQ(plot_python(scripts, ""), repo.file(".venv/bin/python"));
  EXPECT_EQ(plot_python(scripts, repo.file("other")), repo.file("other"));
  // TRAIN_PYTHON is the user's choice and no other: without matplotlib it is an error, not a fallback.
  try {
    plot_python(scripts, repo.file("broken"));
    ADD_FAILURE() << "a TRAIN_PYTHON without matplotlib was accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "expected a Python with matplotlib, found none among " + repo.file("broken") + "."))
        << e.what();
    EXPECT_TRUE(contains(e.hint(), "TRAIN_PYTHON")) << e.hint();
  }
}

TEST(PlotScripts, FolderIsFoundAboveTheProgramElseInTheSourceTree) {
  test::TempDir repo("scripts-folder");
  ASSERT_EQ(files::make_dirs(repo.file("scripts")), "");
  ASSERT_EQ(files::make_dirs(repo.file("build/bin")), "");
  std::ofstream(repo.file("scripts/sweep_plot.py")) << "# fake\n";
  EXPECT_EQ(scripts_folder(repo.file("build/bin/trainctl"), "/src"), repo.file("scripts"));
  EXPECT_EQ(scripts_folder("/nowhere/bin/trainctl", "/src"), "/src/scripts");
  EXPECT_EQ(scripts_folder("", "/src"), "/src/scripts");
}

TEST(PlotCommand, RunsPlotMetricsWithSizeAndInputs) {
  EXPECT_EQ(plot_command("/py", "/repo/scripts", "out.png", 1200, 400, {"a.jsonl", "b.jsonl"}),
            (std::vector<std::string>{"/py", "/repo/scripts/plot_metrics.py", "out.png", "1200", "400", "a.jsonl",
                                      "b.jsonl"}));
  test::TempDir dir("plot-inputs");
  std::ofstream(dir.file("m.jsonl")) << "{}\n";
  EXPECT_NO_THROW(check_metrics_files({dir.file("m.jsonl")}));
  try {
    check_metrics_files({dir.file("m.jsonl"), dir.path(), dir.file("none")});
    ADD_FAILURE() << "a folder was accepted as a metrics file";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), dir.path() + ": expected a metrics file written by train --metrics, found something "
                                   "that is not a file."))
        << e.what();
  }
  try {
    check_metrics_files({dir.file("none")});
    ADD_FAILURE() << "a missing metrics file was accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "found nothing at that path")) << e.what();
  }
}

TEST(SweepGnuplot, ScriptPlotsOneBarPerTaskWithTheMetric) {
  SweepResult a;
  a.task = 0;
  a.params = {{"lr", "0.1"}, {"batch-size", "64"}};
  a.metrics = {{"test_accuracy", 0.5}, {"test_loss", 1.25}};
  SweepResult b;
  b.task = 1;
  b.params = {{"lr", "0.5"}, {"batch-size", "64"}};
  b.metrics = {{"test_loss", 0.75}};  // no accuracy yet: no bar
  SweepResult c;
  c.task = 2;
  c.params = {{"lr", "1.0"}, {"batch-size", "64"}};
  c.metrics = {{"test_accuracy", 0.875}};
  const std::string script = sweep_gnuplot_script("/out/sweep-report.png", "test_accuracy", "lr-sweep", {a, b, c});
  EXPECT_TRUE(contains(script, "set terminal png size 900,500\n")) << script;
  EXPECT_TRUE(contains(script, "set output '/out/sweep-report.png'\n")) << script;
  EXPECT_TRUE(contains(script, "set ylabel 'test_accuracy'\n")) << script;
  EXPECT_TRUE(contains(script, "set title 'lr-sweep: test_accuracy per combination'\n")) << script;
  EXPECT_TRUE(contains(script, "$d << EOD\n\"lr=0.1 batch-size=64\" 0.500000\n\"lr=1.0 batch-size=64\" 0.875000\nEOD\n"))
      << script;
  EXPECT_FALSE(contains(script, "lr=0.5")) << script;
  // Column 2 (the metric) is the bar height, column 1 (the parameters) the label.
  EXPECT_TRUE(contains(script, "plot $d using 0:2:xtic(1) with boxes notitle\n")) << script;

  const std::string loss = sweep_gnuplot_script("l.png", "test_loss", "lr-sweep", {a, b, c});
  EXPECT_TRUE(contains(loss, "\"lr=0.1 batch-size=64\" 1.250000\n\"lr=0.5 batch-size=64\" 0.750000\nEOD")) << loss;
}

}  // namespace
}  // namespace train
