// The Trainer's flags and the opt-in recipe flags for any program, their checks, and the shared
// main(): environment, logging, the run, the done line, the exit status.
#include "train/cli.h"

#include "train/base/error.h"
#include "train/base/files.h"
#include "train/base/host_memory.h"
#include "train/base/log.h"
#include "train/base/text.h"
#include "train/trainer.h"
#include "train/base/version.h"

#include "health/health_check.h"

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>

namespace train::cli {
namespace {

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

// The range of one of RecipeOptions' numbers, with its hint: the flag's check, and validate()'s for
// options set in code, so both say the same.
struct NumberRule {
  const char* flag;
  const char* expected;
  bool (*ok)(double);
  const char* hint;
};

constexpr NumberRule kLrRule{"--lr", "a positive learning rate", [](double v) { return v > 0; },
                             "the recipes use 1.0 (Adadelta) and 0.1 (SGD)"};
constexpr NumberRule kGammaRule{"--gamma", "a factor in (0, 1]", [](double v) { return v > 0 && v <= 1; },
                                "the MNIST recipe uses 0.7"};
constexpr NumberRule kMomentumRule{"--momentum", "a momentum in [0, 1)", [](double v) { return v >= 0 && v < 1; },
                                   "the CIFAR-10 recipe uses 0.9"};
constexpr NumberRule kWeightDecayRule{"--weight-decay", "a weight decay of 0 or more", [](double v) { return v >= 0; },
                                      "the CIFAR-10 recipe uses 1e-4"};

CLI::Validator number(const NumberRule& rule) { return number(rule.expected, rule.ok, rule.hint); }

void check(const NumberRule& rule, double value) {
  if (rule.ok(value)) return;
  throw ConfigError(std::string(rule.flag) + ": expected " + rule.expected + ", found " + text::format("%g", value) + ".",
                    rule.hint);
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

// A two-way choice kept as a bool: `yes` sets it, `no` clears it.
CLI::Option* add_bool_choice(CLI::App& app, const std::string& name, bool& field, const std::string& yes,
                             const std::string& no, const std::string& help, const std::string& hint) {
  return add_text_choice(app, name, {yes, no}, field ? yes : no, [&field, yes](const std::string& v) { field = v == yes; },
                         help, hint);
}

// A number that may be unset; with `zero_unsets`, 0 on the command line means unset (`--max-steps 0`: no limit).
template <class T>
CLI::Option* add_optional(CLI::App& app, const std::string& name, std::optional<T>& field, const std::string& help,
                          bool zero_unsets = false) {
  CLI::Option* o = app.add_option_function<T>(name, [&field, zero_unsets](const T& v) {
    if (zero_unsets && v == 0) {
      field.reset();
    } else {
      field = v;
    }
  }, help);
  if (zero_unsets) o->default_str("0");
  return o;
}

void add_run_flags(CLI::App& app, RunConfig& r) {
  add_optional(app, "--epochs", r.epochs, "number of epochs (default: the program's)")
      ->check(number("at least 1 epoch", [](double v) { return v >= 1 && v == std::floor(v); }, "e.g. --epochs 14"));
  add_optional(app, "--batch-size", r.batch_size, "batch size per rank (default: the program's)")
      ->check(positive("per-rank batch size", "leave --batch-size out for the program's, or e.g. --batch-size 64"));
  app.add_option("--test-batch-size", r.test_batch_size, "evaluation batch size")->capture_default_str()
      ->check(positive("batch size", "e.g. --test-batch-size 1000"));
  app.add_option("--seed", r.seed, "random seed (model init, dropout, sampler)")->capture_default_str();
  add_optional(app, "--max-steps", r.max_steps, "stop after this many optimizer steps (0: no limit)", true)
      ->check(non_negative("0 (no limit) or a positive number of steps", "e.g. --max-steps 100"));
  add_choice_flag(app, "--device", r.device, "auto | cpu | cuda", "auto uses the GPUs SLURM gave the job, else the CPU");
  add_optional(app, "--threads", r.threads, "CPU threads per rank (0: cores / ranks on the node)", true)
      ->check(non_negative("0 (auto) or a positive number of threads", "e.g. --threads 4"));
  app.add_flag("--dry-run", r.dry_run, "one step per epoch and one test batch, to check a setup");
  add_choice_flag(app, "--precision", r.precision,
             "CUDA arithmetic: auto (fp32, unless the program's TrainSpec::auto_bf16_batch asks for bf16 from a "
             "per-rank batch size up on GPUs that have it), "
             "fp32, tf32 (TF32 matmuls/convolutions), bf16 (autocast, fp32 master weights)",
             "bf16 is fastest on Ampere and newer GPUs");
  add_choice_flag(app, "--nonfinite", r.nonfinite,
                  "what a non-finite loss or gradient does: stop (no checkpoint of the bad weights, exit 65) | "
                  "skip (drop that step's update; stop after --nonfinite-max-skips in a row)",
                  "stop ends the run at the first NaN/inf; skip drops such steps' updates");
  app.add_option("--nonfinite-max-skips", r.nonfinite_max_skips,
                 "--nonfinite skip: stop with the non-finite error once this many steps in a row were skipped")
      ->check(positive("number of steps", "e.g. --nonfinite-max-skips 10"))
      ->capture_default_str();
  add_optional(app, "--accumulate-steps", r.accumulate_steps,
               "micro-batches of --batch-size per optimizer step, gradients averaged once after the last "
               "(default: the program's, 1)")
      ->check(number("a whole number of micro-batches, at least 1", [](double v) { return v >= 1 && v == std::floor(v); },
                     "e.g. --accumulate-steps 4 (1: no accumulation)"));
  add_optional(app, "--clip-grad-norm", r.clip_grad_norm,
               "clip the averaged gradients' total 2-norm to this before each update (clip_grad_norm_; "
               "default: the program's, none)")
      ->check(positive("total gradient norm", "e.g. --clip-grad-norm 1.0; leave it out for no clipping"));
}

// The training controls: early stopping, the weights' moving average, an evaluation-only run.
void add_control_flags(CLI::App& app, RunConfig& r) {
  app.add_option("--early-stop-metric", r.early_stop_metric,
                 "stop at an epoch's end once this metric has not improved for --early-stop-patience epochs: "
                 "test_loss (lower is better) or test_accuracy, test_NAME of the program's metrics (higher is "
                 "better) (default: the program's; none)");
  add_optional(app, "--early-stop-patience", r.early_stop_patience,
               "epochs without improvement of --early-stop-metric before the run stops (default: the program's, 3)")
      ->check(positive("number of epochs", "e.g. --early-stop-patience 3"));
  add_optional(app, "--early-stop-min-delta", r.early_stop_min_delta,
               "an improvement of --early-stop-metric must exceed this (default: the program's, 0)")
      ->check(non_negative("0 or more", "e.g. --early-stop-min-delta 0.001"));
  add_optional(app, "--ema-decay", r.ema_decay,
               "keep an exponential moving average of the weights (ema = decay x ema + (1 - decay) x weights, "
               "after every step), evaluate it instead of the weights and checkpoint it (default: the program's; none)")
      ->check(number("a decay in [0, 1)", [](double v) { return v >= 0 && v < 1; }, "e.g. --ema-decay 0.999"));
  app.add_flag("--eval-only", r.eval_only,
               "evaluate the checkpoint of --resume PATH (or the newest in --checkpoint-dir), print the test line and "
               "the done line, and write nothing");
}

// The loader of data read sample by sample (TrainSpec::train_samples).
void add_data_flags(CLI::App& app, DataConfig& d) {
  add_optional(app, "--data-workers,--num-workers", d.workers,
               "threads per rank that read and collate the samples of data read sample by sample (0: half the "
               "rank's threads, 1 to 8)", true)
      ->check(non_negative("0 (auto) or a positive number of threads", "e.g. --data-workers 4"));
  add_optional(app, "--prefetch", d.prefetch,
               "batches the loader reads ahead of the one training, per rank (its memory: prefetch + 1 batches; "
               "default: the --data-workers count, at least 2: each thread fills whole batches, so fewer batches "
               "ahead than threads leave threads idle)", true)
      ->check(positive("number of batches", "e.g. --prefetch 4"));
  add_choice_flag(app, "--bad-samples", d.bad_samples,
                  "a sample the data can't read: fail (the error names the file and the sample, exit 1, before that "
                  "batch trains) | skip (the next readable sample of the epoch's order takes its place; counted in "
                  "the done line)",
                  "fail stops at the first bad sample; skip trains on and counts them");
}

void add_logging_flags(CLI::App& app, LoggingConfig& l) {
  app.add_option("--log-interval", l.log_interval, "steps between progress lines")->capture_default_str()
      ->check(positive("number of steps", "e.g. --log-interval 10"));
  app.add_flag("--log-all-ranks", l.log_all_ranks, "info lines from every rank (default: rank 0; warnings and errors always come from every rank)");
  app.add_option("--save-model", l.save_model, "write the trained parameters to this file (rank 0)");
  app.add_option("--metrics", l.metrics, "append JSON-lines metrics to this file (rank 0)");
  app.add_option("--tensorboard", l.tensorboard,
                 "write TensorBoard event files (the --metrics numbers as scalars) into this folder (rank 0); "
                 "a resumed run goes on in the same folder");
  app.add_option("--profile", l.profile,
                 "write a torch-profiler trace of --profile-steps (CPU operators; CUDA kernels, also inside CUDA "
                 "graphs) to this folder, one trace-rankR.json per rank (Perfetto or chrome://tracing)");
  app.add_option("--profile-steps", l.profile_steps,
                 "FROM:TO: the optimizer steps --profile traces, counted from 1 over the run")
      ->capture_default_str();
}

void add_distributed_flags(CLI::App& app, DistributedConfig& d) {
  add_choice_flag(app, "--backend", d.backend, "auto | gloo | nccl", "nccl for GPUs, gloo for CPUs");
  app.add_option("--dist-timeout", d.timeout_sec, "seconds before a missing or stalled peer is an error")->capture_default_str()
      ->check(positive("number of seconds", "the default is 300"));
  add_optional(app, "--stall-timeout", d.stall_timeout_sec,
               "seconds without progress before rank 0 prints a roll-call of where every rank is and the run "
               "exits (status 79); 0: 10x the median step, at least 60 s, at most 80% of --dist-timeout", true)
      ->check(non_negative("number of seconds", "e.g. --stall-timeout 120; it must be below --dist-timeout"));
  app.add_flag("--ddp-single-rank", d.ddp_single_rank,
               "with one rank too: a process group and DDP (measures what DDP itself costs)");
  app.add_option("--bucket-cap-mb", d.bucket_cap_mb, "DDP gradient bucket size in MB")->capture_default_str()
      ->check(positive("size in MB", "the default is 25"));
  add_bool_choice(app, "--shm-allreduce", d.shm_allreduce, "auto", "off",
                  "auto: ranks on one machine sum CPU gradients through shared memory | off: always Gloo",
                  "off sends CPU gradients through Gloo");
  app.add_flag("--shard-optimizer", d.shard_optimizer,
               "ZeRO-1: each rank keeps and updates the optimizer state of its shard of the parameters "
               "(about 1/ranks of it); gradients reduce-scattered, parameters all-gathered (Gloo or shared memory on "
               "CPUs, NCCL inside the CUDA graph on GPUs); checkpoints hold the whole state");
  app.add_option("--init-method", d.init_method,
                 "tcp://HOST:PORT of rank 0's rendezvous (wins over MASTER_ADDR/MASTER_PORT)");
  add_optional(app, "--world-size", d.world_size,
               "number of ranks; checked against SLURM's or torchrun's (default: theirs)")
      ->check(positive("number of ranks", "leave it out to take it from SLURM or torchrun"));
}

void add_gpu_flags(CLI::App& app, GpuConfig& g) {
  add_choice_flag(app, "--tf32", g.tf32, "TF32 on CUDA: auto (PyTorch's defaults), on, off",
             "on trades precision for speed on Ampere and newer GPUs");
  app.add_flag("--deterministic", g.deterministic, "deterministic cuDNN algorithms (slower)");
  app.add_flag("--cudnn-benchmark", g.cudnn_benchmark,
               "let cuDNN time its algorithms for each new shape (seconds at start; may pay off in long runs)");
  add_choice_flag(app, "--cuda-graph", g.cuda_graph, "the training step in a CUDA graph: auto (on for CUDA), on, off",
             "off runs the step eagerly");
  add_choice_flag(app, "--graph-allreduce", g.graph_allreduce,
             "several GPUs with --cuda-graph: in-graph (NCCL averages captured in the step, overlapping the "
             "backward), between (one eager all-reduce between two graphs)",
             "between is the fallback if in-graph misbehaves");
  add_choice_flag(app, "--peer-allreduce", g.peer_allreduce,
             "with --graph-allreduce in-graph, when every rank's GPU is on one machine: gradient buckets averaged "
             "by one kernel that reads the other GPUs' memory instead of NCCL. auto (two ranks, or up to 4 of "
             "one machine), on (2 to 8 ranks), off (NCCL only)",
             "off averages every bucket with NCCL");
  add_bool_choice(app, "--channels-last", g.channels_last, "on", "off",
                  "CUDA: keep convolution weights and activations in channels-last (NHWC) order, which cuDNN "
                  "computes in without converting: on, off",
                  "on avoids cuDNN's layout conversions");
}

// The network interface and the health check.
void add_network_and_health_flags(CLI::App& app, TrainConfig& t) {
  HealthConfig& c = t.health;
  app.add_option("--interface", t.distributed.interface,
                 "network interface (e.g. ib0) for Gloo, NCCL (NCCL_SOCKET_IFNAME) and the rendezvous store; "
                 "checked to exist with an address (default: $TRAIN_INTERFACE, else each library's own choice)")
      ->envname("TRAIN_INTERFACE");
  app.add_flag("--health-check", c.check,
               "before training, measure each node's GEMM throughput and the all-reduce bus bandwidth, and name "
               "the nodes below --health-min-fraction of the others' median (exits 69 if any)");
  app.add_option("--health-min-fraction", c.min_fraction,
                 "a node is bad when its GEMM throughput is below this fraction of the median of the other nodes'")
      ->capture_default_str()
      ->check(number("a fraction in (0, 1]", [](double v) { return v > 0 && v <= 1; }, "the default is 0.5"));
  app.add_flag("--health-warn-only", c.warn_only, "with --health-check: name the bad nodes, then train anyway");
  app.add_flag("--exclude-bad-nodes", c.exclude_bad_nodes,
               "with --health-check under SLURM: requeue the job without the bad nodes (at most 3 times per job)");
}

void add_checkpoint_flags(CLI::App& app, CheckpointConfig& k) {
  app.add_option("--checkpoint-dir", k.dir, "write checkpoints here (shared by all nodes); enables resume");
  add_optional(app, "--checkpoint-every", k.every, "also checkpoint every N steps (0: only at epoch ends)", true)
      ->check(non_negative("0 (epoch ends only) or a positive number of steps", "e.g. --checkpoint-every 500"));
  app.add_option_function<std::string>("--snapshot-every", [&k](const std::string& v) {
    if (v == "auto") {
      k.snapshot_every.reset();
      return;
    }
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < 0) {
      throw CLI::ValidationError("--snapshot-every", "expected auto, 0 (off) or a positive number of steps, found '" + v +
                                                         "'. Hint: e.g. --snapshot-every 50, or leave it out for auto");
    }
    k.snapshot_every = n;
  }, "under SLURM with --checkpoint-dir: keep the newest state in each node's memory every N steps, "
     "for a restart inside the allocation (0: off; auto: as often as costs at most 0.5% of the training time, 0.7% with the background write where CPU ranks take every core)")
      ->default_str("auto");
  app.add_option("--keep-checkpoints", k.keep, "checkpoints to keep; older ones go once a newer is safe")->capture_default_str()
      ->check(positive("count", "keep 2 or more so a corrupt newest file can fall back"));
  app.add_option_function<std::string>("--resume", [&k](const std::string& v) {
    k.resume = v == "auto" ? ResumeMode::automatic : v == "never" ? ResumeMode::never : ResumeMode::path;
    k.resume_path = k.resume == ResumeMode::path ? v : "";
  }, "auto (newest valid in --checkpoint-dir) | never | PATH")->default_str("auto");
  app.add_option("--preempt-signal,--preempt-signals", k.preempt_signals,
                 "signals that mean checkpoint, requeue and resume (comma separated, or none); SIGTERM and "
                 "SIGINT mean checkpoint and stop unless listed here")->capture_default_str();
  app.add_option("--time-margin", k.time_margin_sec, "checkpoint and requeue this many seconds before the SLURM job's end")->capture_default_str()
      ->check(non_negative("0 or more seconds", "the default is 60"));
  // A callback rather than CLI11's "!--no-requeue" negation, which --help shows as `--no-requeue{false}`.
  app.add_flag_callback("--no-requeue", [&k] { k.requeue = false; },
                        "under SLURM, don't run scontrol requeue after a preemption checkpoint");
}

void add_recipe_flag(CLI::App& app, RecipeOptions& o, RecipeFlag flag) {
  switch (flag) {
    case RecipeFlag::data:
      app.add_option("--data", o.data_dir, "folder with the dataset files");
      break;
    case RecipeFlag::lr:
      add_optional(app, "--lr", o.lr, "learning rate (default: the program's)")->check(number(kLrRule));
      break;
    case RecipeFlag::gamma:
      add_optional(app, "--gamma", o.gamma, "StepLR factor per epoch (default: the program's)")->check(number(kGammaRule));
      break;
    case RecipeFlag::momentum:
      app.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str()->check(number(kMomentumRule));
      break;
    case RecipeFlag::weight_decay:
      add_optional(app, "--weight-decay", o.weight_decay, "weight decay (default: the program's)")
          ->check(number(kWeightDecayRule));
      break;
    case RecipeFlag::limit_train_samples:
      add_optional(app, "--limit-train-samples", o.limit_train_samples, "use the first N training samples (0: all)", true)
          ->check(non_negative("0 (all) or a positive count", "e.g. --limit-train-samples 5000"));
      break;
    case RecipeFlag::limit_test_samples:
      add_optional(app, "--limit-test-samples", o.limit_test_samples, "use the first N test samples (0: all)", true)
          ->check(non_negative("0 (all) or a positive count", "e.g. --limit-test-samples 1000"));
      break;
    case RecipeFlag::no_dropout:
      app.add_flag("--no-dropout", o.no_dropout, "disable the model's dropout layers");
      break;
  }
}

// The `train` program's recipe flags (train/builtin.h's add_flags): a program has those it adds.
const std::vector<std::string>& train_recipe_flags() {
  static const std::vector<std::string> names = {
      "--model", "--dataset", "--data", "--lr", "--gamma", "--optimizer", "--momentum", "--nesterov",
      "--lr-schedule", "--warmup-steps", "--weight-decay", "--limit-train-samples", "--limit-test-samples",
      "--no-dropout", "--augment", "--list-models", "--stream", "--image-size", "--eval-data", "--decode"};
  return names;
}

// The long names of the app's flags, without their dashes.
std::vector<std::string> long_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& n : o->get_lnames()) names.push_back(n);
  }
  return names;
}

