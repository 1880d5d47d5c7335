// The checkpoint schema (libtrain/src/checkpoint/training_state.cpp) and the LR schedule's record
// in it: the schedule's own state, written and given back through the state's hooks, and an older
// checkpoint's rate (progress/lr) given back the same way; the loader's skipped samples kept. Runs on
// any CPU, no files.
#include "train/training_state.h"

#include "archive.h"
#include "train/base/error.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <sstream>

namespace {

using train::TrainingState;

using train::test::read_back;

// A model, an optimizer and the TrainingState over them.
struct Trained {
  torch::nn::Linear model;
  torch::optim::SGD opt;
  TrainingState state;
  Trained() : model(torch::nn::Linear(3, 2)), opt(model->parameters(), torch::optim::SGDOptions(0.1)) {
    state.model = model.get();
    state.optimizer = &opt;
    state.loss_sum = torch::zeros({}, torch::kDouble);
    state.batch_size = 4;
    state.shape_json = R"({"model":"linear"})";
  }
};

// The rate a load_schedule hook was given ("lr" of its record); -1 before.
struct ScheduleProbe {
  double loaded = -1;
  std::function<void(torch::serialize::InputArchive&)> hook() {
    return [this](torch::serialize::InputArchive& record) {
      torch::Tensor lr;
      ASSERT_TRUE(record.try_read("lr", lr));
      loaded = lr.item<double>();
    };
  }
};

// The rate a schedule's load_schedule hook gets from `written` when a state loads it (-1: none).
double rate_given_to_schedule(torch::serialize::OutputArchive& written) {
  torch::serialize::InputArchive read = read_back(written);
  Trained b;
  ScheduleProbe probe;
  b.state.load_schedule = probe.hook();
  b.state.load(read, at::kCPU);
  return probe.loaded;
}

TEST(TrainingState, TheScheduleKeepsItsOwnRecord) {
  Trained a;
  a.state.save_schedule = [](torch::serialize::OutputArchive& record) {
    record.write("lr", torch::tensor({0.0375}, torch::kDouble));
  };
  torch::serialize::OutputArchive written;
  a.state.save(written, at::kCPU);
  torch::serialize::InputArchive read = read_back(written);
  torch::serialize::InputArchive record;
  EXPECT_TRUE(read.try_read("schedule", record));  // its own record, not a field of the progress
  torch::Tensor progress_lr;
  EXPECT_FALSE(read.try_read("progress/lr", progress_lr));
  EXPECT_DOUBLE_EQ(rate_given_to_schedule(written), 0.0375);
}

// A checkpoint written before the schedule had a record kept its rate as progress/lr: it resumes
// with that rate, handed to the schedule as its record.
TEST(TrainingState, AnOlderCheckpointGivesTheScheduleItsRate) {
  Trained a;
  torch::serialize::OutputArchive older;
  a.state.save(older, at::kCPU);  // no save_schedule: no record
  older.write("progress/lr", torch::tensor({0.0125}, torch::kDouble));
  EXPECT_DOUBLE_EQ(rate_given_to_schedule(older), 0.0125);
}

// The count of samples --bad-samples skip replaced goes into the checkpoint with the progress, so a
// resumed run goes on counting from it.
TEST(TrainingState, KeepsTheSkippedSamples) {
  Trained a;
  a.state.progress.skipped_samples = 7;
  a.state.progress.images_total = 640;
  torch::serialize::OutputArchive written;
  a.state.save(written, at::kCPU);
  torch::serialize::InputArchive read = read_back(written);
  Trained b;
  b.state.load(read, at::kCPU);
  EXPECT_EQ(b.state.progress.skipped_samples, 7);
  EXPECT_EQ(b.state.progress.images_total, 640);
}

TEST(TrainingState, ACheckpointWithoutTheSchedulesRecordIsACheckpointErrorForOneThatHasASchedule) {
  Trained a;
  torch::serialize::OutputArchive written;
  a.state.save(written, at::kCPU);  // a hand-written loop's: no schedule
  try {
    rate_given_to_schedule(written);
    FAIL() << "expected a train::CheckpointError";
  } catch (const train::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("the LR schedule's record"), std::string::npos) << e.what();
  }
}

}  // namespace
