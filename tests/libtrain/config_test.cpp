// TrainConfig's typed sections (train/config.h): the one mapping between flag text and enum, the
// checks, the Trainer's flags filling the sections (train/cli.h), the recipe flags a program opts
// in to, and the `train` program's own recipe flags (train/builtin.h).
#include "train/builtin.h"
#include "train/cli.h"
#include "train/config.h"

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using train::BackendKind;
using train::DeviceKind;
using train::GraphAllreduce;
using train::Precision;
using train::ResumeMode;
using train::Switch;

// Parses `args` (no program name) into `app`; returns CLI11's exit code (0: parsed).
int parse(CLI::App& app, std::vector<std::string> args) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return e.get_exit_code() == 0 ? -1 : e.get_exit_code();
  }
  return 0;
}

template <class E>
void expect_round_trip() {
  for (const auto& [value, text] : train::choices<E>()) {
    EXPECT_EQ(train::choice_name(value), text);
    EXPECT_EQ(train::parse_choice<E>("--flag", text), value) << text;
  }
}

TEST(Config, EveryChoiceMapsToItsFlagTextAndBack) {
  expect_round_trip<DeviceKind>();
  expect_round_trip<BackendKind>();
  expect_round_trip<Switch>();
  expect_round_trip<GraphAllreduce>();
  expect_round_trip<Precision>();
  expect_round_trip<train::OptimizerKind>();
  EXPECT_EQ(train::choice_name(GraphAllreduce::in_graph), "in-graph");
  EXPECT_EQ(train::choice_name(Switch::automatic), "auto");
  EXPECT_EQ(train::choice_list<DeviceKind>(), "auto, cpu or cuda");
}

TEST(Config, AnUnknownChoiceNamesTheFlagTheChoicesAndTheText) {
  try {
    train::parse_choice<Precision>("--precision", "fp16", "bf16 is fastest on Ampere");
    FAIL() << "fp16 was accepted";
  } catch (const train::ConfigError& e) {
    EXPECT_EQ(e.message(), "--precision: expected auto, fp32, tf32 or bf16, found 'fp16'.");
    EXPECT_EQ(e.hint(), "bf16 is fastest on Ampere");
  }
}

TEST(Config, DefaultsAreTheTrainProgramsDefaults) {
  const train::TrainConfig c;
  EXPECT_FALSE(c.run.epochs);
  EXPECT_FALSE(c.run.batch_size);
  EXPECT_EQ(c.run.test_batch_size, 1000);
  EXPECT_FALSE(c.run.max_steps);
  EXPECT_EQ(c.run.seed, 1u);
  EXPECT_EQ(c.run.device, DeviceKind::automatic);
  EXPECT_EQ(c.run.precision, Precision::automatic);
  EXPECT_EQ(c.distributed.backend, BackendKind::automatic);
  EXPECT_EQ(c.distributed.timeout_sec, 300);
  EXPECT_EQ(c.distributed.bucket_cap_mb, 25);
  EXPECT_TRUE(c.distributed.shm_allreduce);
  EXPECT_EQ(c.gpu.cuda_graph, Switch::automatic);
  EXPECT_EQ(c.gpu.graph_allreduce, GraphAllreduce::in_graph);
  EXPECT_FALSE(c.gpu.channels_last);
  EXPECT_EQ(c.checkpoint.resume, ResumeMode::automatic);
  EXPECT_EQ(c.checkpoint.keep, 3);
  EXPECT_TRUE(c.checkpoint.requeue);
  EXPECT_EQ(c.logging.log_interval, 10);
  EXPECT_NO_THROW(train::validate(c));
}

TEST(Config, ValidateNamesTheFlagOfAWrongSetting) {
  auto message = [](const train::TrainConfig& c) {
    try {
      train::validate(c);
    } catch (const train::ConfigError& e) {
      return e.message();
    }
    return std::string("accepted");
  };
  train::TrainConfig c;
  c.run.max_steps = 0;  // unset means no limit; 0 set in code is a mistake
  EXPECT_EQ(message(c), "--max-steps: expected a positive count (leave it out for no limit), found 0.");
  c = {};
  c.run.device = DeviceKind::cpu;
  c.gpu.cuda_graph = Switch::on;
  EXPECT_EQ(message(c), "--cuda-graph on: expected a CUDA device, found --device cpu.");
  c = {};
  c.run.device = DeviceKind::cpu;
  c.run.precision = Precision::bf16;
  EXPECT_EQ(message(c), "--precision bf16: expected a CUDA device, found --device cpu.");
  c = {};
  c.checkpoint.resume = ResumeMode::path;
  c.checkpoint.resume_path = "/nonexistent/ckpt-1.pt";
  EXPECT_NE(message(c).find("--resume: expected auto, never or the path of a checkpoint file"), std::string::npos);
  c = {};
  c.distributed.bucket_cap_mb = 0;
  EXPECT_EQ(message(c), "--bucket-cap-mb: expected a positive size in MB, found 0.");
}

