// The `train` flags for any program, their checks, and the shared main(): environment, logging,
// the run, the done line, the exit status.
#include "train/cli.h"

#include "train/augment.h"
#include "train/catalog.h"
#include "train/error.h"
#include "train/host_memory.h"
#include "train/log.h"
#include "train/trainer.h"

#include "health_check.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>

namespace train::cli {
namespace {

/// Exit status for a command line or configuration that is wrong (as getopt-based tools use).
constexpr int kExitUsage = 2;

/// A check that the value is a number in a range; the message names what was expected and
/// found and gives a hint (CLI11 puts the flag's name in front).
CLI::Validator number(const std::string& expected, const std::function<bool(double)>& ok, const std::string& hint) {
  return CLI::Validator(
      [=](std::string& value) -> std::string {
        double v = 0;
        std::size_t used = 0;
        try {
          v = std::stod(value, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != value.size() || value.empty() || !std::isfinite(v)) {
          return "expected " + expected + ", found '" + value + "', which is not a number. Hint: " + hint;
        }
        if (!ok(v)) return "expected " + expected + ", found " + value + ". Hint: " + hint;
        return "";
      },
      expected);
}

CLI::Validator positive(const std::string& what, const std::string& hint) {
  return number("a positive " + what, [](double v) { return v > 0; }, hint);
}

CLI::Validator non_negative(const std::string& what, const std::string& hint) {
  return number(what, [](double v) { return v >= 0; }, hint);
}

CLI::Validator one_of(const std::vector<std::string>& choices, const std::string& hint) {
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  return CLI::Validator(
      [=](std::string& value) -> std::string {
        for (const auto& c : choices) {
          if (value == c) return "";
        }
        return "expected one of " + list + ", found '" + value + "'. Hint: " + hint;
      },
      list);
}

void add_model_and_data_flags(CLI::App& app, TrainConfig& c) {
  app.add_option("--model", c.model, "model to train (see --list-models)")->capture_default_str();
  app.add_option("--dataset", c.dataset, "mnist | fashion-mnist | cifar10 (default: the model's)");
  app.add_option("--data", c.data_dir,
                 "folder with the dataset files, or torchvision's root holding MNIST/raw, FashionMNIST/raw, "
                 "cifar-10-batches-py or cifar-10-batches-bin (default for fashion-mnist: /usr/share/datasets/fashion-mnist)");
  app.add_option("--epochs", c.epochs, "number of epochs (default: the recipe's, mnist 14, cifar10 4)")
      ->check(number("at least 1 epoch", [](double v) { return v >= 1 && v == std::floor(v); }, "e.g. --epochs 14"));
  app.add_option("--batch-size,--batch_size", c.batch_size, "batch size per rank (default: recipe's, mnist 64, cifar10 256)")
      ->check(positive("per-rank batch size", "leave --batch-size out for the recipe's, or e.g. --batch-size 64"));
  app.add_option("--test-batch-size", c.test_batch_size, "evaluation batch size")->capture_default_str()
      ->check(positive("batch size", "e.g. --test-batch-size 1000"));
  app.add_option("--lr", c.lr, "learning rate (default: recipe's, Adadelta 1.0, SGD 0.1; Adam/AdamW 1e-3)")
      ->check(positive("learning rate", "the recipes use 1.0 (Adadelta) and 0.1 (SGD)"));
  app.add_option("--gamma", c.gamma, "StepLR factor per epoch (default: recipe's, 0.7 for mnist)")
      ->check(number("a factor in (0, 1]", [](double v) { return v > 0 && v <= 1; }, "the MNIST recipe uses 0.7"));
  app.add_option("--optimizer", c.optimizer, "auto | adadelta | sgd | adam | adamw")->capture_default_str()
      ->check(one_of({"auto", "adadelta", "sgd", "adam", "adamw"}, "auto takes the model's recipe"));
  app.add_option("--momentum", c.momentum, "SGD momentum")->capture_default_str()
      ->check(number("a momentum in [0, 1)", [](double v) { return v >= 0 && v < 1; }, "the CIFAR-10 recipe uses 0.9"));
  app.add_flag("--nesterov", c.nesterov, "SGD: Nesterov momentum");
  app.add_option("--lr-schedule", c.lr_schedule,
                 "auto (the recipe's) | step (StepLR by --gamma each epoch) | constant | warmup-cosine | linear | "
                 "one-cycle (per step, over the whole run; the graph follows them)")
      ->capture_default_str()
      ->check(one_of({"auto", "step", "constant", "warmup-cosine", "linear", "one-cycle"}, "e.g. --lr-schedule warmup-cosine --warmup-steps 500"));
  app.add_option("--warmup-steps", c.warmup_steps,
                 "warmup-cosine and linear: steps of linear warm-up from 0 (default: the recipe's, resnet18 5% of the run, else 0)")
      ->check(non_negative("0 or more steps", "e.g. --warmup-steps 500"));
  app.add_option("--weight-decay", c.weight_decay, "weight decay (default: recipe's, SGD 1e-4; Adam 0, AdamW 1e-2)")
      ->check(non_negative("a weight decay of 0 or more", "the CIFAR-10 recipe uses 1e-4"));
  app.add_option("--seed", c.seed, "random seed (model init, dropout, sampler)")->capture_default_str();
  app.add_option("--max-steps", c.max_steps, "stop after this many optimizer steps (0: no limit)")->capture_default_str()
      ->check(non_negative("0 (no limit) or a positive number of steps", "e.g. --max-steps 100"));
  app.add_option("--limit-train-samples", c.limit_train_samples, "use the first N training samples (0: all)")->capture_default_str()
      ->check(non_negative("0 (all) or a positive count", "e.g. --limit-train-samples 5000"));
  app.add_option("--limit-test-samples", c.limit_test_samples, "use the first N test samples (0: all)")->capture_default_str()
      ->check(non_negative("0 (all) or a positive count", "e.g. --limit-test-samples 1000"));
  app.add_flag("--no-dropout", c.no_dropout, "disable the model's dropout layers");
  app.add_option("--augment", c.augment,
                 "augment the training images on their device: crop (random crop after 4 pixels of padding), "
                 "flip (horizontal, p=0.5), or crop,flip; deterministic given --seed, resumed exactly")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            try {
              parse_augment(value);
            } catch (const Error& e) {
              return e.message() + " Hint: " + e.hint();
            }
            return "";
          },
          "crop,flip"));
}

