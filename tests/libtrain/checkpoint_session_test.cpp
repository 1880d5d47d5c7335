// The checkpoint session (libtrain/src/checkpoint/checkpoint_session.h) of one process: a checkpoint written
// in the background and resumed restores the same Progress, loss sum, weights and optimizer
// state; the state's bytes serialize once and any destination takes them; --checkpoint-every, keep,
// and a checkpoint of another model. Runs on any CPU, no process group.
#include "checkpoint/checkpoint_session.h"

#include "test_util.h"
#include "train/base/error.h"
#include "train/trainer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <vector>

namespace {

using train::Progress;
using train::TrainingState;
using train::detail::CheckpointSession;

// A model, an optimizer with state, and the TrainingState over them.
struct Trained {
  torch::nn::Linear model;
  torch::optim::SGD opt;
  TrainingState state;
  explicit Trained(uint64_t seed, const std::string& model_name = "linear")
      : model((torch::manual_seed(seed), torch::nn::Linear(3, 2))),
        opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)) {
    // One step, so that the optimizer has momentum buffers to save.
    model->forward(torch::ones({4, 3})).sum().backward();
    opt.step();
    state.model = model.get();
    state.optimizer = &opt;
    state.loss_sum = torch::zeros({}, torch::kDouble);
    state.batch_size = 4;
    train::TrainSpec spec;
    spec.model_name = model_name;
    spec.data_name = "ones";
    state.shape_json = train::detail::run_shape_json(spec, 4, 0.1, 1, 3);
  }
};

Progress some_progress() {
  Progress p;
  p.epoch = 2;
  p.batches_done = 3;
  p.step = 7;
  p.epoch_steps = 3;
  p.images_total = 448;
  p.train_seconds = 1.5;
  p.last_test_loss = 0.25;
  p.last_test_accuracy = 0.875;
  p.last_train_loss = 0.5;
  return p;
}

void expect_same(const Progress& a, const Progress& b) {
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.batches_done, b.batches_done);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.epoch_steps, b.epoch_steps);
  EXPECT_EQ(a.images_total, b.images_total);
  EXPECT_DOUBLE_EQ(a.train_seconds, b.train_seconds);
  EXPECT_DOUBLE_EQ(a.last_test_loss, b.last_test_loss);
  EXPECT_DOUBLE_EQ(a.last_test_accuracy, b.last_test_accuracy);
  EXPECT_DOUBLE_EQ(a.last_train_loss, b.last_train_loss);
}

train::CheckpointConfig in(const std::string& dir) {
  train::CheckpointConfig c;
  c.dir = dir;
  c.keep = 2;
  return c;
}

TEST(CheckpointSession, WrittenAndResumedRestoresTheSameProgressAndWeights) {
  train::test::TempDir dir("checkpoint_session");
  Trained a(1);
  std::vector<std::pair<std::string, Progress>> saved;
  CheckpointSession writer(in(dir.path()), train::DistEnv{}, at::kCPU, /*pg=*/nullptr, /*snapshots=*/false,
                           [&](const std::string& path, const Progress& p, double) { saved.emplace_back(path, p); });
  const Progress p = some_progress();
  writer.write(a.state, p, torch::tensor(1.25, torch::kDouble));
  EXPECT_EQ(a.state.progress.step, 0);  // the live state is left as it was
  EXPECT_EQ(a.state.loss_sum.item<double>(), 0.0);
  writer.collect(/*wait=*/true);
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_NE(saved[0].first.find("ckpt-7"), std::string::npos) << saved[0].first;
  expect_same(saved[0].second, p);
  EXPECT_GE(writer.finish().waited_seconds, 0.0);

  Trained b(2);  // other weights, a fresh state
  ASSERT_FALSE(torch::equal(a.model->weight, b.model->weight));
  CheckpointSession reader(in(dir.path()), train::DistEnv{}, at::kCPU, nullptr, false);
  const train::detail::Resumed resumed = reader.resume(b.state, std::nullopt);
  EXPECT_EQ(resumed.path, saved[0].first);
  EXPECT_EQ(resumed.source, "checkpoint");
  expect_same(b.state.progress, p);
  EXPECT_DOUBLE_EQ(b.state.loss_sum.item<double>(), 1.25);
  EXPECT_TRUE(torch::equal(a.model->weight, b.model->weight));
  EXPECT_TRUE(torch::equal(a.model->bias, b.model->bias));
  // The momentum buffers came back too: the next steps are the same.
  for (Trained* r : {&a, &b}) {
    r->opt.zero_grad();
    r->model->forward(torch::ones({4, 3})).sum().backward();
    r->opt.step();
  }
  EXPECT_TRUE(torch::equal(a.model->weight, b.model->weight));
}

