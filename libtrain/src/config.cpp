// TrainConfig's checks and TrainResult's exit status.
#include "train/config.h"

#include "train/augment.h"
#include "train/text.h"
#include "train/error.h"
#include "train/files.h"
#include "train/preemption.h"
#include "profile.h"

#include <cstdio>
#include <string>

namespace train {
namespace {

std::string fmt(const char* f, double v) { return text::format(f, v); }

}  // namespace

int TrainResult::exit_code() const {
  if (nonfinite) return kExitNonFinite;
  if (cancelled) return 128 + (stop_signal > 0 ? stop_signal : 15);
  return preempted ? kExitPreempted : 0;
}

void validate(const TrainConfig& c) {
  auto bad = [](const std::string& flag, const std::string& expected, const std::string& found,
                const std::string& hint) {
    throw ConfigError(flag + ": expected " + expected + ", found " + found + ".", hint);
  };
  if (c.epochs < 1) bad("--epochs", "at least 1", std::to_string(c.epochs), "e.g. --epochs 1");
  if (c.batch_size < 0) bad("--batch-size", "a positive per-rank batch size", std::to_string(c.batch_size), "e.g. --batch-size 64");
  if (c.world_size < 0) bad("--world-size", "a positive number of ranks", std::to_string(c.world_size), "leave it out to take it from SLURM or torchrun");
  if (c.momentum < 0 || c.momentum >= 1) bad("--momentum", "a value in [0, 1)", fmt("%g", c.momentum), "the CIFAR-10 recipe uses 0.9");
  if (c.weight_decay != -1 && c.weight_decay < 0) bad("--weight-decay", "0 or more", fmt("%g", c.weight_decay), "the CIFAR-10 recipe uses 1e-4");
  if (c.test_batch_size < 1) bad("--test-batch-size", "a positive batch size", std::to_string(c.test_batch_size), "e.g. --test-batch-size 1000");
  if (c.max_steps < 0) bad("--max-steps", "0 (no limit) or a positive count", std::to_string(c.max_steps), "");
  if (c.limit_train_samples < 0) bad("--limit-train-samples", "0 (all) or a positive count", std::to_string(c.limit_train_samples), "");
  if (c.limit_test_samples < 0) bad("--limit-test-samples", "0 (all) or a positive count", std::to_string(c.limit_test_samples), "");
  if (c.threads < 0) bad("--threads", "0 (auto) or a positive count", std::to_string(c.threads), "");
  if (c.log_interval < 1) bad("--log-interval", "a positive number of steps", std::to_string(c.log_interval), "");
  if (c.dist_timeout_sec <= 0) bad("--dist-timeout", "a positive number of seconds", fmt("%g", c.dist_timeout_sec), "the default is 300");
  if (c.shm_allreduce != "auto" && c.shm_allreduce != "off") bad("--shm-allreduce", "auto or off", "'" + c.shm_allreduce + "'", "auto sums CPU gradients of ranks on one machine in shared memory; off always uses Gloo");
  if (c.bucket_cap_mb <= 0) bad("--bucket-cap-mb", "a positive size in MB", fmt("%g", c.bucket_cap_mb), "the default is 25");
  if (c.device != "auto" && c.device != "cpu" && c.device != "cuda") bad("--device", "auto, cpu or cuda", "'" + c.device + "'", "");
  if (c.backend != "auto" && c.backend != "gloo" && c.backend != "nccl") bad("--backend", "auto, gloo or nccl", "'" + c.backend + "'", "");
  if (c.checkpoint_every < 0) bad("--checkpoint-every", "0 (epoch ends only) or a positive number of steps", std::to_string(c.checkpoint_every), "");
  if (c.keep_checkpoints < 1) bad("--keep-checkpoints", "at least 1", std::to_string(c.keep_checkpoints), "keep 2 or more so a corrupt newest file can fall back");
  if (c.nonfinite != "stop" && c.nonfinite != "skip") bad("--nonfinite", "stop or skip", "'" + c.nonfinite + "'", "stop ends the run at the first NaN/inf loss or gradient; skip drops such steps' updates");
  if (c.nonfinite_max_skips < 1) bad("--nonfinite-max-skips", "a positive number of steps", std::to_string(c.nonfinite_max_skips), "e.g. --nonfinite-max-skips 10");
  if (c.time_margin_sec < 0) bad("--time-margin", "0 or more seconds", fmt("%g", c.time_margin_sec), "the default is 60");
  if (c.resume != "auto" && c.resume != "never" && !files::is_regular_file(c.resume)) {
    bad("--resume", "auto, never or the path of a checkpoint file", "'" + c.resume + "', which is not a file", "list the checkpoints with ls CHECKPOINT_DIR");
  }
  if (c.tf32 != "auto" && c.tf32 != "on" && c.tf32 != "off") bad("--tf32", "auto, on or off", "'" + c.tf32 + "'", "");
  if (c.optimizer != "auto" && c.optimizer != "adadelta" && c.optimizer != "sgd" && c.optimizer != "adam" && c.optimizer != "adamw") {
    bad("--optimizer", "auto, adadelta, sgd, adam or adamw", "'" + c.optimizer + "'", "");
  }
  if (c.lr_schedule != "auto" && c.lr_schedule != "step" && c.lr_schedule != "constant" && c.lr_schedule != "warmup-cosine" && c.lr_schedule != "linear" && c.lr_schedule != "one-cycle") {
    bad("--lr-schedule", "auto, step, constant, warmup-cosine, linear or one-cycle", "'" + c.lr_schedule + "'", "step is the recipes' StepLR per epoch");
  }
  if (c.warmup_steps < -1) bad("--warmup-steps", "0 or more steps", std::to_string(c.warmup_steps), "e.g. --warmup-steps 500");
  if (c.nesterov && c.momentum <= 0) bad("--nesterov", "a positive --momentum", fmt("%g", c.momentum), "e.g. --momentum 0.9 --nesterov");
  if (c.lr != -1 && !(c.lr > 0)) bad("--lr", "a positive learning rate", fmt("%g", c.lr), "the recipe's default is 1.0 (Adadelta) or 0.1 (SGD)");
  if (c.gamma != -1 && !(c.gamma > 0 && c.gamma <= 1)) bad("--gamma", "a factor in (0, 1]", fmt("%g", c.gamma), "the MNIST recipe uses 0.7");
  if (c.cuda_graph != "auto" && c.cuda_graph != "on" && c.cuda_graph != "off") bad("--cuda-graph", "auto, on or off", "'" + c.cuda_graph + "'", "");
  if (c.graph_allreduce != "in-graph" && c.graph_allreduce != "between") bad("--graph-allreduce", "in-graph or between", "'" + c.graph_allreduce + "'", "in-graph is the default; between is the fallback");
  if (c.peer_allreduce != "auto" && c.peer_allreduce != "on" && c.peer_allreduce != "off") bad("--peer-allreduce", "auto, on or off", "'" + c.peer_allreduce + "'", "auto is the default; off averages every bucket with NCCL");
  if (c.channels_last != "on" && c.channels_last != "off") bad("--channels-last", "on or off", "'" + c.channels_last + "'", "off is the default");
  if (c.device == "cpu" && c.channels_last == "on") bad("--channels-last on", "a CUDA device", "--device cpu", "the CPU runs keep the contiguous layout");
  if (c.precision != "auto" && c.precision != "fp32" && c.precision != "tf32" && c.precision != "bf16") bad("--precision", "auto, fp32, tf32 or bf16", "'" + c.precision + "'", "auto is the default");
  if (c.device == "cpu" && c.cuda_graph == "on") bad("--cuda-graph on", "a CUDA device", "--device cpu", "CUDA graphs need a GPU; use --cuda-graph auto or off on the CPU");
  if (c.device == "cpu" && c.precision != "fp32" && c.precision != "auto") bad("--precision " + c.precision, "a CUDA device", "--device cpu", "on the CPU libtrain trains in fp32");
  if (!c.profile.empty()) detail::parse_profile_steps(c.profile_steps);  // throws naming the flag
  parse_signal_list(c.preempt_signals);  // throws naming the unknown signal
  parse_augment(c.augment);               // throws naming the unknown word
  if (c.device == "cpu" && c.backend == "nccl") bad("--backend nccl", "a CUDA device", "--device cpu", "use --backend gloo on CPU");
}

}  // namespace train
