// A user's flag mistakes in any program built on train::cli::main: an unknown flag is
// exit 2 with the house's message and a "did you mean" for a close one; the hint about `train`'s
// recipe flags comes only for one the program doesn't read; every multi-word flag takes
// underscores for its dashes. Also train::text's edit distance behind the "did you mean", and the
// version that --version names.
#include "train/builtin.h"
#include "train/cli.h"
#include "train/base/text.h"
#include "train/base/version.h"

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using train::cli::RecipeFlag;

struct Outcome {
  int exit_code = -1;
  std::string err;
  std::string out;
  bool trained = false;
  train::TrainConfig config;
  train::cli::RecipeOptions recipe;
};

// Runs cli::main in this process with `args` after the program name "prog". With `reads_lr`, the
// program reads --lr (and --data); else it reads no recipe flag. Training returns at once, so a
// command line that parses "trains" and exits 0 (a single process: no peers, no data).
Outcome run_main(const std::vector<std::string>& args, bool reads_lr, const train::cli::ExtraFlags& extra = nullptr) {
  std::vector<std::string> storage = {"prog", "--heap", "default"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : storage) argv.push_back(a.data());
  Outcome o;
  auto fit = [&o](const train::TrainConfig& config, const train::cli::RecipeOptions& recipe) {
    o.trained = true;
    o.config = config;
    o.recipe = recipe;
    return train::TrainResult{};
  };
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  if (reads_lr) {
    o.exit_code = train::cli::main(
        static_cast<int>(argv.size()), argv.data(), "a program that reads --lr", {RecipeFlag::data, RecipeFlag::lr},
        [&fit](const train::TrainConfig& c, const train::cli::RecipeOptions& r, const train::DistEnv&) { return fit(c, r); },
        extra);
  } else {
    o.exit_code = train::cli::main(
        static_cast<int>(argv.size()), argv.data(), "a program that reads no recipe flag",
        [&fit](const train::TrainConfig& c, const train::DistEnv&) { return fit(c, {}); }, extra);
  }
  o.out = testing::internal::GetCapturedStdout();
  o.err = testing::internal::GetCapturedStderr();
  return o;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

constexpr const char* kRecipeHint = "exists only in programs that read it";

}  // namespace

TEST(TextCloseness, EditDistanceCountsInsertionsDeletionsSubstitutionsAndSwaps) {
  EXPECT_EQ(train::text::edit_distance("epoch", "epochs"), 1u);
  EXPECT_EQ(train::text::edit_distance("epochz", "epochs"), 1u);
  EXPECT_EQ(train::text::edit_distance("epcohs", "epochs"), 1u);  // two neighbours swapped
  EXPECT_EQ(train::text::edit_distance("", "lr"), 2u);
  EXPECT_EQ(train::text::edit_distance("seed", "seed"), 0u);
  EXPECT_EQ(train::text::edit_distance("kitten", "sitting"), 3u);
}

TEST(TextCloseness, ClosestTakesTheNearestThenPrefixesAndNothingFar) {
  const std::vector<std::string> names = {"epochs", "seed", "checkpoint-dir", "checkpoint-every", "batch-size", "lr"};
  EXPECT_EQ(train::text::closest("epoch", names), std::vector<std::string>{"epochs"});
  EXPECT_EQ(train::text::closest("batchsize", names), std::vector<std::string>{"batch-size"});
  EXPECT_EQ(train::text::closest("chekpoint-dir", names), std::vector<std::string>{"checkpoint-dir"});
  EXPECT_EQ(train::text::closest("checkpoint", names), (std::vector<std::string>{"checkpoint-dir", "checkpoint-every"}));
  EXPECT_TRUE(train::text::closest("optimizer", names).empty());
  EXPECT_TRUE(train::text::closest("batch_size", names).empty());  // the same flag spelled with '_': no typo
  EXPECT_EQ(train::text::or_list({"a", "b", "c"}), "a, b or c");
}

TEST(CliFlags, AnUnknownFlagNamesTheClosestOneAndExits2) {
  const Outcome o = run_main({"--epoch", "2"}, /*reads_lr=*/false);
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_FALSE(o.trained);
  EXPECT_TRUE(has(o.err, "prog: unknown flag --epoch: expected a flag this program takes (`prog --help` lists them), "
                         "found '--epoch'.\nHint: did you mean --epochs?"))
      << o.err;
  EXPECT_FALSE(has(o.err, kRecipeHint)) << o.err;
  EXPECT_FALSE(has(o.err, "were not expected")) << o.err;  // CLI11's own message is replaced

  const Outcome eq = run_main({"--chekpoint-dir=ck"}, false);
  EXPECT_EQ(eq.exit_code, 2);
  EXPECT_TRUE(has(eq.err, "unknown flag --chekpoint-dir:")) << eq.err;
  EXPECT_TRUE(has(eq.err, "Hint: did you mean --checkpoint-dir?")) << eq.err;

  const Outcome prefix = run_main({"--checkpoint", "ck"}, false);
  EXPECT_TRUE(has(prefix.err, "Hint: did you mean --checkpoint-dir or --checkpoint-every?")) << prefix.err;

  const Outcome far = run_main({"--frobnicate"}, false);
  EXPECT_EQ(far.exit_code, 2);
  EXPECT_TRUE(has(far.err, "unknown flag --frobnicate: expected a flag this program takes")) << far.err;
  EXPECT_TRUE(has(far.err, "Hint: `prog --help` lists the flags this program takes.")) << far.err;

  const Outcome positional = run_main({"stray"}, false);
  EXPECT_EQ(positional.exit_code, 2);
  EXPECT_TRUE(has(positional.err, "expected only flags (this program takes no positional arguments), found 'stray'."))
      << positional.err;
  EXPECT_TRUE(has(positional.err, "Hint:")) << positional.err;
}

