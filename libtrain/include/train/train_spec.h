// What to train: the TrainSpec (model, data, loss, optimizer, LR schedule, metrics, callbacks)
// and what its parts get (ScheduleContext, StepInfo, EpochInfo, EvalResult). The Trainer
// (trainer.h) trains one; its own parts (libtrain/src) read it without the Trainer.
#pragma once

#include "train/callback.h"
#include "train/config.h"
#include "train/data.h"
#include "train/loss.h"
#include "train/model_handle.h"
#include "train/sample_dataset.h"
#include "train/metrics.h"

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace train {

class ProcessGroup;
class Trainer;

/// Builds the optimizer over the model's parameters (already on the training device), each tensor
/// once: a weight registered in two modules (tied) comes once, as PyTorch's `parameters()` gives it.
using OptimizerBuilder =
    std::function<std::unique_ptr<torch::optim::Optimizer>(const std::vector<at::Tensor>& parameters)>;

/// What an LR schedule knows about the run (LrSchedule::rate gets it).
struct ScheduleContext {
  double base_lr = 0;           ///< the optimizer's first group's rate as built (e.g. --lr)
  int64_t total_steps = 0;      ///< the run's optimizer steps: epochs x steps per epoch, or --max-steps if fewer
  int64_t steps_per_epoch = 0;  ///< per rank (every rank takes the same number)
};

/// The learning rate over a run. The rate of the optimizer's first parameter group is the start.
/// Either a recurrence, `next`: called at the end of each epoch (every = epoch; index = the epoch
/// that ended, 1-based) or after each optimizer step (every = step; index = steps so far) with the
/// current rate, it returns the next; or a closed form, `rate` (it wins when both are set): the
/// rate for index = 0 (the start) and after each epoch or step as above, given the run's length,
/// so a schedule over the whole run needs no step count from you. The Trainer checkpoints the
/// current rate, so resume is exact. Under a CUDA graph a per-step schedule stays in the graph
/// when the optimizer reads its rate from the device (train/fused_optim.h, train::optim::Adadelta).
struct LrSchedule {
  enum class Every { epoch, step };
  Every every = Every::epoch;
  std::function<double(int64_t index, double lr)> next;
  std::string description = "constant";  ///< recorded in checkpoints and logs
  std::function<double(int64_t index, const ScheduleContext& run)> rate;
};

/// The same rate throughout.
LrSchedule constant_lr();
/// torch.optim.lr_scheduler.StepLR: multiply by gamma every step_size epochs.
LrSchedule step_lr(double gamma, int64_t step_size = 1);
/// Per step: linear warm-up from 0 over `warmup_steps`, then a half cosine down to
/// `final_ratio` x the base rate at the run's last step (transformers' get_cosine_schedule_with_
/// warmup when final_ratio is 0: rate(s) = base * s / warmup, then base * (final + (1 - final) *
/// 0.5 * (1 + cos(pi * progress)))).
LrSchedule warmup_cosine(int64_t warmup_steps, double final_ratio = 0);
/// Per step: linear warm-up from 0 over `warmup_steps`, then linear down to `final_ratio` x the base
/// rate at the run's last step (transformers' get_linear_schedule_with_warmup when final_ratio is 0).
LrSchedule linear_decay(int64_t warmup_steps = 0, double final_ratio = 0);
/// Per step: torch.optim.lr_scheduler.OneCycleLR's rate (cosine annealing, two phases, the base
/// rate as max_lr; the momentum is not cycled): from base / div_factor up to base over the first
/// pct_start of the run, then down to base / div_factor / final_div_factor.
LrSchedule one_cycle(double pct_start = 0.3, double div_factor = 25, double final_div_factor = 1e4);

/// An evaluation metric: its value is the sum of `batch_sum` over the evaluation set divided by
/// the number of samples (so it must be a per-sample sum, e.g. correct predictions).
struct Metric {
  std::string name;
  std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)> batch_sum;
};

/// Fraction of samples whose argmax over dim 1 equals the target.
Metric accuracy();

/// What an evaluation found, over all ranks (each sample counted once).
struct EvalResult {
  double loss = 0;                        ///< mean loss per sample
  int64_t count = 0;                      ///< samples evaluated
  std::map<std::string, double> metrics;  ///< name -> value (sum / count)
  /// metrics["accuracy"], or 0 when it wasn't computed.
  double accuracy() const;
};

/// Passed to Callback::on_step_end.
struct StepInfo {
  int epoch = 0;
  int64_t step = 0;           ///< optimizer steps so far
  int64_t batch = 0;          ///< index of the batch in the epoch (0-based); with accumulation, of the optimizer step
  int64_t batches = 0;        ///< batches in the epoch on this rank (optimizer steps)
  int64_t batch_size = 0;     ///< samples in this batch on this rank (with accumulation: all its micro-batches')
  at::Tensor loss;            ///< the step's mean loss, on the device (reading it syncs the device)
  double lr = 0;              ///< the learning rate the step ran with
  torch::optim::Optimizer* optimizer = nullptr;  ///< the run's optimizer (its state, its groups' rates)
};

/// Passed to Callback::on_epoch_end.
struct EpochInfo {
  int epoch = 0;
  int64_t step = 0;
  double train_loss = 0;      ///< mean step loss of the epoch over all ranks
  EvalResult eval;
  double seconds = 0;         ///< training time of the epoch
  double lr = 0;              ///< the learning rate of the epoch's last step (before an epoch schedule's next)
  torch::optim::Optimizer* optimizer = nullptr;  ///< the run's optimizer
};

