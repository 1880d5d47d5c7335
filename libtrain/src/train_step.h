// The training step as one unit: gather the batch, forward, loss, backward (DDP's all-reduce
// inside), optimizer step, loss added up on the device. Eager, or captured once in a CUDA graph
// and replayed (--cuda-graph).
#pragma once

#include "train/ddp.h"
#include "train/process_group.h"
#include "train/trainer.h"

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

namespace train::detail {

/// What a step works on; owned by the Trainer.
struct StepParts {
  Dataset* data = nullptr;
  ModelHandle* model = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  const LossFn* loss = nullptr;
  at::Tensor* loss_sum = nullptr;  ///< double scalar on the device; each step adds its loss
  bool bf16 = false;               ///< forward and loss under CUDA autocast to bfloat16
  DistributedDataParallel* ddp = nullptr;  ///< null for one rank
  ProcessGroup* process_group = nullptr;   ///< with ddp
  int world_size = 1;
  /// Several ranks in a CUDA graph: "in-graph" averages the gradients with NCCL calls captured in
  /// the step's graph, bucket by bucket while the backward runs; "between" runs one eager NCCL
  /// all-reduce between two graphs (forward + backward, then the update).
  std::string graph_allreduce = "in-graph";
  /// With "in-graph": "auto" (two ranks) and "on" (2 to 8) let ranks on one machine average
  /// buckets through each other's GPU memory (peer_reduce.h); "off" keeps NCCL.
  std::string peer_allreduce = "auto";
};

class TrainStep {
 public:
  virtual ~TrainStep() = default;
  /// One optimizer step on the samples order[start, start + len) (int64 indices on the device).
  /// @return the step's mean loss, on the device; reading it waits for the device.
  virtual at::Tensor run(const at::Tensor& order, int64_t start, int64_t len) = 0;
  /// Something baked into a captured step changed (the learning rate): capture again.
  virtual void invalidate() {}
  /// One line for the log: "eager" or "CUDA graph (batch 64, captured at step 4)".
  virtual std::string describe() const = 0;
};

/// The step as plain LibTorch calls.
std::unique_ptr<TrainStep> make_eager_step(const StepParts& parts);

/// The step captured in a CUDA graph for full batches of `batch` samples (a last, smaller batch
/// runs eagerly). The first `warmup` steps run eagerly (NCCL and cuDNN set up, optimizer state
/// allocated); the next one is captured and every later one replays it. With several ranks DDP's
/// hooks are off in the graph: "in-graph" captures one grouped NCCL average per DDP bucket on a
/// side stream, each launched as soon as its gradients are done, so the last layers' all-reduce
/// overlaps the first layers' backward, and with the fused Adadelta the bucket's update follows
/// it there; "between" (or where the NCCL communicator can't be reached) makes every gradient a
/// view of one flat buffer, replays forward + backward, runs one eager all-reduce of the buffer,
/// then replays the update. Ranks agree on whether every capture worked and
/// all train eagerly if one didn't. CUDA builds only.
/// @throws train::ConfigError on a build without CUDA.
std::unique_ptr<TrainStep> make_cuda_graph_step(const StepParts& parts, int64_t batch, int warmup = 3);

/// Makes `device` this thread's CUDA device and a pool stream its current stream, for the whole
/// run: work for rank r lands on cuda:r, and a step can be captured on the current stream (CUDA
/// graphs can't capture the legacy default stream). No-op on the CPU.
void use_cuda_device(const at::Device& device);

/// Whether `device` is a CUDA GPU with bfloat16 arithmetic (compute capability 8.0 or newer).
bool cuda_bf16_supported(const at::Device& device);
/// Whether CUDA device `device` can read device `peer`'s memory directly (false without CUDA,
/// or where either index isn't a visible device).
bool cuda_peer_access(int device, int peer);

/// Peak memory the CUDA caching allocator handed out on `device` so far, in MB (0 on the CPU).
double peak_gpu_memory_mb(const at::Device& device);

}  // namespace train::detail