// The hint about `train`'s recipe flags only where it is true: for --lr in a program that doesn't
// read it, never in one that does.
TEST(CliFlags, TheRecipeHintComesOnlyForARecipeFlagTheProgramDoesntRead) {
  const Outcome without = run_main({"--lr", "0.1"}, /*reads_lr=*/false);
  EXPECT_EQ(without.exit_code, 2);
  EXPECT_TRUE(has(without.err, "prog: unknown flag --lr: expected a flag this program takes")) << without.err;
  EXPECT_TRUE(has(without.err, "Hint: --lr is a recipe flag of the `train` program, and " + std::string(kRecipeHint)))
      << without.err;
  EXPECT_TRUE(has(without.err, "train::cli::add_recipe_flags")) << without.err;

  const Outcome with = run_main({"--lr", "0.1"}, /*reads_lr=*/true);
  EXPECT_EQ(with.exit_code, 0) << with.err;
  EXPECT_EQ(with.recipe.lr, 0.1);

  const Outcome typo = run_main({"--lrr", "0.1"}, /*reads_lr=*/true);
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_TRUE(has(typo.err, "Hint: did you mean --lr?")) << typo.err;
  EXPECT_FALSE(has(typo.err, kRecipeHint)) << typo.err;

  const Outcome model = run_main({"--model", "cifar10"}, /*reads_lr=*/true);
  EXPECT_EQ(model.exit_code, 2);
  EXPECT_TRUE(has(model.err, "--model is a recipe flag of the `train` program")) << model.err;
}

// cli.cpp keeps its own list of `train`'s recipe flags (train::builtin depends on it, not the other
// way): every flag builtin::add_flags adds gets the recipe hint in a program without it.
TEST(CliFlags, EveryRecipeFlagOfTheTrainProgramGetsTheRecipeHint) {
  train::TrainConfig c;
  CLI::App trainer;
  train::cli::add_trainer_flags(trainer, c);
  train::builtin::Recipe recipe;
  CLI::App program;
  train::cli::add_trainer_flags(program, c);
  train::builtin::add_flags(program, recipe);
  program.add_flag("--list-models");  // builtin::main's own
  int checked = 0;
  for (const CLI::Option* o : program.get_options()) {
    for (const std::string& name : o->get_lnames()) {
      if (trainer.get_option_no_throw("--" + name) != nullptr) continue;  // one of the Trainer's
      const Outcome r = run_main({"--" + name}, /*reads_lr=*/false);
      EXPECT_EQ(r.exit_code, 2) << name;
      EXPECT_TRUE(has(r.err, "--" + name + " is a recipe flag of the `train` program")) << r.err;
      ++checked;
    }
  }
  EXPECT_GE(checked, 15);
}

// Every multi-word flag takes underscores for its dashes, the Trainer's, the recipe's and a
// program's own; a flag defined with underscores keeps them.
TEST(CliFlags, MultiWordFlagsTakeUnderscores) {
  const Outcome o = run_main({"--checkpoint_dir", "ck", "--batch_size", "8", "--log_interval=3", "--keep_checkpoints",
                              "2", "--init_method", "tcp://127.0.0.1:29500", "--test_batch_size", "5"},
                             /*reads_lr=*/true);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  ASSERT_TRUE(o.trained) << o.err;
  EXPECT_EQ(o.config.checkpoint.dir, "ck");
  EXPECT_EQ(o.config.run.batch_size, 8);
  EXPECT_EQ(o.config.logging.log_interval, 3);
  EXPECT_EQ(o.config.checkpoint.keep, 2);
  EXPECT_EQ(o.config.run.test_batch_size, 5);

  // A bad value under the underscore spelling is reported under the flag's name.
  const Outcome bad = run_main({"--keep_checkpoints", "0"}, false);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(has(bad.err, "--keep-checkpoints: expected a positive count, found 0.")) << bad.err;

  std::string own, underscored;
  auto extra = [&own, &underscored](CLI::App& app) -> std::function<int()> {
    app.add_option("--my-setting", own);
    app.add_option("--my_other", underscored);
    return nullptr;
  };
  const Outcome mine = run_main({"--my_setting", "a", "--my_other", "b"}, false, extra);
  EXPECT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_EQ(own, "a");
  EXPECT_EQ(underscored, "b");

  // Arguments after "--" are not flags of the program.
  const Outcome dashes = run_main({"--", "--checkpoint_dir"}, false);
  EXPECT_EQ(dashes.exit_code, 2);
  EXPECT_TRUE(has(dashes.err, "found '--checkpoint_dir'")) << dashes.err;
}

TEST(CliFlags, HelpNamesTheUnderscoreSpellingAndVersionTheGeneratedVersion) {
  const Outcome help = run_main({"--help"}, false);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(has(help.out, "--batch-size")) << help.out;
  EXPECT_FALSE(has(help.out, ",--batch_size")) << help.out;  // not listed as a flag of its own
  EXPECT_FALSE(has(help.out, "\n  --batch_size")) << help.out;
  EXPECT_TRUE(has(help.out, "also take underscores for their dashes: --batch_size is --batch-size")) << help.out;

  const Outcome version = run_main({"--version"}, false);
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out, std::string("libtrain ") + TRAIN_VERSION_STRING + "\n");
  EXPECT_EQ(std::string(train::kVersion), std::to_string(TRAIN_VERSION_MAJOR) + "." +
                                              std::to_string(TRAIN_VERSION_MINOR) + "." +
                                              std::to_string(TRAIN_VERSION_PATCH));
}
