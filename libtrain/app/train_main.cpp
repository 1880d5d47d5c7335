// The `train` program: flags -> TrainConfig, environment -> DistEnv, run, print the done line.
// Errors are logged with rank and host and end the process non-zero so srun ends the step.
#include "train/error.h"
#include "train/host_memory.h"
#include "train/launcher/env.h"
#include "train/log.h"
#include "train/models/model.h"
#include "train/trainer.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

namespace {

void add_flags(CLI::App& app, train::TrainConfig& c) {
  app.add_option("--model", c.model, "model to train (see --list-models)")->capture_default_str();
  app.add_option("--dataset", c.dataset, "mnist | fashion-mnist | cifar10 (default: the model's)");
  app.add_option("--data", c.data_dir, "folder with the dataset files (default for fashion-mnist: /usr/share/datasets/fashion-mnist)");
  app.add_option("--epochs", c.epochs, "number of epochs")->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "batch size per rank (default: recipe's, mnist 64, cifar10 256)");
  app.add_option("--test-batch-size", c.test_batch_size, "evaluation batch size")->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate (default: recipe's, Adadelta 1.0, SGD 0.1)");
  app.add_option("--gamma", c.gamma, "StepLR factor per epoch (default: recipe's, 0.7 for mnist)");
  app.add_option("--optimizer", c.optimizer, "auto | adadelta | sgd")->capture_default_str();
  app.add_option("--momentum", c.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "weight decay (default: recipe's, SGD 1e-4)");
  app.add_option("--seed", c.seed, "random seed (model init, dropout, sampler)")->capture_default_str();
  app.add_option("--max-steps", c.max_steps, "stop after this many optimizer steps (0: no limit)")->capture_default_str();
  app.add_option("--limit-train-samples", c.limit_train_samples, "use the first N training samples (0: all)")->capture_default_str();
  app.add_option("--limit-test-samples", c.limit_test_samples, "use the first N test samples (0: all)")->capture_default_str();
  app.add_option("--device", c.device, "auto | cpu | cuda")->capture_default_str();
  app.add_option("--threads", c.threads, "CPU threads per rank (0: cores / ranks on the node)")->capture_default_str();
  app.add_option("--log-interval", c.log_interval, "steps between progress lines")->capture_default_str();
  app.add_option("--save-model", c.save_model, "write the trained parameters to this file (rank 0)");
  app.add_option("--metrics", c.metrics, "append JSON-lines metrics to this file (rank 0)");
  app.add_flag("--dry-run", c.dry_run, "one step per epoch and one test batch, to check a setup");
  app.add_flag("--no-dropout", c.no_dropout, "disable the model's dropout layers");
  app.add_option("--backend", c.backend, "auto | gloo | nccl")->capture_default_str();
  app.add_option("--dist-timeout", c.dist_timeout_sec, "seconds before a missing or stalled peer is an error")->capture_default_str();
  app.add_option("--bucket-cap-mb", c.bucket_cap_mb, "DDP gradient bucket size in MB")->capture_default_str();
  app.add_option("--shm-allreduce", c.shm_allreduce,
                 "auto: ranks on one machine sum CPU gradients through shared memory | off: always Gloo")
      ->capture_default_str();
  app.add_option("--tf32", c.tf32, "TF32 on CUDA: auto (PyTorch's defaults), on, off")->capture_default_str();
  app.add_flag("--deterministic", c.deterministic, "deterministic cuDNN algorithms (slower)");
  app.add_option("--checkpoint-dir", c.checkpoint_dir, "write checkpoints here (shared by all nodes); enables resume");
  app.add_option("--checkpoint-every", c.checkpoint_every, "also checkpoint every N steps (0: only at epoch ends)")->capture_default_str();
  app.add_option("--keep-checkpoints", c.keep_checkpoints, "checkpoints to keep; older ones go once a newer is safe")->capture_default_str();
  app.add_option("--resume", c.resume, "auto (newest valid in --checkpoint-dir) | never | PATH")->capture_default_str();
  app.add_option("--preempt-signal,--preempt-signals", c.preempt_signals,
                 "signals that mean checkpoint-and-stop, comma separated, or none")->capture_default_str();
  app.add_option("--time-margin", c.time_margin_sec, "checkpoint and requeue this many seconds before the SLURM job's end")->capture_default_str();
  app.add_flag("!--no-requeue", c.requeue, "under SLURM, don't run scontrol requeue after a preemption checkpoint");
}

}  // namespace

int main(int argc, char** argv) {
  train::TrainConfig config;
  CLI::App app{"train: data-parallel training of LibTorch models (single process, torchrun-style "
               "variables, or SLURM srun tasks).\nPrints progress on stderr and one JSON 'done' "
               "line on stdout."};
  app.set_version_flag("--version", "libtrain 0.1.0");
  bool list_models = false;
  app.add_flag("--list-models", list_models, "print the registered models and exit");
  std::string heap = "reuse";
  app.add_option("--heap", heap,
                 "reuse: keep freed tensor memory for the next step (glibc mallopt; far fewer page "
                 "faults on CPU) | default: the C library's own thresholds")
      ->check([](const std::string& v) -> std::string {
        if (v == "reuse" || v == "default") return "";
        return "expected reuse or default, found '" + v + "'. Hint: reuse (the default) keeps freed "
               "tensor memory for the next step; default leaves glibc's own thresholds";
      })
      ->capture_default_str();
  // Later copies of a flag win, so `sbatch scripts/ddp.sh --epochs 1` can override the script's defaults.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_flags(app, config);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (list_models) {
    for (const auto& name : train::models::model_names()) {
      std::cout << name << "\t" << train::models::model_info(name).description << "\n";
    }
    return 0;
  }
  train::DistEnv env;
  try {
    env = train::resolve_env(train::current_environment());
    train::log::configure(env.rank, env.world_size, env.host);
    if (heap == "reuse") {
      const auto settings = train::host_memory::keep_freed_memory();
      if (env.rank == 0) train::log::debug(settings.description);
    }
    train::TrainResult result = train::run_training(config, env);
    if (env.rank == 0) {
      std::cout << train::to_json(result) << std::endl;
    }
    return result.preempted ? train::kExitPreempted : 0;
  } catch (const train::ConfigError& e) {
    train::log::error(e.what());
    return 2;
  } catch (const std::exception& e) {
    std::string what = e.what();
    train::log::error(what);
    return 1;
  }
}
