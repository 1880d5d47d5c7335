// The training step as one unit: the batch it is handed (or its gather), forward, loss, backward (the gradients averaged
// over the ranks by the reducer's hooks), optimizer step, loss added up on the device. Eager
// (eager_step.cpp), or captured once in a CUDA graph and replayed (cuda/graph_step.cpp).
#pragma once

#include "train/config.h"
#include "data/step_batch.h"
#include "train/data.h"
#include "train/loss.h"
#include "train/model_handle.h"

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace train {
class ProcessGroup;
class Reducer;
}  // namespace train

namespace train::detail {

struct StepContext;  // user_code.h
struct GradClip;     // step/grad_clip.h
class ShardedOptimizer;  // sharded_optimizer.h

/// Where a CUDA-graph step of several ranks averages the gradients.
enum class GraphAverage {
  in_graph,  ///< inside the graph, bucket by bucket while the backward runs (NCCL or peer memory)
  between,   ///< one eager all-reduce between two graphs (forward + backward, then the update)
};

/// What a step works on; owned by the Trainer.
class NonFiniteWatch;  // nonfinite.h

struct StepParts {
  Dataset* data = nullptr;  ///< gathers StepBatch::indices; null when every batch comes made
  ModelHandle* model = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  const LossFn* loss = nullptr;
  at::Tensor* loss_sum = nullptr;  ///< double scalar on the device; each step adds its loss
  bool bf16 = false;               ///< forward and loss under CUDA autocast to bfloat16
  Reducer* reducer = nullptr;      ///< averages the gradients; null for one rank
  ProcessGroup* process_group = nullptr;  ///< with the reducer
  int world_size = 1;
  GraphAverage graph_average = GraphAverage::in_graph;
  /// In the graph: average buckets through the GPUs' peer memory where it can be set up (the
  /// communication plan's choice, comm/comm_plan.h), NCCL for the rest.
  bool peer = false;
  Switch peer_flag = Switch::automatic;  ///< for log lines: what --peer-allreduce said
  /// What the step is doing, for an error's message (user_code.h); the first batch is checked.
  StepContext* context = nullptr;
  /// --nonfinite skip (eager steps only): called between the backward and the update with the
  /// step's loss; false drops the update (and the loss from the sum).
  std::function<bool(const at::Tensor& loss)> before_update;
  /// --accumulate-steps: a step's samples are cut into micro-batches of this many, each its own
  /// forward and backward (0: the step is one batch).
  int64_t micro_batch = 0;
  GradClip* clip = nullptr;  ///< --clip-grad-norm, between the average and the update; null: none
  /// --nonfinite stop: a CUDA graph notes each step's non-finite values inside the graph
  /// (NonFiniteWatch::note_in_capture); null: the Trainer notes them after each step.
  NonFiniteWatch* watch = nullptr;
  /// --shard-optimizer: updates this rank's shard and all-gathers the parameters instead of the
  /// optimizer's step (the reducer's hooks then reduce-scatter); null: the optimizer's step.
  ShardedOptimizer* shard = nullptr;
};

/// A step's samples as micro-batches: spans[i] = (offset in the step, length), gather(i) the batch
/// of span i. One span without --accumulate-steps.
struct StepBatches {
  std::vector<std::pair<int64_t, int64_t>> spans;
  std::function<Batch(size_t i)> gather;
};

/// The reducer off for one scope (a backward that only accumulates, DDP's no_sync).
class Unreduced {
 public:
  explicit Unreduced(Reducer* r);
  ~Unreduced();
  Unreduced(const Unreduced&) = delete;
  Unreduced& operator=(const Unreduced&) = delete;

 private:
  Reducer* r_;
  bool previous_;
};

/// Notes what the step does next, for an error's message.
void at_phase(const StepParts& p, const char* phase);

class TrainStep {
 public:
  virtual ~TrainStep() = default;
  /// One optimizer step on `batch`'s samples.
  /// @return the step's mean loss, on the device; reading it waits for the device.
  virtual at::Tensor run(const StepBatch& batch) = 0;
  /// The learning rate changed: a captured step follows it (the optimizer reads it from the
  /// device) or is captured again.
  virtual void lr_changed() {}
  /// Drops what the step captured (before the process group goes: a graph holding NCCL calls
  /// must not outlive the communicator). The next run captures again.
  virtual void release() {}
  /// One line for the log: "eager" or "CUDA graph (batch 64, captured at step 4)".
  virtual std::string describe() const = 0;
};

/// The step as plain LibTorch calls.
std::unique_ptr<TrainStep> make_eager_step(const StepParts& parts);

/// The step captured in a CUDA graph for full batches of `batch` samples (a last, smaller batch
/// runs eagerly). The first `warmup` steps run eagerly (NCCL and cuDNN set up, optimizer state
/// allocated); the next one is captured and every later one replays it. Several ranks: the
/// reducer's graph hooks (cuda/graph_comm.h) average each bucket inside the graph as soon as its
/// gradients are done, or (GraphAverage::between, or where neither NCCL's communicator nor the
/// peer all-reduce can be had) every gradient is a view of one flat buffer, forward + backward
/// are replayed, one eager all-reduce sums the buffer, then the update is replayed. Ranks agree
/// on whether every capture worked and all train eagerly if one didn't.
/// @throws train::ConfigError in a build without CUDA.
std::unique_ptr<TrainStep> make_cuda_graph_step(const StepParts& parts, int64_t batch, int warmup = 3);

/// forward + loss (under bf16 autocast when asked) and backward of `weight` x the loss; the loss
/// (unweighted) is added to the sum unless `add_to_sum` is false.
at::Tensor forward_backward(const StepParts& p, const Batch& b, bool add_to_sum = true, double weight = 1);
/// The samples [start, start + len) of `batch`: Dataset::get_batch of its indices (noted as the
/// step's phase), or a view of the batch it carries.
Batch get_batch(const StepParts& p, const StepBatch& batch, int64_t start, int64_t len);
/// The micro-batches' spans of a step of `len` samples (one span without --accumulate-steps).
std::vector<std::pair<int64_t, int64_t>> micro_spans(const StepParts& p, int64_t len);
/// The step's samples, each micro-batch gathered when its turn comes (after `batch.ready`).
StepBatches batches_of(const StepParts& p, const StepBatch& batch);
/// forward + backward of each micro-batch, its loss weighted by its share of the step's samples
/// (1/N for a full step), the reducer off for all but the last (whose backward averages the sum).
/// Returns the step's loss (the weighted sum), added to the sum unless `add_to_sum` is false. One
/// span: forward_backward itself.
at::Tensor accumulate_backward(const StepParts& p, const StepBatches& b, bool add_to_sum = true);
/// After the averaged backward: --clip-grad-norm's clipping, then the optimizer's step (or the
/// sharded one's).
void update(const StepParts& p);
/// The whole step: zero the gradients, the micro-batches' forward and backward (the reducer's
/// hooks average after the last), update.
at::Tensor step_on(const StepParts& p, const StepBatches& batches);

}  // namespace train::detail
