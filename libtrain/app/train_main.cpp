// The `train` program: the shared `train` flags and main() (train/cli.h) around run_training,
// which trains a registered model on a built-in dataset with its recipe.
#include "train/cli.h"
#include "train/models/model.h"
#include "train/trainer.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

int main(int argc, char** argv) {
  auto list_models = std::make_shared<bool>(false);
  return train::cli::main(
      argc, argv,
      "train: data-parallel training of LibTorch models (single process, torchrun-style variables, or "
      "SLURM srun tasks).\nPrints progress on stderr and one JSON 'done' line on stdout.",
      train::run_training, [list_models](CLI::App& app) -> std::function<int()> {
        app.add_flag("--list-models", *list_models, "print the registered models and exit");
        return [list_models]() {
          if (!*list_models) return -1;
          for (const auto& name : train::models::model_names()) {
            std::cout << name << "\t" << train::models::model_info(name).description << "\n";
          }
          return 0;
        };
      });
}
