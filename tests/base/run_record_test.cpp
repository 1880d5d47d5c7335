// The run record (train/base/run_record.h): what train and trainctl run write is what trainctl reads.
#include "train/base/run_record.h"

#include "train/base/error.h"
#include "train/base/files.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/run_record_test.XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d ? d : "/tmp";
}

TEST(RunRecord, PathIsPerJobUnderTheWorkDir) {
  EXPECT_EQ(train::RunRecord::path_for("/home/u/proj", "4242"), "/home/u/proj/.train/runs/4242.json");
  EXPECT_EQ(train::RunRecord::path_for("/home/u/proj/", "7"), "/home/u/proj/.train/runs/7.json");
}

TEST(RunRecord, PathFromEnvPrefersTheExplicitVariable) {
  ::setenv("SLURM_SUBMIT_DIR", "/w", 1);
  ::setenv("SLURM_JOB_ID", "12", 1);
  ::unsetenv("TRAIN_RUN_RECORD");
  EXPECT_EQ(train::RunRecord::path_from_env(), "/w/.train/runs/12.json");
  ::setenv("TRAIN_RUN_RECORD", "/tmp/x.json", 1);
  EXPECT_EQ(train::RunRecord::path_from_env(), "/tmp/x.json");
  ::unsetenv("TRAIN_RUN_RECORD");
  ::unsetenv("SLURM_JOB_ID");
  EXPECT_EQ(train::RunRecord::path_from_env(), "");
  ::unsetenv("SLURM_SUBMIT_DIR");
}

TEST(RunRecord, SavedAndLoadedFieldsAreEqual) {
  const std::string dir = temp_dir();
  const std::string path = train::RunRecord::path_for(dir, "99");
  train::RunRecord r;
  r.job_id = "99";
  r.state = "running";
  r.checkpoint_dir = "/ck";
  r.tensorboard_dir = "/tb";
  r.metrics_file = "/m.jsonl";
  r.world_size = 4;
  r.nodes = {"node1", "node2"};
  r.step = 120;
  r.epoch = 2;
  r.last_checkpoint = "/ck/ckpt-120.pt";
  train::RestartEntry e;
  e.number = 1;
  e.cause = "lost rank";
  e.nodes = {"node2"};
  e.excluded = true;
  e.exit_code = 137;
  e.resumed_step = 110;
  e.seconds = 4.5;
  e.time = 1e9;
  e.failed_step = 117;
  e.failed_step_time = 1e9 - 0.25;
  e.relaunched = 1e9 + 0.5;
  e.launch.number = 1;
  e.launch.started = 1e9 + 1;
  e.launch.connecting = 1e9 + 2;
  e.launch.connected = 1e9 + 2.5;
  e.launch.loaded = 1e9 + 3;
  e.launch.source = "snapshot";
  e.launch.resumed_step = 110;
  e.launch.training = 1e9 + 4;
  r.restarts.push_back(e);
  r.progress_step = 130;
  r.progress_time = 1e9 + 10;
  r.launch = e.launch;
  ASSERT_EQ(r.save(path), "");  // creates .train/runs
  const auto back = train::RunRecord::load(path);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->job_id, "99");
  EXPECT_EQ(back->state, "running");
  EXPECT_EQ(back->checkpoint_dir, "/ck");
  EXPECT_EQ(back->tensorboard_dir, "/tb");
  EXPECT_EQ(back->metrics_file, "/m.jsonl");
  EXPECT_EQ(back->world_size, 4);
  EXPECT_EQ(back->nodes, (std::vector<std::string>{"node1", "node2"}));
  EXPECT_EQ(back->step, 120);
  EXPECT_EQ(back->epoch, 2);
  EXPECT_EQ(back->last_checkpoint, "/ck/ckpt-120.pt");
  ASSERT_EQ(back->restarts.size(), 1u);
  EXPECT_EQ(back->restarts[0].cause, "lost rank");
  EXPECT_EQ(back->restarts[0].nodes, (std::vector<std::string>{"node2"}));
  EXPECT_TRUE(back->restarts[0].excluded);
  EXPECT_EQ(back->restarts[0].exit_code, 137);
  EXPECT_EQ(back->restarts[0].resumed_step, 110);
  EXPECT_DOUBLE_EQ(back->restarts[0].seconds, 4.5);
  EXPECT_EQ(back->restarts[0].failed_step, 117);
  EXPECT_DOUBLE_EQ(back->restarts[0].failed_step_time, 1e9 - 0.25);
  EXPECT_DOUBLE_EQ(back->restarts[0].relaunched, 1e9 + 0.5);
  for (const train::LaunchTimes* l : {&back->restarts[0].launch, &back->launch}) {
    EXPECT_EQ(l->number, 1);
    EXPECT_DOUBLE_EQ(l->started, 1e9 + 1);
    EXPECT_DOUBLE_EQ(l->connecting, 1e9 + 2);
    EXPECT_DOUBLE_EQ(l->connected, 1e9 + 2.5);
    EXPECT_DOUBLE_EQ(l->loaded, 1e9 + 3);
    EXPECT_EQ(l->source, "snapshot");
    EXPECT_EQ(l->resumed_step, 110);
    EXPECT_DOUBLE_EQ(l->training, 1e9 + 4);
  }
  EXPECT_EQ(back->progress_step, 130);
  EXPECT_DOUBLE_EQ(back->progress_time, 1e9 + 10);
  train::files::remove_tree(dir);
}