// `--name` of an argument: "--epoch=3" gives "--epoch"; "" for what is not a long flag.
std::string flag_name(const std::string& arg) {
  if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) return "";
  return arg.substr(0, arg.find('='));
}

/// Multi-word flags take underscores for their dashes (--checkpoint_dir is --checkpoint-dir):
/// `args` with each such spelling of a flag the app has, and doesn't have as written, rewritten.
std::vector<std::string> dashed_flags(const CLI::App& app, std::vector<std::string> args) {
  for (std::string& arg : args) {
    if (arg == "--") break;  // what follows is no flag of ours
    const std::string name = flag_name(arg);
    if (name.find('_') == std::string::npos || app.get_option_no_throw(name) != nullptr) continue;
    std::string dashed = name;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    if (app.get_option_no_throw(dashed) != nullptr) arg = dashed + arg.substr(name.size());
  }
  return args;
}

/// The house message for arguments CLI11 didn't expect (`extras`, in command-line order): the
/// first unknown flag, a "did you mean" for one close to a flag the program takes, and the hint
/// about `train`'s recipe flags only for one of them that this program doesn't read.
std::string unknown_flags_message(const CLI::App& app, const std::string& program, const std::vector<std::string>& extras) {
  std::string flag;
  for (const std::string& e : extras) {
    if (e != "--" && (!flag_name(e).empty() || (e.size() > 1 && e[0] == '-'))) {
      flag = e.substr(0, e.find('='));
      break;
    }
  }
  if (flag.empty()) {
    const std::string found = extras.empty() ? "" : extras.front();
    return program + ": expected only flags (this program takes no positional arguments), found '" + found +
           "'.\nHint: a flag's value follows it (--epochs 3); `" + program + " --help` lists the flags.";
  }
  std::string msg = program + ": unknown flag " + flag + ": expected a flag this program takes (`" + program +
                    " --help` lists them), found '" + flag + "'.\nHint: ";
  const auto& recipe = train_recipe_flags();
  if (std::find(recipe.begin(), recipe.end(), flag) != recipe.end()) {
    return msg + flag + " is a recipe flag of the `train` program, and exists only in programs that read it; a "
                        "program built on train::cli::main adds those it reads with train::cli::add_recipe_flags "
                        "(docs/api.md).";
  }
  const std::size_t letters = flag.find_first_not_of('-');
  std::vector<std::string> near = text::closest(letters == std::string::npos ? "" : flag.substr(letters), long_names(app));
  for (std::string& n : near) n = "--" + n;
  if (!near.empty()) return msg + "did you mean " + text::or_list(near) + "?";
  return msg + "`" + program + " --help` lists the flags this program takes.";
}

