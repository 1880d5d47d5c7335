// The run log (libtrain/src/log/run_log.h) of one process: the run record's fields at the start, after
// a checkpoint and at the end; a record that can't be written never stops training; progress lines
// and epoch lines reach the metrics sinks with their values. Runs on any CPU, no process group.
#include "log/run_log.h"

#include "device/train_device.h"
#include "test_util.h"
#include "train/base/run_record.h"
#include "train/trainer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <map>

namespace {

using train::MetricsRecord;
using train::RunRecord;
using train::detail::RunLog;

// Sets TRAIN_RUN_RECORD while it lives.
class RecordAt {
 public:
  explicit RecordAt(const std::string& path) { ::setenv("TRAIN_RUN_RECORD", path.c_str(), 1); }
  ~RecordAt() { ::unsetenv("TRAIN_RUN_RECORD"); }
};

class Collect : public train::MetricsSink {
 public:
  void open(int64_t start_step) override { opened_at = start_step; }
  void write(const MetricsRecord& record) override { records.push_back(record); }
  int64_t opened_at = -1;
  std::vector<MetricsRecord> records;
};

std::map<std::string, double> values(const MetricsRecord& r) { return {r.values.begin(), r.values.end()}; }

std::unique_ptr<train::detail::TrainDevice> cpu() {
  return train::detail::TrainDevice::create(at::kCPU, train::TrainConfig{});
}

TEST(RunLog, KeepsTheRunRecordUpToDate) {
  train::test::TempDir dir("run_log_record");
  const std::string path = dir.file("record.json");
  RecordAt at(path);
  train::TrainConfig config;
  config.checkpoint.dir = "ckpts";  // relative: the record holds absolute paths
  config.logging.tensorboard = dir.file("tb");
  train::DistEnv env;
  env.world_size = 1;
  env.host = "node7";
  env.job_id = "4242";
  const auto dev = cpu();
  RunLog log(config.logging, env, *dev);
  log.record().start(config, env);
  auto r = RunRecord::load(path);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->state, "running");
  EXPECT_EQ(r->job_id, "4242");
  EXPECT_EQ(r->checkpoint_dir, (std::filesystem::current_path() / "ckpts").string());
  EXPECT_EQ(r->tensorboard_dir, dir.file("tb"));
  EXPECT_EQ(r->metrics_file, "");
  EXPECT_EQ(r->world_size, 1);
  EXPECT_EQ(r->nodes, std::vector<std::string>{"node7"});

  log.record().checkpoint(dir.file("ckpts/ckpt-30.pt"), 30, 2);
  r = RunRecord::load(path);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->last_checkpoint, dir.file("ckpts/ckpt-30.pt"));
  EXPECT_EQ(r->step, 30);
  EXPECT_EQ(r->epoch, 2);
  EXPECT_EQ(r->state, "running");

  log.record().end("preempted", 34, 2);
  r = RunRecord::load(path);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->state, "preempted");
  EXPECT_EQ(r->step, 34);
  EXPECT_EQ(r->last_checkpoint, dir.file("ckpts/ckpt-30.pt"));  // kept
}

// The progress goes through a writer thread: the launch's first step lands in launch.training,
// a later forced one (a snapshot's) replaces it in progress_step once flushed, a step within the
// second after is not written, and what is pending when the log ends is written first.
TEST(RunLog, TheProgressIsWrittenBehindTheTrainingThread) {
  train::test::TempDir dir("run_log_progress");
  const std::string path = dir.file("record.json");
  RecordAt at(path);
  train::TrainConfig config;
  train::DistEnv env;
  env.world_size = 1;
  const auto dev = cpu();
  {
    RunLog log(config.logging, env, *dev);
    log.record().start(config, env);
    log.record().progress(1);
    log.record().flush();
    auto r = RunRecord::load(path);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->progress_step, 1);
    EXPECT_GT(r->launch.training, 0);
    EXPECT_EQ(r->launch.training, r->progress_time) << "the first step's time";
    const double first = r->launch.training;
    log.record().progress(2);  // within the second: not written
    log.record().progress(7, /*force=*/true);
    log.record().flush();
    r = RunRecord::load(path);
    EXPECT_EQ(r->progress_step, 7);
    EXPECT_EQ(r->launch.training, first) << "the launch's first step stays";
    log.record().progress(9, /*force=*/true);
  }  // the log ends with step 9 posted
  auto r = RunRecord::load(path);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->progress_step, 9);
}

TEST(RunLog, OnlyRankZeroWritesTheRecord) {
  train::test::TempDir dir("run_log_rank");
  const std::string path = dir.file("record.json");
  RecordAt at(path);
  train::DistEnv env;
  env.rank = 1;
  env.world_size = 2;
  const auto dev = cpu();
  RunLog log(train::LoggingConfig{}, env, *dev);
  log.record().start(train::TrainConfig{}, env);
  log.record().end("done");
  EXPECT_FALSE(RunRecord::load(path).has_value());
}