TEST(CheckpointSession, BytesSerializedOnceGoToAnyDestination) {
  train::test::TempDir dir("checkpoint_bytes");
  Trained a(1);
  const Progress p = some_progress();
  const train::detail::CheckpointBytes bytes =
      train::detail::serialize_checkpoint(a.state, p, torch::tensor(2.0, torch::kDouble), at::kCPU);
  expect_same(bytes.progress, p);
  // Two destinations, the same bytes.
  train::CheckpointDir first(dir.file("first"), 1), second(dir.file("second"), 1);
  const std::string one = first.write(*bytes.data, p.step);
  const std::string two = second.write(*bytes.data, p.step);
  EXPECT_EQ(train::CheckpointDir::read_verified(one), train::CheckpointDir::read_verified(two));
  Trained b(2);
  auto archive = train::CheckpointDir::load_file(two);
  b.state.load(*archive, at::kCPU);
  expect_same(b.state.progress, p);
  EXPECT_TRUE(torch::equal(a.model->weight, b.model->weight));
}

TEST(CheckpointSession, EveryNStepsKeepsTheNewestAndStartsFreshWithoutOne) {
  train::test::TempDir dir("checkpoint_every");
  train::CheckpointConfig c = in(dir.path());
  c.every = 5;
  Trained a(1);
  CheckpointSession s(c, train::DistEnv{}, at::kCPU, /*pg=*/nullptr, /*snapshots=*/false);
  EXPECT_EQ(s.dir(), dir.path());
  EXPECT_FALSE(s.due(7).checkpoint);
  EXPECT_TRUE(s.due(10).checkpoint);
  EXPECT_FALSE(s.due(10).snapshot);
  for (int64_t step : {5, 10, 15}) {
    Progress p = some_progress();
    p.step = step;
    s.write(a.state, p, a.state.loss_sum);
  }
  s.collect(/*wait=*/true);
  const auto files = train::CheckpointDir(dir.path(), 2).list();
  ASSERT_EQ(files.size(), 2u);  // --keep-checkpoints 2
  EXPECT_EQ(files[0].step, 10);
  EXPECT_EQ(files[1].step, 15);

  CheckpointSession none(train::CheckpointConfig{}, train::DistEnv{}, at::kCPU, nullptr, false);
  EXPECT_EQ(none.dir(), "");
  EXPECT_FALSE(none.due(10).checkpoint);
  Trained b(2);
  const train::detail::Resumed resumed = none.resume(b.state, std::nullopt);
  EXPECT_EQ(resumed.path, "");
  EXPECT_EQ(resumed.source, "");
  EXPECT_EQ(b.state.progress.step, 0);
}

// Writes `written`'s state into `dir`, resumes `reader` from it, and returns the CheckpointError's
// text ("" and a failure where none came).
std::string refusal(const std::string& dir, TrainingState& written, TrainingState& reader) {
  CheckpointSession s(in(dir), train::DistEnv{}, at::kCPU, nullptr, false);
  s.write(written, some_progress(), written.loss_sum);
  s.collect(/*wait=*/true);
  CheckpointSession r(in(dir), train::DistEnv{}, at::kCPU, nullptr, false);
  try {
    r.resume(reader, std::nullopt);
  } catch (const train::CheckpointError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a train::CheckpointError";
  return "";
}

TEST(CheckpointSession, RefusesACheckpointOfAnotherModel) {
  train::test::TempDir dir("checkpoint_other");
  Trained a(1, "linear");
  Trained b(2, "other");
  const std::string what = refusal(dir.path(), a.state, b.state);
  EXPECT_NE(what.find("\"linear\""), std::string::npos) << what;
  EXPECT_NE(what.find("\"other\""), std::string::npos) << what;
}

// An optimizer state written for other parameters (here: one listing the weight twice, as a tied
// weight was listed before 0.2.0) is refused with a CheckpointError that says so and gives a hint,
// not c10's message with its stack trace; the file stays.
TEST(CheckpointSession, RefusesAnOptimizerStateThatDoesNotFit) {
  train::test::TempDir dir("checkpoint_optimizer");
  Trained a(1);
  torch::optim::SGD twice({a.model->weight, a.model->bias, a.model->weight}, torch::optim::SGDOptions(0.1).momentum(0.9));
  a.model->forward(torch::ones({4, 3})).sum().backward();
  twice.step();
  a.state.optimizer = &twice;
  Trained b(2);
  const std::string what = refusal(dir.path(), a.state, b.state);
  EXPECT_NE(what.find("expected the optimizer's state to fit this run's optimizer"), std::string::npos) << what;
  EXPECT_NE(what.find("different size"), std::string::npos) << what;
  EXPECT_EQ(what.find("frame #"), std::string::npos) << what;
  EXPECT_NE(what.find("resume with the same model and optimizer"), std::string::npos) << what;
  EXPECT_FALSE(std::filesystem::is_empty(dir.path())) << "the checkpoint stays";
}

TEST(CheckpointSession, SharedLossSumOfOneProcessIsItsOwn) {
  CheckpointSession s(train::CheckpointConfig{}, train::DistEnv{}, at::kCPU, nullptr, false);
  const at::Tensor sum = torch::tensor(3.5, torch::kDouble);
  EXPECT_DOUBLE_EQ(s.shared_loss_sum(sum).item<double>(), 3.5);
  EXPECT_EQ(s.shared_loss_sum(sum).dim(), 0);
}

}  // namespace