/// Early stopping: the run ends at an epoch's end once `metric` has not improved by more than
/// `min_delta` for `patience` epochs in a row (rank 0 decides; every rank stops there).
struct EarlyStopping {
  /// "" (off), "test_loss" (lower is better) or "test_NAME" for a TrainSpec metric NAME, e.g.
  /// "test_accuracy" (higher is better). Needs TrainSpec::eval_data or eval_samples.
  std::string metric;
  int patience = 3;      ///< epochs without improvement before the run stops
  double min_delta = 0;  ///< an improvement must exceed this
};

/// What to train: the parts a user plugs in. The checkpoint manager is not pluggable.
struct TrainSpec {
  /// Builds the model; called once, after the random generators are seeded with --seed, so
  /// every rank builds the same weights (DDP also broadcasts rank 0's).
  std::function<ModelHandle()> model;
  std::string model_name = "model";  ///< for logs and the checkpoint's shape (resume refuses another)
  /// The training data held in memory (on the device; a CUDA graph captures its gather). Set this
  /// or train_samples.
  std::shared_ptr<Dataset> train_data;
  /// The training data read sample by sample by the loader's threads (train/sample_dataset.h:
  /// files read or memory-mapped per sample, collated into pinned host buffers, copied to the
  /// device on a side stream; --data-workers, --prefetch, --bad-samples). Set this or train_data.
  std::shared_ptr<SampleDataset> train_samples;
  std::shared_ptr<Dataset> eval_data;  ///< may be null: no evaluation
  /// Evaluation data read sample by sample (e.g. an image folder's val/), on --data-workers threads,
  /// a batch ahead. Set this or eval_data (or neither: no evaluation).
  std::shared_ptr<SampleDataset> eval_samples;
  std::string data_name = "data";      ///< for the checkpoint's shape (resume refuses another)
  LossFn loss = cross_entropy_loss();
  OptimizerBuilder optimizer;
  LrSchedule lr_schedule = constant_lr();
  std::vector<Metric> metrics = {accuracy()};
  std::vector<std::shared_ptr<Callback>> callbacks;
  /// Your own metrics sinks (rank 0): they get every record --metrics and --tensorboard get.
  std::vector<std::shared_ptr<MetricsSink>> metrics_sinks;
  /// Per-rank batch size (TrainConfig::run.batch_size, --batch-size, wins when it is set).
  int64_t batch_size = 64;
  /// Epochs to train (TrainConfig::run.epochs, --epochs, wins when it is set).
  int epochs = 14;
  /// Micro-batches of batch_size per optimizer step (TrainConfig::run.accumulate_steps,
  /// --accumulate-steps, wins when it is set): each micro-batch's loss is weighted by its share of
  /// the step's samples (1/N for full steps) and the gradients are averaged over the ranks once, after
  /// the last (DDP's no_sync before). Steps, the LR schedule, checkpoints and metrics count optimizer
  /// steps. 1: no accumulation.
  int64_t accumulate_steps = 1;
  /// Clip the gradients' total 2-norm to this after they are averaged, before the update
  /// (torch.nn.utils.clip_grad_norm_; TrainConfig::run.clip_grad_norm, --clip-grad-norm, wins when
  /// it is set). Unset: no clipping.
  std::optional<double> clip_grad_norm;
  /// ZeRO-1 (TrainConfig::distributed.shard_optimizer, --shard-optimizer, also turns it on): each
  /// rank keeps and updates the optimizer state of its shard of the parameters (about 1/world of
  /// the state), the gradients reduce-scattered and the parameters all-gathered. CPU runs; the
  /// optimizer must be train::optim::FusedSGD, FusedAdam, FusedAdamW (no amsgrad) or Adadelta.
  /// Checkpoints hold the whole state: a run resumes sharded or not, on any world size.
  bool shard_optimizer = false;
  /// Your program's own settings that shape the run (its recipe: optimizer, weight decay, data
  /// limits...), as name and value text. Checkpoints record them beside the Trainer's own
  /// (model_name, data_name, batch size, rate, schedule, seed, epochs); a resume whose values
  /// differ warns that the results will differ from an uninterrupted run.
  std::vector<std::pair<std::string, std::string>> recipe;
  /// Where --precision auto (the default) may train this model in bf16 autocast: from this many
  /// samples per rank up, on GPUs that have bf16. Unset (the default): fp32, since bf16's accuracy
  /// is yours to measure; --precision bf16 asks for it outright. The built-in MNIST recipe sets
  /// builtin::kAutoBf16Batch, where bf16 was measured within half a point of fp32.
  std::optional<int64_t> auto_bf16_batch;
  /// What the progress lines count per second: `units_per_sample` `unit`s per sample ("img" and 1
  /// by default: "N img/s"; e.g. "tokens" and a sequence's length).
  std::string unit = "img";
  double units_per_sample = 1;
  /// Early stopping (--early-stop-metric, --early-stop-patience, --early-stop-min-delta win when set).
  EarlyStopping early_stopping;
  /// An exponential moving average of the weights, updated after every optimizer step
  /// (ema = decay x ema + (1 - decay) x weights), evaluated instead of the weights and kept in
  /// checkpoints; unset: none (--ema-decay wins when set). E.g. 0.999.
  std::optional<double> ema_decay;
};

}  // namespace train