void add_run_flags(CLI::App& app, TrainConfig& c) {
  app.add_option("--device", c.device, "auto | cpu | cuda")->capture_default_str()
      ->check(one_of({"auto", "cpu", "cuda"}, "auto uses the GPUs SLURM gave the job, else the CPU"));
  app.add_option("--threads", c.threads, "CPU threads per rank (0: cores / ranks on the node)")->capture_default_str()
      ->check(non_negative("0 (auto) or a positive number of threads", "e.g. --threads 4"));
  app.add_option("--log-interval", c.log_interval, "steps between progress lines")->capture_default_str()
      ->check(positive("number of steps", "e.g. --log-interval 10"));
  app.add_flag("--log-all-ranks", c.log_all_ranks, "info lines from every rank (default: rank 0; warnings and errors always come from every rank)");
  app.add_option("--save-model", c.save_model, "write the trained parameters to this file (rank 0)");
  app.add_option("--metrics", c.metrics, "append JSON-lines metrics to this file (rank 0)");
  app.add_option("--tensorboard", c.tensorboard,
                 "write TensorBoard event files (the --metrics numbers as scalars) into this folder (rank 0); "
                 "a resumed run goes on in the same folder");
  app.add_option("--profile", c.profile,
                 "write a torch-profiler trace of --profile-steps (CPU operators; CUDA kernels, also inside CUDA "
                 "graphs) to this folder, one trace-rankR.json per rank (Perfetto or chrome://tracing)");
  app.add_option("--profile-steps", c.profile_steps,
                 "FROM:TO: the optimizer steps --profile traces, counted from 1 over the run")
      ->capture_default_str();
  app.add_flag("--dry-run", c.dry_run, "one step per epoch and one test batch, to check a setup");
  app.add_option("--backend", c.backend, "auto | gloo | nccl")->capture_default_str()
      ->check(one_of({"auto", "gloo", "nccl"}, "nccl for GPUs, gloo for CPUs"));
  app.add_option("--dist-timeout", c.dist_timeout_sec, "seconds before a missing or stalled peer is an error")->capture_default_str()
      ->check(positive("number of seconds", "the default is 300"));
  app.add_option("--stall-timeout", c.stall_timeout_sec,
                 "seconds without progress before rank 0 prints a roll-call of where every rank is and the run "
                 "exits (status 79); 0: 10x the median step, at least 60 s, at most 80% of --dist-timeout")
      ->capture_default_str()
      ->check(non_negative("number of seconds", "e.g. --stall-timeout 120; it must be below --dist-timeout"));
  app.add_flag("--ddp-single-rank", c.ddp_single_rank,
               "with one rank too: a process group and DDP (measures what DDP itself costs)");
  app.add_option("--bucket-cap-mb", c.bucket_cap_mb, "DDP gradient bucket size in MB")->capture_default_str()
      ->check(positive("size in MB", "the default is 25"));
  app.add_option("--shm-allreduce", c.shm_allreduce,
                 "auto: ranks on one machine sum CPU gradients through shared memory | off: always Gloo")
      ->capture_default_str()->check(one_of({"auto", "off"}, "off sends CPU gradients through Gloo"));
  app.add_option("--tf32", c.tf32, "TF32 on CUDA: auto (PyTorch's defaults), on, off")->capture_default_str()
      ->check(one_of({"auto", "on", "off"}, "on trades precision for speed on Ampere and newer GPUs"));
  app.add_flag("--deterministic", c.deterministic, "deterministic cuDNN algorithms (slower)");
  app.add_flag("--cudnn-benchmark", c.cudnn_benchmark,
               "let cuDNN time its algorithms for each new shape (seconds at start; may pay off in long runs)");
  app.add_option("--cuda-graph", c.cuda_graph, "the training step in a CUDA graph: auto (on for CUDA), on, off")
      ->capture_default_str()->check(one_of({"auto", "on", "off"}, "off runs the step eagerly"));
  app.add_option("--graph-allreduce", c.graph_allreduce,
                 "several GPUs with --cuda-graph: in-graph (NCCL averages captured in the step, overlapping the "
                 "backward), between (one eager all-reduce between two graphs)")
      ->capture_default_str()->check(one_of({"in-graph", "between"}, "between is the fallback if in-graph misbehaves"));
  app.add_option("--peer-allreduce", c.peer_allreduce,
                 "with --graph-allreduce in-graph, when every rank's GPU is on one machine: gradient buckets averaged "
                 "by one kernel that reads the other GPUs' memory instead of NCCL. auto (two ranks), on (2 to 8 "
                 "ranks), off (NCCL only)")
      ->capture_default_str()->check(one_of({"auto", "on", "off"}, "off averages every bucket with NCCL"));
  app.add_option("--channels-last", c.channels_last,
                 "CUDA: keep convolution weights and activations in channels-last (NHWC) order, which cuDNN "
                 "computes in without converting: on, off")
      ->capture_default_str()->check(one_of({"on", "off"}, "on avoids cuDNN's layout conversions"));
  app.add_option("--precision", c.precision,
                 "CUDA arithmetic: auto (bf16 for per-rank batches of 512 or more on GPUs that have it, else fp32), "
                 "fp32, tf32 (TF32 matmuls/convolutions), bf16 (autocast, fp32 master weights)")
      ->capture_default_str()->check(one_of({"auto", "fp32", "tf32", "bf16"}, "bf16 is fastest on Ampere and newer GPUs"));
  app.add_option("--init-method,--init_method", c.init_method,
                 "tcp://HOST:PORT of rank 0's rendezvous (wins over MASTER_ADDR/MASTER_PORT)");
  app.add_option("--world-size,--world_size", c.world_size,
                 "number of ranks; checked against SLURM's or torchrun's (default: theirs)")
      ->check(positive("number of ranks", "leave it out to take it from SLURM or torchrun"));
}

