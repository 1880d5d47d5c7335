// TrainConfig: everything that shapes a run (the `train` flags map one to one onto it), its
// checks, and TrainResult: what a finished run reports in its done line.
#pragma once

#include <cstdint>
#include <string>

namespace train {

/// Everything that shapes a run; the `train` flags map one to one onto it (docs/reference.md).
struct TrainConfig {
  std::string model = "mnist";
  std::string dataset;          ///< "" = the model's usual dataset (mnist -> fashion-mnist)
  std::string data_dir;         ///< "" = Debian's fashion-mnist folder when that is the dataset; else a
                                ///< flat folder of the files or torchvision's root (see catalog::locate)
  /// The `train` command line puts the recipe's here when --epochs is not given (mnist 14,
  /// cifar10 4: train/catalog.h); a program that builds its TrainConfig itself gets 14.
  int epochs = 14;
  int64_t batch_size = 0;       ///< per rank; 0 = the recipe's (mnist 64, cifar10 256)
  int64_t test_batch_size = 1000;
  double lr = -1;               ///< < 0 = the recipe's (Adadelta 1.0, SGD 0.1)
  double gamma = -1;            ///< StepLR factor per epoch; < 0 = the recipe's (0.7, SGD 1.0)
  std::string optimizer = "auto";  ///< auto | adadelta | sgd
  double momentum = 0.9;        ///< SGD only
  double weight_decay = -1;     ///< < 0 = the recipe's (Adadelta 0, SGD 1e-4)
  uint64_t seed = 1;
  int64_t max_steps = 0;        ///< stop after this many optimizer steps in total (0 = no limit)
  int64_t limit_train_samples = 0;
  int64_t limit_test_samples = 0;
  std::string device = "auto";  ///< auto | cpu | cuda
  int threads = 0;              ///< intra-op CPU threads; 0 = cores / local ranks
  int64_t log_interval = 10;
  bool log_all_ranks = false;   ///< info lines from every rank, not only rank 0
  std::string save_model;       ///< write the final parameters here (rank 0)
  std::string metrics;          ///< JSON-lines metrics file (rank 0)
  std::string tensorboard;      ///< "" = none; else a folder for TensorBoard event files (rank 0)
  std::string profile;          ///< "" = none; else a folder: each rank's torch-profiler trace of profile_steps
  std::string profile_steps = "20:30";  ///< FROM:TO, optimizer steps counted from 1 over the run (--profile)
  bool dry_run = false;         ///< one step per epoch, one test batch
  bool no_dropout = false;
  std::string augment;          ///< "" | crop | flip | crop,flip: built-in image datasets' training data
  std::string backend = "auto"; ///< auto | gloo | nccl
  double dist_timeout_sec = 300;
  double bucket_cap_mb = 25;
  bool ddp_single_rank = false;  ///< a process group and DDP even with one rank (to measure DDP's own cost)
  std::string shm_allreduce = "auto";  ///< auto (ranks on one machine sum CPU gradients in shared memory) | off
  std::string tf32 = "auto";    ///< auto (PyTorch's defaults: cuDNN yes, matmul no) | on | off
  bool deterministic = false;   ///< deterministic cuDNN algorithms (CUDA runs)
  bool cudnn_benchmark = false;     ///< let cuDNN time its algorithms for each new shape (costs seconds at start)
  std::string cuda_graph = "auto";  ///< auto (on for CUDA) | on | off: the training step in a CUDA graph
  std::string graph_allreduce = "in-graph";  ///< in-graph | between: where a CUDA graph step averages gradients (several ranks)
  /// With in-graph, GPUs of one machine average the gradient buckets through each other's memory
  /// (one kernel each) instead of NCCL: auto (two ranks on one machine) | on (2 to 8 ranks on one
  /// machine) | off (NCCL only)
  std::string peer_allreduce = "auto";
  std::string channels_last = "off";  ///< on | off: CUDA runs keep 4-d weights (and so activations) in NHWC order
  /// auto (bf16 on a CUDA GPU that has it where the spec asks for it: TrainSpec::auto_bf16_batch,
  /// set by the built-in MNIST recipe to kAutoBf16Batch; fp32 otherwise and on the CPU) | fp32 | tf32 (TF32 matmuls and convolutions) | bf16 (autocast,
  /// fp32 weights)
  std::string precision = "auto";
  std::string init_method;      ///< "" or tcp://HOST:PORT (torch.distributed's init_method)
  int world_size = 0;           ///< 0 = from the environment; else checked against it

