// The run's plan (libtrain/src/trainer/run_plan.h): each setting that a flag and the TrainSpec can
// both set is resolved in one place, the flag winning; out-of-range values are refused naming the
// flag or the spec's field. Runs on any CPU, no process group.
#include "trainer/run_plan.h"

#include "train/data.h"
#include "train/loss.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

namespace {

using train::detail::RunPlan;

// A spec that passes the plan's checks: what the plan reads of it, nothing trained.
train::TrainSpec valid_spec() {
  train::TrainSpec s;
  s.model = [] { return train::ModelHandle{}; };
  s.train_data = std::make_shared<train::InMemoryDataset>(torch::zeros({4, 1}), torch::zeros({4}, torch::kLong));
  s.eval_data = std::make_shared<train::InMemoryDataset>(torch::zeros({2, 1}), torch::zeros({2}, torch::kLong));
  s.loss = train::nll_loss();
  s.optimizer = [](const std::vector<at::Tensor>&) { return std::unique_ptr<torch::optim::Optimizer>(); };
  s.batch_size = 16;
  s.epochs = 3;
  s.accumulate_steps = 2;
  s.clip_grad_norm = 0.5;
  s.shard_optimizer = false;
  s.early_stopping = {"test_loss", 4, 0.01};
  s.ema_decay = 0.9;
  return s;
}

RunPlan plan_of(const train::TrainConfig& config, const train::TrainSpec& spec) {
  RunPlan p;
  p.config = config;
  train::detail::resolve_plan(p, spec);
  return p;
}

// What resolve_plan throws for `config` over `spec`: its message ("" and a failure where none came).
std::string refusal(const train::TrainConfig& config, const train::TrainSpec& spec) {
  try {
    plan_of(config, spec);
  } catch (const train::ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a train::ConfigError";
  return "";
}

TEST(RunPlan, TheSpecsSettingsWithoutFlags) {
  const train::TrainSpec spec = valid_spec();
  const RunPlan p = plan_of(train::TrainConfig{}, spec);
  EXPECT_EQ(p.spec, &spec);
  EXPECT_EQ(p.batch, 16);
  EXPECT_EQ(p.epochs, 3);
  EXPECT_EQ(p.accumulate, 2);
  EXPECT_EQ(p.step_samples(), 32);
  EXPECT_EQ(p.clip_norm, std::optional<double>(0.5));
  EXPECT_FALSE(p.shard_optimizer);
  EXPECT_EQ(p.early_stopping.metric, "test_loss");
  EXPECT_EQ(p.early_stopping.patience, 4);
  EXPECT_DOUBLE_EQ(p.early_stopping.min_delta, 0.01);
  EXPECT_EQ(p.ema_decay, std::optional<double>(0.9));
}

TEST(RunPlan, EachFlagWinsOverTheSpec) {
  const train::TrainSpec spec = valid_spec();
  train::TrainConfig c;
  c.run.batch_size = 8;
  c.run.epochs = 5;
  c.run.accumulate_steps = 4;
  c.run.clip_grad_norm = 2.0;
  c.distributed.shard_optimizer = true;
  c.run.early_stop_metric = "test_accuracy";
  c.run.early_stop_patience = 2;
  c.run.early_stop_min_delta = 0.5;
  c.run.ema_decay = 0.99;
  train::TrainSpec with_accuracy = spec;
  with_accuracy.metrics = {train::accuracy()};
  const RunPlan p = plan_of(c, with_accuracy);
  EXPECT_EQ(p.batch, 8);
  EXPECT_EQ(p.epochs, 5);
  EXPECT_EQ(p.accumulate, 4);
  EXPECT_EQ(p.step_samples(), 32);
  EXPECT_EQ(p.clip_norm, std::optional<double>(2.0));
  EXPECT_TRUE(p.shard_optimizer);
  EXPECT_EQ(p.shard_source(), "--shard-optimizer");
  EXPECT_EQ(p.early_stopping.metric, "test_accuracy");
  EXPECT_EQ(p.early_stopping.patience, 2);
  EXPECT_DOUBLE_EQ(p.early_stopping.min_delta, 0.5);
  EXPECT_EQ(p.ema_decay, std::optional<double>(0.99));

  train::TrainSpec sharded = spec;
  sharded.shard_optimizer = true;
  const RunPlan q = plan_of(train::TrainConfig{}, sharded);
  EXPECT_TRUE(q.shard_optimizer);
  EXPECT_EQ(q.shard_source(), "TrainSpec::shard_optimizer");
}

TEST(RunPlan, OutOfRangeSettingsAreRefusedNamingTheInput) {
  const train::TrainSpec spec = valid_spec();
  train::TrainConfig c;
  c.run.batch_size = 0;
  EXPECT_NE(refusal(c, spec).find("--batch-size: expected a positive per-rank batch size, found 0"), std::string::npos);
  c = {};
  c.run.epochs = 0;
  EXPECT_NE(refusal(c, spec).find("TrainSpec::epochs: expected at least 1, found 0"), std::string::npos);
  c = {};
  c.run.accumulate_steps = 0;
  EXPECT_NE(refusal(c, spec).find("expected at least 1 micro-batch per optimizer step, found 0"), std::string::npos);
  c = {};
  c.run.clip_grad_norm = -1.0;
  EXPECT_NE(refusal(c, spec).find("expected a positive, finite total gradient norm, found -1"), std::string::npos);
  c = {};
  c.run.ema_decay = 1.0;
  EXPECT_NE(refusal(c, spec).find("--ema-decay: expected a decay in [0, 1), found 1"), std::string::npos);
  train::TrainSpec empty = spec;
  empty.train_data = nullptr;
  EXPECT_NE(refusal(train::TrainConfig{}, empty).find("found no training data"), std::string::npos);
}

TEST(RunPlan, EarlyStoppingIsChecked) {
  train::TrainSpec spec = valid_spec();
  spec.early_stopping = {};
  spec.metrics = {};
  train::TrainConfig c;
  c.run.early_stop_metric = "test_accuracy";
  EXPECT_NE(refusal(c, spec).find("--early-stop-metric: expected test_loss (test_loss or a metric this program "
                                  "evaluates), found 'test_accuracy'"),
            std::string::npos)
      << "not a metric the spec evaluates";
  spec.metrics = {train::accuracy()};
  EXPECT_EQ(plan_of(c, spec).early_stopping.patience, 3);
  c.run.early_stop_patience = 0;
  EXPECT_NE(refusal(c, spec).find("--early-stop-patience: expected at least 1 epoch, found 0"), std::string::npos);
  c.run.early_stop_patience = 1;
  c.run.early_stop_min_delta = -1;
  EXPECT_NE(refusal(c, spec).find("--early-stop-min-delta: expected 0 or more"), std::string::npos);
  c.run.early_stop_min_delta.reset();
  spec.eval_data = nullptr;
  EXPECT_NE(refusal(c, spec).find("expected evaluation data to measure it on"), std::string::npos);
  c.run.early_stop_metric = "accuracy";
  spec.eval_data = valid_spec().eval_data;
  const std::string what = refusal(c, spec);
  EXPECT_NE(what.find("--early-stop-metric: expected test_loss or test_accuracy"), std::string::npos) << what;
  EXPECT_NE(what.find("found 'accuracy'"), std::string::npos) << what;
}

}  // namespace