// issue 24: the network interface and the health check.
void add_network_and_health_flags(CLI::App& app, detail::NetHealthOptions& c) {
  app.add_option("--interface", c.interface,
                 "network interface (e.g. ib0) for Gloo, NCCL (NCCL_SOCKET_IFNAME) and the rendezvous store; "
                 "checked to exist with an address (default: $TRAIN_INTERFACE, else each library's own choice)")
      ->envname("TRAIN_INTERFACE");
  app.add_flag("--health-check", c.health_check,
               "before training, measure each node's GEMM throughput and the all-reduce bus bandwidth, and name "
               "the nodes below --health-min-fraction of the others' median (exits 69 if any)");
  app.add_option("--health-min-fraction", c.health_min_fraction,
                 "a node is bad when its GEMM throughput is below this fraction of the median of the other nodes'")
      ->capture_default_str()
      ->check(number("a fraction in (0, 1]", [](double v) { return v > 0 && v <= 1; }, "the default is 0.5"));
  app.add_flag("--health-warn-only", c.health_warn_only, "with --health-check: name the bad nodes, then train anyway");
  app.add_flag("--exclude-bad-nodes", c.exclude_bad_nodes,
               "with --health-check under SLURM: requeue the job without the bad nodes (at most 3 times per job)");
}