TEST(RunRecord, UpdateKeepsTheOtherWritersFields) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/r.json";
  ASSERT_EQ(train::RunRecord::update(path, [](train::RunRecord& r) {
              r.state = "running";
              r.checkpoint_dir = "/ck";
            }), "");
  ASSERT_EQ(train::RunRecord::update(path, [](train::RunRecord& r) {
              train::RestartEntry e;
              e.number = 1;
              e.cause = "lost rank";
              r.restarts.push_back(e);
              r.state = "restarting";
            }), "");
  const auto back = train::RunRecord::load(path);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->checkpoint_dir, "/ck");
  EXPECT_EQ(back->state, "restarting");
  ASSERT_EQ(back->restarts.size(), 1u);
  EXPECT_GT(back->updated, 0.0);
  train::files::remove_tree(dir);
}

// train (rank 0) and trainctl run edit the same file: with the lock, no edit is lost when both
// write at once.
TEST(RunRecord, ConcurrentUpdatesFromTwoProcessesLoseNoEdit) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/r.json";
  constexpr int kEdits = 200;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (int i = 0; i < kEdits; ++i) {
      train::RunRecord::update(path, [](train::RunRecord& r) { r.progress_step += 1; });
    }
    ::_exit(0);
  }
  for (int i = 0; i < kEdits; ++i) {
    train::RunRecord::update(path, [](train::RunRecord& r) { r.restarts.emplace_back(); });
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const auto back = train::RunRecord::load(path);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->progress_step, kEdits);
  EXPECT_EQ(back->restarts.size(), static_cast<size_t>(kEdits));
  train::files::remove_tree(dir);
}

// The process's start comes from /proc: before now, and not long before (this test's process
// started when ctest ran it).
TEST(RunRecord, ProcessStartTimeIsThisProcesssExec) {
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const double started = train::process_start_time();
  EXPECT_LE(started, now + 0.05);
  EXPECT_GT(started, now - 3600) << "a test process that ran for over an hour?";
}

TEST(RunRecord, AMissingFileIsNoRecordAndAForeignFileIsNamed) {
  const std::string dir = temp_dir();
  EXPECT_FALSE(train::RunRecord::load(dir + "/none.json").has_value());
  const std::string bad = dir + "/bad.json";
  std::ofstream(bad) << "not json";
  try {
    train::RunRecord::load(bad);
    FAIL() << "expected a ConfigError";
  } catch (const train::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Hint:"), std::string::npos) << e.what();
  }
  // update() replaces a damaged record instead of failing the run that writes it.
  EXPECT_EQ(train::RunRecord::update(bad, [](train::RunRecord& r) { r.state = "running"; }), "");
  EXPECT_EQ(train::RunRecord::load(bad)->state, "running");
  train::files::remove_tree(dir);
}

}  // namespace
