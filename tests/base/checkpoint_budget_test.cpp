// The checkpoint time budget (train/base/checkpoint_budget.h): each deadline shorter than a checkpoint
// is named with the setting to change; a checkpoint that fits says nothing.
#include "train/base/checkpoint_budget.h"

#include "train/base/files.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include <unistd.h>

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(CheckpointBudget, ACheckpointLongerThanTheSignalLeadNamesTheSbatchLine) {
  train::CheckpointDeadlines d;
  d.signal_lead_sec = 120;
  const auto w = train::check_checkpoint_budget(100, d, "measured: the last checkpoint");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(has(w[0], "about 100 s (measured: the last checkpoint)")) << w[0];
  EXPECT_TRUE(has(w[0], "only 120 s before the limit")) << w[0];
  EXPECT_TRUE(has(w[0], "Hint: give it more lead: #SBATCH --signal=USR2@210")) << w[0];
}

TEST(CheckpointBudget, EachShortDeadlineGetsItsOwnWarningAndFlag) {
  train::CheckpointDeadlines d;
  d.signal_lead_sec = 30;
  d.time_margin_sec = 20;
  d.kill_wait_sec = 10;
  const auto w = train::check_checkpoint_budget(25, d, "estimated");
  ASSERT_EQ(w.size(), 3u);
  EXPECT_TRUE(has(w[0], "--signal=USR2@60")) << w[0];
  EXPECT_TRUE(has(w[1], "--time-margin 60")) << w[1];
  EXPECT_TRUE(has(w[2], "KillWait")) << w[2];
  EXPECT_TRUE(has(w[2], "--checkpoint-every")) << w[2];
}

TEST(CheckpointBudget, ACheckpointThatFitsSaysNothing) {
  train::CheckpointDeadlines d;
  d.signal_lead_sec = 120;
  d.time_margin_sec = 60;
  d.kill_wait_sec = 30;
  EXPECT_TRUE(train::check_checkpoint_budget(2.0, d, "measured").empty());
  EXPECT_TRUE(train::check_checkpoint_budget(1e6, train::CheckpointDeadlines{}, "measured").empty());
}

TEST(CheckpointBudget, KillWaitIsReadFromScontrolsConfig) {
  EXPECT_EQ(train::parse_kill_wait("JobRequeue = 1\nKillWait                = 30 sec\nKillOnBadExit = 0\n"), 30.0);
  EXPECT_FALSE(train::parse_kill_wait("JobRequeue = 1\n").has_value());
}

TEST(CheckpointBudget, TheSignalLeadComesFromTheGeneratedScriptsVariable) {
  ::setenv("TRAIN_SIGNAL_LEAD", "90", 1);
  auto d = train::deadlines_from_env(60.0, std::nullopt);
  ASSERT_TRUE(d.signal_lead_sec.has_value());
  EXPECT_EQ(*d.signal_lead_sec, 90);
  EXPECT_EQ(*d.time_margin_sec, 60);
  EXPECT_FALSE(d.kill_wait_sec.has_value());
  ::setenv("TRAIN_SIGNAL_LEAD", "soon", 1);  // not a number: no deadline rather than a wrong one
  EXPECT_FALSE(train::deadlines_from_env(std::nullopt, std::nullopt).signal_lead_sec.has_value());
  ::unsetenv("TRAIN_SIGNAL_LEAD");
}

TEST(CheckpointBudget, TheWriteSpeedProbeWritesAndRemovesItsFile) {
  char tmpl[] = "/tmp/budget_test.XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const double speed = train::measure_write_speed(dir, 1 << 20);
  EXPECT_GT(speed, 0.0);
  EXPECT_TRUE(train::files::list_dir(dir).empty());  // the probe is gone
  EXPECT_DOUBLE_EQ(train::estimate_checkpoint_seconds(200, 100.0), 2.0);
  EXPECT_EQ(train::measure_write_speed("/proc/no-such-folder", 1 << 20), 0.0);
  train::files::remove_tree(dir);
}

}  // namespace