void add_checkpoint_flags(CLI::App& app, TrainConfig& c) {
  app.add_option("--checkpoint-dir", c.checkpoint_dir, "write checkpoints here (shared by all nodes); enables resume");
  app.add_option("--checkpoint-every", c.checkpoint_every, "also checkpoint every N steps (0: only at epoch ends)")->capture_default_str()
      ->check(non_negative("0 (epoch ends only) or a positive number of steps", "e.g. --checkpoint-every 500"));
  app.add_option("--keep-checkpoints", c.keep_checkpoints, "checkpoints to keep; older ones go once a newer is safe")->capture_default_str()
      ->check(positive("count", "keep 2 or more so a corrupt newest file can fall back"));
  app.add_option("--resume", c.resume, "auto (newest valid in --checkpoint-dir) | never | PATH")->capture_default_str();
  app.add_option("--preempt-signal,--preempt-signals", c.preempt_signals,
                 "signals that mean checkpoint, requeue and resume (comma separated, or none); SIGTERM and "
                 "SIGINT mean checkpoint and stop unless listed here")->capture_default_str();
  app.add_option("--time-margin", c.time_margin_sec, "checkpoint and requeue this many seconds before the SLURM job's end")->capture_default_str()
      ->check(non_negative("0 or more seconds", "the default is 60"));
  // A callback rather than CLI11's "!--no-requeue" negation, which --help shows as `--no-requeue{false}`.
  app.add_flag_callback("--no-requeue", [&c] { c.requeue = false; },
                        "under SLURM, don't run scontrol requeue after a preemption checkpoint");
  // issue 24
  app.add_option("--nonfinite", c.nonfinite,
                 "what a non-finite loss or gradient does: stop (no checkpoint of the bad weights, exit 65) | "
                 "skip (drop that step's update; stop after --nonfinite-max-skips in a row)")
      ->check(one_of({"stop", "skip"}, "stop ends the run at the first NaN/inf; skip drops such steps' updates"))
      ->capture_default_str();
  app.add_option("--nonfinite-max-skips", c.nonfinite_max_skips,
                 "--nonfinite skip: stop with the non-finite error once this many steps in a row were skipped")
      ->check(positive("number of steps", "e.g. --nonfinite-max-skips 10"))
      ->capture_default_str();
}

}  // namespace

void add_train_flags(CLI::App& app, TrainConfig& c) {
  // Later copies of a flag win, so `sbatch scripts/ddp.sh --epochs 1` can override the script's defaults.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_and_data_flags(app, c);
  add_run_flags(app, c);
  add_checkpoint_flags(app, c);
  add_network_and_health_flags(app, detail::net_health_options());
}

void apply_rendezvous_flags(const TrainConfig& c, DistEnv& env) {
  if (c.world_size > 0) {
    if (env.source == EnvSource::single && c.world_size > 1) {
      throw ConfigError("--world-size " + std::to_string(c.world_size) +
                            ": expected the ranks to come from SLURM (srun) or torchrun, found a single process "
                            "(no SLURM_PROCID, no RANK).",
                        "start the ranks with srun, torchrun or `trainctl local --nproc " + std::to_string(c.world_size) +
                            "`; --world-size only checks their number.");
    }
    check_world_size_agrees("--world-size", std::to_string(c.world_size), env);
  }
  if (!c.init_method.empty()) apply_init_method(c.init_method, env);
}

int main(int argc, char** argv, const std::string& description, const TrainFn& train_fn,
         const ExtraFlags& extra_flags) {
  TrainConfig config;
  CLI::App app{description};
  app.set_version_flag("--version", "libtrain 0.1.0");
  std::string heap = "reuse";
  app.add_option("--heap", heap,
                 "reuse: keep freed tensor memory for the next step (glibc mallopt; far fewer page "
                 "faults on CPU) | default: the C library's own thresholds")
      ->check(one_of({"reuse", "default"}, "reuse (the default) keeps freed tensor memory for the next step"))
      ->capture_default_str();
  add_train_flags(app, config);
  std::function<int()> extra_action;
  if (extra_flags) extra_action = extra_flags(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  // Without --epochs a built-in model trains for its recipe's epochs (the catalog).
  if (app.count("--epochs") == 0 && catalog::has_recipe(config.model)) config.epochs = catalog::recipe_for(config.model).epochs;
  try {
    if (extra_action) {
      const int rc = extra_action();
      if (rc >= 0) return rc;
    }
    DistEnv env = resolve_env(current_environment());
    log::configure(env.rank, env.world_size, env.host, config.log_all_ranks);
    apply_rendezvous_flags(config, env);
    if (heap == "reuse") {
      const auto settings = host_memory::keep_freed_memory();
      if (env.rank == 0) log::debug(settings.description);
    }
    const TrainResult result = train_fn(config, env);
    if (env.rank == 0) std::cout << to_json(result) << std::endl;
    return result.exit_code();
  } catch (const ConfigError& e) {
    log::error(e.what());
    return kExitUsage;
  } catch (const detail::HealthError& e) {
    log::error(e.what());
    return detail::kExitUnhealthy;
  } catch (const std::exception& e) {
    log::error(e.what());
    return 1;
  }
}

}  // namespace train::cli