TEST(Config, TheTrainersFlagsFillTheSections) {
  train::TrainConfig c;
  CLI::App app;
  train::cli::add_trainer_flags(app, c);
  ASSERT_EQ(parse(app, {"--epochs", "3", "--batch-size", "16", "--device", "cpu", "--threads", "2", "--max-steps", "0",
                        "--backend", "gloo", "--shm-allreduce", "off", "--graph-allreduce", "between",
                        "--peer-allreduce", "off", "--channels-last", "off", "--tf32", "on", "--precision", "fp32",
                        "--checkpoint-dir", "ck", "--checkpoint-every", "5", "--resume", "never", "--no-requeue",
                        "--metrics", "m.jsonl", "--log-interval", "4", "--world-size", "2", "--dist-timeout", "30"}),
            0);
  EXPECT_EQ(c.run.epochs, 3);
  EXPECT_EQ(c.run.batch_size, 16);
  EXPECT_EQ(c.run.device, DeviceKind::cpu);
  EXPECT_EQ(c.run.threads, 2);
  EXPECT_FALSE(c.run.max_steps);  // --max-steps 0: no limit
  EXPECT_EQ(c.run.precision, Precision::fp32);
  EXPECT_EQ(c.distributed.backend, BackendKind::gloo);
  EXPECT_FALSE(c.distributed.shm_allreduce);
  EXPECT_EQ(c.distributed.world_size, 2);
  EXPECT_EQ(c.distributed.timeout_sec, 30);
  EXPECT_EQ(c.gpu.graph_allreduce, GraphAllreduce::between);
  EXPECT_EQ(c.gpu.peer_allreduce, Switch::off);
  EXPECT_EQ(c.gpu.tf32, Switch::on);
  EXPECT_EQ(c.checkpoint.dir, "ck");
  EXPECT_EQ(c.checkpoint.every, 5);
  EXPECT_EQ(c.checkpoint.resume, ResumeMode::never);
  EXPECT_FALSE(c.checkpoint.requeue);
  EXPECT_EQ(c.logging.metrics, "m.jsonl");
  EXPECT_EQ(c.logging.log_interval, 4);
}

TEST(Config, ResumeTakesAPathAndLaterCopiesOfAFlagWin) {
  train::TrainConfig c;
  CLI::App app;
  train::cli::add_trainer_flags(app, c);
  ASSERT_EQ(parse(app, {"--resume", "ck/ckpt-4.pt", "--device", "cuda", "--device", "cpu"}), 0);
  EXPECT_EQ(c.checkpoint.resume, ResumeMode::path);
  EXPECT_EQ(c.checkpoint.resume_path, "ck/ckpt-4.pt");
  EXPECT_EQ(c.run.device, DeviceKind::cpu);
}

TEST(Config, ABadChoiceOnTheCommandLineIsAnError) {
  train::TrainConfig c;
  CLI::App app;
  train::cli::add_trainer_flags(app, c);
  EXPECT_NE(parse(app, {"--cuda-graph", "maybe"}), 0);
  EXPECT_EQ(c.gpu.cuda_graph, Switch::automatic);
}

// The Trainer's flags don't include any recipe flag; a program adds those it reads.
TEST(Config, RecipeFlagsExistOnlyWhereAProgramAddsThem) {
  train::TrainConfig c;
  CLI::App app;
  train::cli::add_trainer_flags(app, c);
  for (const char* flag : {"--model", "--dataset", "--data", "--lr", "--gamma", "--optimizer", "--momentum",
                           "--weight-decay", "--limit-train-samples", "--limit-test-samples", "--no-dropout",
                           "--augment"}) {
    EXPECT_THROW(app.get_option(flag), CLI::OptionNotFound) << flag;
  }
  train::cli::RecipeOptions recipe;
  train::cli::add_recipe_flags(app, recipe, {train::cli::RecipeFlag::lr, train::cli::RecipeFlag::limit_test_samples});
  ASSERT_EQ(parse(app, {"--lr", "0.5", "--limit-test-samples", "100"}), 0);
  EXPECT_EQ(recipe.lr, 0.5);
  EXPECT_EQ(recipe.limit_test_samples, 100);
  EXPECT_FALSE(recipe.gamma);
  EXPECT_THROW(app.get_option("--gamma"), CLI::OptionNotFound);
}

TEST(Config, TheTrainProgramsRecipeFlagsFillItsRecipe) {
  train::TrainConfig c;
  train::builtin::Recipe recipe;
  CLI::App app;
  train::cli::add_trainer_flags(app, c);
  train::builtin::add_flags(app, recipe);
  ASSERT_EQ(parse(app, {"--model", "cifar10", "--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0",
                        "--augment", "crop,flip", "--limit-train-samples", "0", "--no-dropout", "--data", "d"}),
            0);
  EXPECT_EQ(recipe.model, "cifar10");
  EXPECT_EQ(recipe.optimizer, train::OptimizerKind::adamw);
  EXPECT_EQ(recipe.lr, 0.01);
  EXPECT_EQ(recipe.weight_decay, 0.0);
  EXPECT_TRUE(recipe.augment.crop && recipe.augment.flip);
  EXPECT_FALSE(recipe.limit_train_samples);  // 0: all
  EXPECT_TRUE(recipe.no_dropout);
  EXPECT_EQ(recipe.data_dir, "d");
  EXPECT_NO_THROW(train::builtin::validate(recipe));
  recipe.momentum = 1;
  EXPECT_THROW(train::builtin::validate(recipe), train::ConfigError);
}

}  // namespace