  // Checkpoints and preemption (docs/checkpoints.md).
  std::string checkpoint_dir;   ///< "" = no checkpoints
  int64_t checkpoint_every = 0; ///< also checkpoint every N steps (0 = only at epoch ends)
  int keep_checkpoints = 3;
  std::string resume = "auto";  ///< auto | never | PATH of a checkpoint file
  std::string preempt_signals = "USR2";  ///< signals that mean "checkpoint, requeue and resume"
  double time_margin_sec = 60;  ///< checkpoint this long before the SLURM job's end time
  bool requeue = true;          ///< under SLURM, `scontrol requeue` the job after a preemption checkpoint

  // issue 22: the built-in recipes' LR schedule and SGD's nesterov.
  /// auto (the recipe's: step, or warmup-cosine for resnet18) | step (StepLR by --gamma each
  /// epoch) | constant | warmup-cosine | linear | one-cycle (per step)
  std::string lr_schedule = "auto";
  int64_t warmup_steps = -1;    ///< warmup-cosine and linear: steps of linear warm-up from 0; < 0 = the recipe's (resnet18: 5% of the run, else 0)
  bool nesterov = false;        ///< SGD only: Nesterov momentum

  // issue 24: the hung-rank roll-call. No step's progress for this long (seconds) ends the run
  // with a roll-call naming where each rank is; 0 = automatic (10x the median step, at least
  // 60 s, at most 80% of dist_timeout_sec). Must be below dist_timeout_sec.
  double stall_timeout_sec = 0;

  // issue 24: non-finite losses and gradients (docs/reference.md, --nonfinite).
  std::string nonfinite = "stop";   ///< stop (no checkpoint of the bad weights, exit kExitNonFinite) | skip (drop the update)
  int64_t nonfinite_max_skips = 10; ///< skip: stop with the non-finite error once this many steps in a row were skipped
};

/// Exit status of a run stopped by a non-finite loss or gradient (EX_DATAERR); no checkpoint of
/// the non-finite weights was written.
inline constexpr int kExitNonFinite = 65;

/// The built-in MNIST recipe's TrainSpec::auto_bf16_batch: --precision auto picks bf16 on CUDA
/// from this per-rank batch size up, where it was measured within 0.5 points of fp32's test
/// accuracy (docs/gpu.md), not at batch 64. (The CIFAR-10 recipe and users' specs stay fp32:
/// bf16 was not measured there.)
inline constexpr int64_t kAutoBf16Batch = 512;

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
  double train_seconds = 0;           ///< this process's time in training steps
  double eval_seconds = 0;            ///< this process's time evaluating
  double checkpoint_seconds = 0;      ///< time training waited for checkpoints (rank 0: the state's copy; the file is written in the background)
  int world_size = 1;
  std::string precision;              ///< what the steps computed in: fp32, tf32 or bf16 (--precision auto resolved)
  std::string params_sha256;
  bool preempted = false;        ///< stopped early by a preemption signal or the time limit
  bool cancelled = false;        ///< stopped for good by SIGTERM/SIGINT (scancel, Ctrl-C)
  int stop_signal = 0;           ///< the signal behind a cancel
  std::string preempt_reason;    ///< e.g. "signal SIGUSR2", "the job's time limit"
  std::string checkpoint_path;   ///< last checkpoint written ("" if none)
  bool requeued = false;         ///< `scontrol requeue` was run for this job
  // issue 24
  bool nonfinite = false;        ///< stopped by a non-finite loss or gradient (exit kExitNonFinite)
  std::string nonfinite_reason;  ///< where: the step, epoch, rank(s), the loss or which parameter's gradient
  int64_t skipped_steps = 0;     ///< --nonfinite skip: steps whose update was dropped

  /// 0 when done, kExitPreempted (75) after a preemption, 128 + signal after a cancel,
  /// kExitNonFinite (65) after a non-finite loss or gradient.
  int exit_code() const;
};

/// Checks the configuration without touching data or peers. Throws train::ConfigError naming
/// the flag, what was expected and what was found.
void validate(const TrainConfig& config);

}  // namespace train
