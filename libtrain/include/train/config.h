// TrainConfig: what the Trainer itself honours, in typed sections (run, distributed, gpu,
// checkpoint, logging, health), the flag text of each enumerated choice, the checks, and TrainResult:
// what a finished run reports in its done line. A program's own recipe (model, optimizer, data)
// lives in the program: train/cli.h's RecipeOptions, train/builtin.h's BuiltinRecipe.
#pragma once

#include "train/base/error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace train {

/// --device: where a rank trains.
enum class DeviceKind { automatic, cpu, cuda };
/// --backend: the process group's transport (automatic: NCCL on GPUs, Gloo on the CPU).
enum class BackendKind { automatic, gloo, nccl };
/// A setting that libtrain may decide (automatic) or the user forces on or off.
enum class Switch { automatic, on, off };
/// --graph-allreduce: where a CUDA graph step averages gradients with several ranks.
enum class GraphAllreduce { in_graph, between };
/// --precision: what CUDA steps compute in (automatic: see RunConfig::precision).
enum class Precision { automatic, fp32, tf32, bf16 };
/// --resume: the newest valid checkpoint (automatic), none, or CheckpointConfig::resume_path.
enum class ResumeMode { automatic, never, path };
/// --nonfinite: what a non-finite loss or gradient does: stop (no checkpoint of the bad weights,
/// exit kExitNonFinite) or skip (drop that step's update).
enum class NonFinite { stop, skip };
/// --bad-samples: what a sample that a SampleDataset can't read does (the loader's data only).
enum class BadSamples { fail, skip };

/// The flag text of each value of an enumerated choice, in the order --help lists them. The one
/// mapping between text and enum: the command line, logs, checkpoints and errors all use it.
/// Specialised for each enum above (config.cpp) and for programs' own (train/builtin.h).
template <class E>
const std::vector<std::pair<E, std::string>>& choices();
template <>
const std::vector<std::pair<DeviceKind, std::string>>& choices<DeviceKind>();
template <>
const std::vector<std::pair<BackendKind, std::string>>& choices<BackendKind>();
template <>
const std::vector<std::pair<Switch, std::string>>& choices<Switch>();
template <>
const std::vector<std::pair<GraphAllreduce, std::string>>& choices<GraphAllreduce>();
template <>
const std::vector<std::pair<Precision, std::string>>& choices<Precision>();
template <>
const std::vector<std::pair<NonFinite, std::string>>& choices<NonFinite>();
template <>
const std::vector<std::pair<BadSamples, std::string>>& choices<BadSamples>();

/// The flag text of `value` ("auto", "in-graph", ...).
template <class E>
std::string choice_name(E value) {
  for (const auto& [v, name] : choices<E>()) {
    if (v == value) return name;
  }
  return "?";
}