/// Parses the command line (flags with underscores taken as dashes). Unset when the run goes on;
/// else main()'s status: 0 after --help or --version, kExitUsage after a flag error (said on stderr).
std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  std::string program = argc > 0 ? argv[0] : "train";
  if (app.get_name().empty()) app.name(program);  // what parse(argc, argv) does: --help's usage line
  program = program.substr(program.find_last_of('/') + 1);
  std::vector<std::string> args = dashed_flags(app, std::vector<std::string>(argv + std::min(argc, 1), argv + argc));
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector last-first
  try {
    app.parse(args);
  } catch (const CLI::ExtrasError&) {
    std::cerr << unknown_flags_message(app, program, app.remaining()) << std::endl;
    return kExitUsage;
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  return std::nullopt;
}

}  // namespace

CLI::Option* add_text_choice(CLI::App& app, const std::string& name, const std::vector<std::string>& choices,
                             const std::string& default_text, std::function<void(const std::string&)> set,
                             const std::string& help, const std::string& hint) {
  return app.add_option_function<std::string>(name, std::move(set), help)->check(one_of(choices, hint))->default_str(default_text);
}

void add_trainer_flags(CLI::App& app, TrainConfig& c) {
  // Later copies of a flag win, so `sbatch scripts/ddp.sh --epochs 1` can override the script's defaults.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_run_flags(app, c.run);
  add_control_flags(app, c.run);
  add_logging_flags(app, c.logging);
  add_distributed_flags(app, c.distributed);
  add_gpu_flags(app, c.gpu);
  add_checkpoint_flags(app, c.checkpoint);
  add_network_and_health_flags(app, c);
  add_data_flags(app, c.data);
}

