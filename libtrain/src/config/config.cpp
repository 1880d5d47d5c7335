// TrainConfig's choices (the one mapping between flag text and enum), its checks, and
// TrainResult's exit status.
#include "train/config.h"

#include "train/base/text.h"
#include "train/base/files.h"
#include "train/preemption.h"
#include "log/profile.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>

namespace train {
namespace {

[[noreturn]] void bad(const std::string& flag, const std::string& expected, const std::string& found,
                      const std::string& hint) {
  throw ConfigError(flag + ": expected " + expected + ", found " + found + ".", hint);
}

void check_counts(const TrainConfig& c) {
  const RunConfig& r = c.run;
  if (r.epochs && *r.epochs < 1) bad("--epochs", "at least 1", std::to_string(*r.epochs), "e.g. --epochs 1");
  if (r.batch_size && *r.batch_size < 1) bad("--batch-size", "a positive per-rank batch size", std::to_string(*r.batch_size), "e.g. --batch-size 64");
  if (r.test_batch_size < 1) bad("--test-batch-size", "a positive batch size", std::to_string(r.test_batch_size), "e.g. --test-batch-size 1000");
  if (r.max_steps && *r.max_steps < 1) bad("--max-steps", "a positive count (leave it out for no limit)", std::to_string(*r.max_steps), "");
  if (r.threads && *r.threads < 1) bad("--threads", "a positive count (leave it out for cores / ranks)", std::to_string(*r.threads), "");
  if (r.accumulate_steps && *r.accumulate_steps < 1) {
    bad("--accumulate-steps", "a positive number of micro-batches per optimizer step", std::to_string(*r.accumulate_steps), "e.g. --accumulate-steps 4 (1: no accumulation)");
  }
  if (r.clip_grad_norm && !(*r.clip_grad_norm > 0 && std::isfinite(*r.clip_grad_norm))) {
    bad("--clip-grad-norm", "a positive, finite total gradient norm", text::format("%g", *r.clip_grad_norm), "e.g. --clip-grad-norm 1.0; leave it out for no clipping");
  }
  if (r.nonfinite_max_skips < 1) bad("--nonfinite-max-skips", "a positive number of steps", std::to_string(r.nonfinite_max_skips), "e.g. --nonfinite-max-skips 10");
  if (c.logging.log_interval < 1) bad("--log-interval", "a positive number of steps", std::to_string(c.logging.log_interval), "");
  const DistributedConfig& d = c.distributed;
  if (d.world_size && *d.world_size < 1) bad("--world-size", "a positive number of ranks", std::to_string(*d.world_size), "leave it out to take it from SLURM or torchrun");
  if (!(d.timeout_sec > 0)) bad("--dist-timeout", "a positive number of seconds", text::format("%g", d.timeout_sec), "the default is 300");
  if (d.stall_timeout_sec && !(*d.stall_timeout_sec > 0)) {
    bad("--stall-timeout", "a positive number of seconds (leave it out for the automatic one)", text::format("%g", *d.stall_timeout_sec), "");
  }
  if (!(d.bucket_cap_mb > 0)) bad("--bucket-cap-mb", "a positive size in MB", text::format("%g", d.bucket_cap_mb), "the default is 25");
  const CheckpointConfig& k = c.checkpoint;
  if (k.every && *k.every < 1) bad("--checkpoint-every", "a positive number of steps (leave it out for epoch ends only)", std::to_string(*k.every), "");
  if (k.keep < 1) bad("--keep-checkpoints", "at least 1", std::to_string(k.keep), "keep 2 or more so a corrupt newest file can fall back");
  if (!(k.time_margin_sec >= 0)) bad("--time-margin", "0 or more seconds", text::format("%g", k.time_margin_sec), "the default is 60");
}

// Settings that only a GPU honours, on a run that asked for the CPU.
void check_cpu_choices(const TrainConfig& c) {
  if (c.run.device != DeviceKind::cpu) return;
  if (c.gpu.channels_last) bad("--channels-last on", "a CUDA device", "--device cpu", "the CPU runs keep the contiguous layout");
  if (c.gpu.cuda_graph == Switch::on) bad("--cuda-graph on", "a CUDA device", "--device cpu", "CUDA graphs need a GPU; use --cuda-graph auto or off on the CPU");
  if (c.run.precision != Precision::fp32 && c.run.precision != Precision::automatic) {
    bad("--precision " + choice_name(c.run.precision), "a CUDA device", "--device cpu", "on the CPU libtrain trains in fp32");
  }
  if (c.distributed.backend == BackendKind::nccl) bad("--backend nccl", "a CUDA device", "--device cpu", "use --backend gloo on CPU");
}

// --shard-optimizer on GPUs moves its chunks with NCCL: a Gloo group is refused before the data
// loads (the Trainer checks the device --device auto picks, and the optimizer, once they exist).
void check_shard_optimizer(const TrainConfig& c) {
  if (!c.distributed.shard_optimizer) return;
  if (c.run.device == DeviceKind::cuda && c.distributed.backend == BackendKind::gloo) {
    bad("--shard-optimizer", "the NCCL backend on --device cuda", "--backend gloo",
        "leave --backend out (auto picks NCCL for GPUs), or leave --shard-optimizer out");
  }
}

// The folder a path is in: "a/b" gives "a", "b" gives ".", "/b" gives "/".
std::string parent_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const std::size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

/// One rule for every output path, checked before data or peers are touched: a folder flag
/// (--checkpoint-dir, --tensorboard, --profile) names a folder, a file flag (--metrics,
/// --save-model) a file that is no folder; what is missing of the folder (a file's folder) is
/// created when the run writes, so the nearest part that exists must be a folder this process
/// can write in.
void check_output_path(const std::string& flag, const std::string& path, bool folder) {
  if (path.empty()) return;
  const std::string what = flag + " " + path + ": expected ";
  const std::string kind = folder ? "a folder that can be created" : "a file whose folder can be created";
  const std::string hint = "give a path in a writable folder, e.g. " + flag + (folder ? " out/run" : " out/run.jsonl") +
                           " (what is missing of it is created).";
  if (folder && files::exists(path) && !files::is_directory(path)) {
    throw ConfigError(what + "a folder (created if missing), found a file.", "give a folder, or move the file away.");
  }
  if (!folder && files::is_directory(path)) {
    throw ConfigError(what + "a file (its folder is created if missing), found a folder.",
                      "name a file in it, e.g. " + flag + " " + path + (path.back() == '/' ? "" : "/") + "run.jsonl.");
  }
  std::string existing = folder ? path : parent_of(path);
  while (!files::exists(existing) && existing != "." && existing != "/") existing = parent_of(existing);
  if (!files::is_directory(existing)) throw ConfigError(what + kind + ", found '" + existing + "', a file, in its path.", hint);
  if (::access(existing.c_str(), W_OK | X_OK) != 0) {
    throw ConfigError(what + kind + ", found '" + existing + "', which this process can't write in (" +
                          std::strerror(errno) + ").",
                      hint);
  }
}

void check_output_paths(const TrainConfig& c) {
  check_output_path("--checkpoint-dir", c.checkpoint.dir, /*folder=*/true);
  check_output_path("--tensorboard", c.logging.tensorboard, true);
  check_output_path("--profile", c.logging.profile, true);
  check_output_path("--metrics", c.logging.metrics, /*folder=*/false);
  check_output_path("--save-model", c.logging.save_model, false);
}

}  // namespace

template <>
const std::vector<std::pair<DeviceKind, std::string>>& choices<DeviceKind>() {
  static const std::vector<std::pair<DeviceKind, std::string>> all = {
      {DeviceKind::automatic, "auto"}, {DeviceKind::cpu, "cpu"}, {DeviceKind::cuda, "cuda"}};
  return all;
}

template <>
const std::vector<std::pair<BackendKind, std::string>>& choices<BackendKind>() {
  static const std::vector<std::pair<BackendKind, std::string>> all = {
      {BackendKind::automatic, "auto"}, {BackendKind::gloo, "gloo"}, {BackendKind::nccl, "nccl"}};
  return all;
}

template <>
const std::vector<std::pair<Switch, std::string>>& choices<Switch>() {
  static const std::vector<std::pair<Switch, std::string>> all = {
      {Switch::automatic, "auto"}, {Switch::on, "on"}, {Switch::off, "off"}};
  return all;
}

template <>
const std::vector<std::pair<GraphAllreduce, std::string>>& choices<GraphAllreduce>() {
  static const std::vector<std::pair<GraphAllreduce, std::string>> all = {
      {GraphAllreduce::in_graph, "in-graph"}, {GraphAllreduce::between, "between"}};
  return all;
}

template <>
const std::vector<std::pair<Precision, std::string>>& choices<Precision>() {
  static const std::vector<std::pair<Precision, std::string>> all = {
      {Precision::automatic, "auto"}, {Precision::fp32, "fp32"}, {Precision::tf32, "tf32"}, {Precision::bf16, "bf16"}};
  return all;
}

template <>
const std::vector<std::pair<NonFinite, std::string>>& choices<NonFinite>() {
  static const std::vector<std::pair<NonFinite, std::string>> all = {{NonFinite::stop, "stop"}, {NonFinite::skip, "skip"}};
  return all;
}

template <>
const std::vector<std::pair<BadSamples, std::string>>& choices<BadSamples>() {
  static const std::vector<std::pair<BadSamples, std::string>> all = {{BadSamples::fail, "fail"},
                                                                      {BadSamples::skip, "skip"}};
  return all;
}

int TrainResult::exit_code() const {
  if (nonfinite) return kExitNonFinite;
  if (cancelled) return 128 + (stop_signal > 0 ? stop_signal : 15);
  return preempted ? kExitPreempted : 0;
}

// --eval-only needs a checkpoint to load and writes nothing.
void check_eval_only(const TrainConfig& c) {
  if (!c.run.eval_only) return;
  const CheckpointConfig& k = c.checkpoint;
  if (k.resume == ResumeMode::never) {
    bad("--eval-only", "a checkpoint to evaluate", "--resume never", "pass --resume PATH or --resume auto with --checkpoint-dir DIR");
  }
  if (k.resume == ResumeMode::automatic && k.dir.empty()) {
    bad("--eval-only", "a checkpoint to evaluate (--resume PATH, or --checkpoint-dir DIR holding one)", "neither",
        "e.g. --eval-only --checkpoint-dir ckpt (its newest valid checkpoint) or --eval-only --resume ckpt/FILE");
  }
  if (!c.logging.save_model.empty()) {
    bad("--save-model", "no file to write in an --eval-only run (it writes nothing)", "'" + c.logging.save_model + "'",
        "leave --save-model out, or --eval-only out to train");
  }
}

void validate(const TrainConfig& c) {
  check_counts(c);
  check_eval_only(c);
  check_cpu_choices(c);
  check_shard_optimizer(c);
  check_output_paths(c);
  const CheckpointConfig& k = c.checkpoint;
  if (k.resume == ResumeMode::path && !files::is_regular_file(k.resume_path)) {
    bad("--resume", "auto, never or the path of a checkpoint file", "'" + k.resume_path + "', which is not a file",
        "list the checkpoints with ls CHECKPOINT_DIR");
  }
  if (!c.logging.profile.empty()) detail::parse_profile_steps(c.logging.profile_steps);  // throws naming the flag
  parse_signal_list(k.preempt_signals);  // throws naming the unknown signal
}

}  // namespace train