TEST(RunLog, ARecordThatCannotBeWrittenNeverStopsTraining) {
  train::test::TempDir dir("run_log_unwritable");
  train::test::write_file(dir.file("a_file"), {'x'});
  RecordAt at(dir.file("a_file/record.json"));  // a folder that is a file
  const auto dev = cpu();
  RunLog log(train::LoggingConfig{}, train::DistEnv{}, *dev);
  EXPECT_NO_THROW(log.record().start(train::TrainConfig{}, train::DistEnv{}));
  EXPECT_NO_THROW(log.record().checkpoint("x", 1, 1));
  EXPECT_NO_THROW(log.record().end("done"));
}

TEST(RunLog, EndStatesNameHowTheRunEnded) {
  train::TrainResult r;
  EXPECT_EQ(train::detail::record_state(r), "done");
  r.preempted = true;
  EXPECT_EQ(train::detail::record_state(r), "preempted");
  r.preempted = false;
  r.cancelled = true;
  EXPECT_EQ(train::detail::record_state(r), "cancelled");
  r.nonfinite = true;
  EXPECT_EQ(train::detail::record_state(r), "nonfinite");
}

TEST(RunLog, ProgressAndEpochLinesReachTheSinks) {
  auto sink = std::make_shared<Collect>();
  train::TrainSpec spec;
  spec.train_data = std::make_shared<train::InMemoryDataset>(torch::zeros({100, 2}), torch::zeros({100}, torch::kLong));
  spec.metrics_sinks = {sink};
  train::LoggingConfig config;
  config.log_interval = 2;
  const auto dev = cpu();
  RunLog log(config, train::DistEnv{}, *dev);
  log.open(spec, /*train_size=*/100, /*start_step=*/12, /*evaluated=*/"");
  EXPECT_EQ(sink->opened_at, 12);
  log.start_epoch(12);
  auto step = [](int64_t batch, int64_t step_number, bool last, double loss) {
    train::detail::StepDone d;
    d.epoch = 2;
    d.step = step_number;
    d.batch = batch;
    d.batches = 4;
    d.start = batch * 10;
    d.samples = 10;
    d.last = last;
    d.loss = torch::tensor(loss);
    d.lr = 0.01;
    return d;
  };
  log.step_done(step(/*batch=*/0, /*step=*/13, /*last=*/false, 0.75));  // every log_interval batches
  ASSERT_EQ(sink->records.size(), 1u);  // the CPU reads the loss at once
  log.step_done(step(1, 14, false, 0.5));
  EXPECT_EQ(sink->records.size(), 1u);
  log.step_done(step(3, 16, /*last=*/true, 0.25));  // and the epoch's last
  log.flush();
  ASSERT_EQ(sink->records.size(), 2u);
  const MetricsRecord& line = sink->records[0];
  EXPECT_EQ(line.event, "train");
  EXPECT_EQ(line.epoch, 2);
  EXPECT_EQ(line.step, 13);
  EXPECT_DOUBLE_EQ(values(line).at("loss"), 0.75);
  EXPECT_DOUBLE_EQ(values(line).at("lr"), 0.01);
  EXPECT_GT(line.time, 0);
  EXPECT_EQ(sink->records[1].step, 16);
  EXPECT_DOUBLE_EQ(values(sink->records[1]).at("loss"), 0.25);

  train::Progress p;
  p.epoch = 2;
  p.step = 20;
  p.last_train_loss = 0.5;
  train::EvalResult ev;
  ev.loss = 0.25;
  ev.count = 10;
  ev.metrics = {{"accuracy", 0.9}, {"top5", 1.0}};
  for (double images : {100.0, 300.0, 500.0}) log.epoch_line(p, ev, images, 1.0, 0.5, "", /*skipped=*/int64_t{3});
  EXPECT_DOUBLE_EQ(log.steady_images_per_sec(), 400.0);  // the epochs after the first
  ASSERT_EQ(sink->records.size(), 5u);
  const auto epoch = values(sink->records[4]);
  EXPECT_EQ(sink->records[4].event, "epoch");
  EXPECT_DOUBLE_EQ(epoch.at("train_loss"), 0.5);
  EXPECT_DOUBLE_EQ(epoch.at("test_loss"), 0.25);
  EXPECT_DOUBLE_EQ(epoch.at("test_accuracy"), 0.9);
  EXPECT_DOUBLE_EQ(epoch.at("epoch_images_per_sec"), 500.0);
  EXPECT_DOUBLE_EQ(epoch.at("skipped_steps"), 3.0);
  EXPECT_DOUBLE_EQ(epoch.at("top5"), 1.0);
  EXPECT_EQ(epoch.count("accuracy"), 0u);
}

}  // namespace