void add_recipe_flags(CLI::App& app, RecipeOptions& options, const std::vector<RecipeFlag>& flags) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (RecipeFlag flag : flags) add_recipe_flag(app, options, flag);
}

void validate(const RecipeOptions& options) {
  if (options.lr) check(kLrRule, *options.lr);
  if (options.gamma) check(kGammaRule, *options.gamma);
  check(kMomentumRule, options.momentum);
  if (options.weight_decay) check(kWeightDecayRule, *options.weight_decay);
}

void apply_rendezvous_flags(const TrainConfig& c, DistEnv& env) {
  if (const std::optional<int> world = c.distributed.world_size) {
    if (env.source == EnvSource::single && *world > 1) {
      throw ConfigError("--world-size " + std::to_string(*world) +
                            ": expected the ranks to come from SLURM (srun) or torchrun, found a single process "
                            "(no SLURM_PROCID, no RANK).",
                        "start the ranks with srun, torchrun or `trainctl local --nproc " + std::to_string(*world) +
                            "`; --world-size only checks their number.");
    }
    check_world_size_agrees("--world-size", std::to_string(*world), env);
  }
  if (!c.distributed.init_method.empty()) apply_init_method(c.distributed.init_method, env);
}

int main(int argc, char** argv, const std::string& description, const TrainFn& train_fn,
         const ExtraFlags& extra_flags) {
  TrainConfig config;
  CLI::App app{description};
  app.set_version_flag("--version", std::string("libtrain ") + TRAIN_VERSION_STRING);
  std::string heap = "reuse";
  app.add_option("--heap", heap,
                 "reuse: keep freed tensor memory for the next step (glibc mallopt; far fewer page "
                 "faults on CPU) | default: the C library's own thresholds")
      ->check(one_of({"reuse", "default"}, "reuse (the default) keeps freed tensor memory for the next step"))
      ->capture_default_str();
  add_trainer_flags(app, config);
  app.footer("Multi-word flags also take underscores for their dashes: --batch_size is --batch-size.");
  std::function<int()> extra_action;
  if (extra_flags) extra_action = extra_flags(app);
  if (const std::optional<int> rc = parse(app, argc, argv)) return *rc;
  try {
    if (extra_action) {
      const int rc = extra_action();
      if (rc >= 0) return rc;
    }
    DistEnv env = resolve_env(current_environment());
    log::configure(env.rank, env.world_size, env.host, config.logging.log_all_ranks);
    apply_rendezvous_flags(config, env);
    if (heap == "reuse") {
      const auto settings = host_memory::keep_freed_memory();
      if (env.rank == 0) log::debug(settings.description);
    }
    // --save-model's folder, as --metrics' and --tensorboard's are, at the start (the file comes at
    // the end); a path that can't be is validate()'s error, in the Trainer.
    const std::size_t slash = config.logging.save_model.find_last_of('/');
    if (env.rank == 0 && slash != std::string::npos && slash > 0) {
      (void)files::make_dirs(config.logging.save_model.substr(0, slash));
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

int main(int argc, char** argv, const std::string& description, const std::vector<RecipeFlag>& recipe_flags,
         const RecipeTrainFn& train_fn, const ExtraFlags& extra_flags) {
  auto recipe = std::make_shared<RecipeOptions>();
  return main(
      argc, argv, description,
      [recipe, train_fn](const TrainConfig& config, const DistEnv& env) { return train_fn(config, *recipe, env); },
      [recipe, recipe_flags, extra_flags](CLI::App& app) -> std::function<int()> {
        add_recipe_flags(app, *recipe, recipe_flags);
        return extra_flags ? extra_flags(app) : std::function<int()>();
      });
}

}  // namespace train::cli
