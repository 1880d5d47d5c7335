// Command lines for programs built on the Trainer: the Trainer's own flags bound to a
// TrainConfig, the recipe flags a program opts in to (those its own TrainSpec reads), and a main()
// that resolves the environment, trains, prints the done line and exits with the documented
// status. A program shows and accepts only the flags it honours: an unknown flag is an error.
#pragma once

#include "train/config.h"
#include "train/base/env.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}

namespace train::cli {

/// Adds the flags of everything the Trainer honours (TrainConfig's sections: --epochs,
/// --batch-size, --device, --checkpoint-dir, ...), bound to `config`, each with its checks (a
/// zero --batch-size, an unknown --device... are errors naming the flag). Later copies of a flag
/// win, so arguments appended to a job script override its defaults. Needs CLI11 (CLI/CLI.hpp).
void add_trainer_flags(CLI::App& app, TrainConfig& config);

/// Settings that a program's own TrainSpec may read and the Trainer never does: the data, the
/// optimizer's numbers, the data limits, dropout. Unset values mean "the program's default".
struct RecipeOptions {
  std::string data_dir;                         ///< --data: "" = the program's default
  std::optional<double> lr;                     ///< --lr
  std::optional<double> gamma;                  ///< --gamma: StepLR factor per epoch
  double momentum = 0.9;                        ///< --momentum
  std::optional<double> weight_decay;           ///< --weight-decay
  std::optional<int64_t> limit_train_samples;   ///< --limit-train-samples: the first N (unset: all)
  std::optional<int64_t> limit_test_samples;    ///< --limit-test-samples: the first N (unset: all)
  bool no_dropout = false;                      ///< --no-dropout
};

/// One flag of RecipeOptions.
enum class RecipeFlag { data, lr, gamma, momentum, weight_decay, limit_train_samples, limit_test_samples, no_dropout };

/// Adds the recipe flags `flags` (those the program reads) bound to `options`, with the same
/// checks and defaults as the `train` program's. A flag the program doesn't add stays unknown, so
/// passing it is an error rather than silently ignored.
void add_recipe_flags(CLI::App& app, RecipeOptions& options, const std::vector<RecipeFlag>& flags);

/// Checks the numbers of `options` set without the command line against the ranges their flags
/// check (--lr, --gamma, --momentum, --weight-decay), with the same message and hint.
/// @throws train::ConfigError naming the flag.
void validate(const RecipeOptions& options);

/// Adds a flag that takes one of `choices` (flag texts) and calls `set` with the one given; --help
/// shows `default_text`. Another value is an error naming the flag, the choices and `hint`.
CLI::Option* add_text_choice(CLI::App& app, const std::string& name, const std::vector<std::string>& choices,
                             const std::string& default_text, std::function<void(const std::string&)> set,
                             const std::string& help, const std::string& hint);

/// Adds a flag for an enumerated choice E (its flag texts: train::choices<E>()), bound to `field`.
template <class E>
CLI::Option* add_choice_flag(CLI::App& app, const std::string& name, E& field, const std::string& help,
                             const std::string& hint) {
  std::vector<std::string> texts;
  for (const auto& choice : choices<E>()) texts.push_back(choice.second);
  return add_text_choice(app, name, texts, choice_name(field),
                         [&field, name](const std::string& text) { field = parse_choice<E>(name, text); }, help, hint);
}

/// Applies --init-method and --world-size to the resolved environment: tcp://HOST:PORT sets the
/// rendezvous; a world size is checked against SLURM's or torchrun's numbers.
/// @throws train::ConfigError naming both numbers when they differ.
void apply_rendezvous_flags(const TrainConfig& config, DistEnv& env);

/// What a program trains once its flags are parsed and its environment resolved.
using TrainFn = std::function<TrainResult(const TrainConfig& config, const DistEnv& env)>;

/// Lets a program add flags of its own to main() (its recipe's: add_recipe_flags, or any
/// CLI11 option): called with the App before parsing; the returned action runs after parsing
/// and, when it returns 0 or more, main() exits with that status without training (e.g.
/// `train --list-models`); -1 goes on to train. Its exceptions are reported like the run's
/// (train::ConfigError exits 2, anything else 1).
using ExtraFlags = std::function<std::function<int()>(CLI::App& app)>;

/// A whole main(): parses the Trainer's flags (plus --heap, --version and `extra_flags`),
/// resolves the distributed environment, configures logging with the rank prefix, runs
/// `train_fn`, prints the done line on rank 0's stdout, and returns the exit status: 0 done, 2
/// bad or unknown flags or configuration, 1 any other error (logged with rank and host), 75
/// preempted, 128 + signal cancelled.
int main(int argc, char** argv, const std::string& description, const TrainFn& train_fn,
         const ExtraFlags& extra_flags = nullptr);

/// What a program trains that reads recipe flags too.
using RecipeTrainFn =
    std::function<TrainResult(const TrainConfig& config, const RecipeOptions& recipe, const DistEnv& env)>;

/// main() for a program that reads some recipe flags (`recipe_flags`, e.g. {RecipeFlag::lr}):
/// they are added besides the Trainer's, and `train_fn` gets their values. Any other recipe flag
/// (and --model, --optimizer...) stays unknown: an error, not silently ignored.
int main(int argc, char** argv, const std::string& description, const std::vector<RecipeFlag>& recipe_flags,
         const RecipeTrainFn& train_fn, const ExtraFlags& extra_flags = nullptr);

}  // namespace train::cli