/// The choices as a sentence: "auto, cpu or cuda".
template <class E>
std::string choice_list() {
  const auto& all = choices<E>();
  std::string list;
  for (size_t i = 0; i < all.size(); ++i) list += (i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + all[i].second;
  return list;
}

/// `text` as an E. Throws train::ConfigError naming `flag`, the choices and `text`.
template <class E>
E parse_choice(const std::string& flag, const std::string& text, const std::string& hint = "") {
  for (const auto& [v, name] : choices<E>()) {
    if (name == text) return v;
  }
  throw ConfigError(flag + ": expected " + choice_list<E>() + ", found '" + text + "'.", hint);
}

/// What a run is and where it runs (docs/reference.md, "Run").
struct RunConfig {
  std::optional<int> epochs;             ///< --epochs; unset = TrainSpec::epochs (the `train` recipes: mnist 14, cifar10 4)
  std::optional<int64_t> batch_size;     ///< --batch-size, per rank; unset = TrainSpec::batch_size
  int64_t test_batch_size = 1000;        ///< --test-batch-size
  std::optional<int64_t> max_steps;      ///< --max-steps: stop after this many optimizer steps in total; unset = no limit
  uint64_t seed = 1;                     ///< --seed: model init, dropout, sampler
  bool dry_run = false;                  ///< --dry-run: one step per epoch, one test batch
  /// --eval-only: load the checkpoint (--resume PATH, or the newest in --checkpoint-dir), evaluate
  /// it, print the test line and the done line, and write nothing.
  bool eval_only = false;
  std::string early_stop_metric;             ///< --early-stop-metric: "" = TrainSpec::early_stopping's
  std::optional<int> early_stop_patience;    ///< --early-stop-patience (epochs)
  std::optional<double> early_stop_min_delta;  ///< --early-stop-min-delta
  std::optional<double> ema_decay;           ///< --ema-decay: unset = TrainSpec::ema_decay
  DeviceKind device = DeviceKind::automatic;  ///< --device: automatic = the GPUs SLURM gave the job, else the CPU
  std::optional<int> threads;            ///< --threads: intra-op CPU threads; unset = cores / local ranks
  /// --precision: automatic = bf16 on a CUDA GPU that has it where the spec asks for it
  /// (TrainSpec::auto_bf16_batch, set by the built-in MNIST recipe to builtin::kAutoBf16Batch), fp32
  /// otherwise and on the CPU; tf32 = TF32 matmuls and convolutions; bf16 = autocast, fp32 weights.
  Precision precision = Precision::automatic;
  NonFinite nonfinite = NonFinite::stop;  ///< --nonfinite
  int64_t nonfinite_max_skips = 10;       ///< --nonfinite-max-skips: skip stops with the non-finite error after this many in a row
  /// --accumulate-steps: micro-batches of batch_size per optimizer step (each rank's step takes
  /// accumulate_steps x batch_size samples; the gradients are averaged once, after the last);
  /// unset = TrainSpec::accumulate_steps.
  std::optional<int64_t> accumulate_steps;
  /// --clip-grad-norm: scale the averaged gradients so that their total 2-norm is at most this
  /// (torch.nn.utils.clip_grad_norm_); unset = TrainSpec::clip_grad_norm.
  std::optional<double> clip_grad_norm;
};

/// How ranks find each other and average gradients.
struct DistributedConfig {
  BackendKind backend = BackendKind::automatic;  ///< --backend
  std::string init_method;               ///< --init-method: "" or tcp://HOST:PORT (torch.distributed's init_method)
  std::optional<int> world_size;         ///< --world-size: unset = from the environment; else checked against it
  double timeout_sec = 300;              ///< --dist-timeout: a missing or stalled peer is an error after this
  double bucket_cap_mb = 25;             ///< --bucket-cap-mb: gradient bucket size
  bool ddp_single_rank = false;          ///< --ddp-single-rank: a process group and DDP even with one rank (measures DDP's own cost)
  bool shm_allreduce = true;             ///< --shm-allreduce auto (true): CPU ranks of one machine sum in shared memory; off (false): Gloo
  /// --stall-timeout: no step's progress for this long (seconds) ends the run with a roll-call
  /// naming where each rank is. Unset (--stall-timeout 0): 10x the median step, at least 60 s,
  /// at most 80% of timeout_sec. Must be below timeout_sec.
  std::optional<double> stall_timeout_sec;
  /// --shard-optimizer: ZeRO-1. The gradients are reduce-scattered, each rank updates its shard of
  /// the parameters with its shard of the optimizer state (about 1/world of it), and the parameters
  /// are all-gathered. CPU runs (Gloo, or shared memory on one machine) with train::optim::FusedSGD,
  /// FusedAdam, FusedAdamW or Adadelta; checkpoints hold the whole state. false = TrainSpec::shard_optimizer.
  bool shard_optimizer = false;
  /// --interface (or TRAIN_INTERFACE): the network interface, e.g. ib0, for Gloo, NCCL
  /// (NCCL_SOCKET_IFNAME) and the rendezvous store; "" = TRAIN_INTERFACE, else each library's own.
  std::string interface;
};

/// A check of the nodes before training (docs/reference.md, --health-check).
struct HealthConfig {
  bool check = false;                ///< --health-check: GEMM and all-reduce measured before training
  double min_fraction = 0.5;         ///< --health-min-fraction: a node below this fraction of the others' median GEMM is bad
  bool warn_only = false;            ///< --health-warn-only: name bad nodes but train anyway
  bool exclude_bad_nodes = false;    ///< --exclude-bad-nodes: under SLURM, requeue the job without the bad nodes
};

/// CUDA-only settings: errors on the CPU unless left at their defaults.
struct GpuConfig {
  Switch cuda_graph = Switch::automatic;  ///< --cuda-graph: the training step in a CUDA graph (automatic: on for CUDA)
  GraphAllreduce graph_allreduce = GraphAllreduce::in_graph;  ///< --graph-allreduce (several ranks)
  /// --peer-allreduce: with in-graph, GPUs of one machine average the gradient buckets through
  /// each other's memory (one kernel each) instead of NCCL: automatic (two ranks on one machine),
  /// on (2 to 8 ranks on one machine), off (NCCL only).
  Switch peer_allreduce = Switch::automatic;
  bool channels_last = false;            ///< --channels-last on: 4-d weights (and so activations) in NHWC order
  Switch tf32 = Switch::automatic;       ///< --tf32: automatic = PyTorch's defaults (cuDNN yes, matmul no)
  bool deterministic = false;            ///< --deterministic: deterministic cuDNN algorithms
  bool cudnn_benchmark = false;          ///< --cudnn-benchmark: cuDNN times its algorithms for each new shape
};

/// Checkpoints, resume and preemption (docs/checkpoints.md).
struct CheckpointConfig {
  std::string dir;                       ///< --checkpoint-dir: "" = no checkpoints
  std::optional<int64_t> every;          ///< --checkpoint-every: also every N steps; unset = only at epoch ends
  int keep = 3;                          ///< --keep-checkpoints
  ResumeMode resume = ResumeMode::automatic;  ///< --resume auto | never | PATH
  std::string resume_path;               ///< the checkpoint file of ResumeMode::path
  std::string preempt_signals = "USR2";  ///< --preempt-signal: signals that mean "checkpoint, requeue and resume"
  double time_margin_sec = 60;           ///< --time-margin: checkpoint this long before the SLURM job's end time
  bool requeue = true;                   ///< --no-requeue clears it: under SLURM, `scontrol requeue` after a preemption checkpoint
  /// --snapshot-every: under SLURM with --checkpoint-dir and --resume auto, each node keeps the
  /// newest state in its memory every N steps (0: off); unset = auto, as often as costs at most
  /// 0.5% of the training time.
  std::optional<int64_t> snapshot_every;
};

/// What a run writes besides checkpoints: logs, metrics, traces, the final model.
struct LoggingConfig {
  int64_t log_interval = 10;             ///< --log-interval: steps between progress lines
  bool log_all_ranks = false;            ///< --log-all-ranks: info lines from every rank, not only rank 0
  std::string metrics;                   ///< --metrics: JSON-lines metrics file (rank 0); "" = none
  std::string tensorboard;               ///< --tensorboard: folder for TensorBoard event files (rank 0); "" = none
  std::string profile;                   ///< --profile: folder for each rank's torch-profiler trace; "" = none
  std::string profile_steps = "20:30";   ///< --profile-steps FROM:TO, optimizer steps counted from 1 over the run
  std::string save_model;                ///< --save-model: write the final parameters here (rank 0); "" = none
};

/// Everything the Trainer honours; the flags of train/cli.h's add_trainer_flags map one to one
/// onto it (docs/reference.md). What the model, data and optimizer are is the TrainSpec's.
/// The loader of data read sample by sample (TrainSpec::train_samples): its threads, how far it
/// reads ahead, what a bad sample does. Data held in memory (TrainSpec::train_data) has no loader.
struct DataConfig {
  /// --data-workers (also --num-workers, DataLoader's name): threads per rank that read and
  /// collate samples; unset = half the rank's intra-op threads, at least 1 and at most 8.
  std::optional<int> workers;
  /// --prefetch: batches read ahead of the one training, per rank (memory: prefetch + 1 batches);
  /// unset = the worker count, at least 2 (each thread fills whole batches: fewer ahead leave threads idle)
  std::optional<int> prefetch;
  BadSamples bad_samples = BadSamples::fail;  ///< --bad-samples: fail (the error names the sample) or skip (counted)
};

struct TrainConfig {
  RunConfig run;
  DistributedConfig distributed;
  GpuConfig gpu;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  HealthConfig health;
  DataConfig data;
};

/// Exit status of a run stopped by a non-finite loss or gradient (EX_DATAERR); no checkpoint of
/// the non-finite weights was written.
inline constexpr int kExitNonFinite = 65;

/// What a finished run reports (the `done` line).
struct TrainResult {
  int epochs = 0;
  int64_t steps = 0;
  double train_loss = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  double images_per_sec = 0;          ///< over every epoch, warm-up included
  double images_per_sec_steady = 0;   ///< over the epochs after the first (the first when there is one)
  double peak_gpu_mb = 0;             ///< peak CUDA memory allocated by this rank (0 on the CPU)
  /// This rank's resident memory at its peak (VmHWM), and the largest anonymous and file-backed
  /// (memory-mapped data, the libraries: the kernel can take them back) parts seen at the epochs'
  /// ends and at the end, in MB; 0 where /proc/self/status can't be read.
  double peak_rss_mb = 0, rss_anon_mb = 0, rss_file_mb = 0;
  double train_seconds = 0;           ///< this process's time in training steps
  double eval_seconds = 0;            ///< this process's time evaluating
  double checkpoint_seconds = 0;      ///< time training waited for checkpoints (rank 0: the state's copy; the file is written in the background)
  int64_t snapshots = 0;              ///< snapshots in memory taken (0: none; the done line then has no snapshot fields)
  double snapshot_seconds = 0;        ///< training time they took on this rank (the agreement and, on a node's writer, the state's copy)
  double snapshot_write_seconds = 0;  ///< their background writes' time (checksum and file), on a node's writer
  int world_size = 1;
  std::string precision;              ///< what the steps computed in: fp32, tf32 or bf16 (--precision auto resolved)
  std::string params_sha256;
  bool preempted = false;        ///< stopped early by a preemption signal or the time limit
  bool cancelled = false;        ///< stopped for good by SIGTERM/SIGINT (scancel, Ctrl-C)
  int stop_signal = 0;           ///< the signal behind a cancel
  std::string preempt_reason;    ///< e.g. "signal SIGUSR2", "the job's time limit"
  std::string checkpoint_path;   ///< last checkpoint written ("" if none)
  bool requeued = false;         ///< `scontrol requeue` was run for this job
  // A run a non-finite value ended (--nonfinite).
  bool nonfinite = false;        ///< stopped by a non-finite loss or gradient (exit kExitNonFinite)
  std::string nonfinite_reason;  ///< where: the step, epoch, rank(s), the loss or which parameter's gradient
  int64_t skipped_steps = 0;     ///< --nonfinite skip: steps whose update was dropped
  /// A loader's run (TrainSpec::train_samples): samples --bad-samples skip replaced, summed over the
  /// ranks, over the whole run (a resumed run's count includes those before it stopped); -1 without a loader.
  int64_t skipped_samples = -1;
  /// A loader's run: seconds the training loop waited for batches (the data was the bottleneck
  /// for that long); -1 without a loader.
  double data_wait_seconds = -1;
  // Training controls.
  bool stopped_early = false;    ///< early stopping ended the run (an exit status of 0)
  bool early_stopping = false;   ///< early stopping was on (the done line then has "stopped_early")
  bool eval_only = false;        ///< --eval-only: evaluated a checkpoint, trained no step
  bool ema = false;              ///< the test loss and accuracy are the weights' moving average's

  /// 0 when done, kExitPreempted (75) after a preemption, 128 + signal after a cancel,
  /// kExitNonFinite (65) after a non-finite loss or gradient.
  int exit_code() const;
};

/// Checks the configuration without touching data or peers: the numbers, the choices, and the
/// output paths under one rule (--checkpoint-dir, --tensorboard and --profile name a folder,
/// --metrics and --save-model a file; what is missing of their folders is created when written,
/// so the nearest part that exists must be a folder this process can write in). Throws
/// train::ConfigError (exit 2 in cli::main) naming the flag, what was expected and what was found.
void validate(const TrainConfig& config);

}  // namespace train
