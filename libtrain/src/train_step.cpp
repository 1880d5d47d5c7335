// Eager and CUDA-graph training steps. A captured step is the same sequence of kernels as the
// eager one, replayed from static buffers: the batch indices are copied into a fixed tensor
// before each replay, and everything else (activations, gradients, DDP's buckets, the loss) lives
// in the graph's private memory pool.
#include "train_step.h"

#include "train/error.h"
#include "train/log.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#ifdef TRAIN_HAVE_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>
#endif

namespace train::detail {
namespace {

// forward + loss (under bf16 autocast when asked) and backward; the loss is added to the sum.
at::Tensor forward_backward(const StepParts& p, const at::Tensor& indices) {
  Batch b = p.data->get_batch(indices);
  at::Tensor loss;
  if (p.bf16) {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    try {
      at::Tensor out = p.model->forward(b.inputs);
      loss = (*p.loss)(out, b.targets, Reduction::mean).to(at::kFloat);
    } catch (...) {
      at::autocast::set_autocast_enabled(at::kCUDA, false);
      at::autocast::clear_cache();
      throw;
    }
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::clear_cache();
  } else {
    at::Tensor out = p.model->forward(b.inputs);
    loss = (*p.loss)(out, b.targets, Reduction::mean);
  }
  loss.backward();
  *p.loss_sum += loss.detach().to(at::kDouble);
  return loss;
}

// The whole step: zero the gradients, forward, backward (DDP all-reduces in its hooks), update.
at::Tensor step_on(const StepParts& p, const at::Tensor& indices) {
  p.optimizer->zero_grad();
  at::Tensor loss = forward_backward(p, indices);
  p.optimizer->step();
  return loss;
}

class EagerStep : public TrainStep {
 public:
  explicit EagerStep(const StepParts& parts) : parts_(parts) {}
  at::Tensor run(const at::Tensor& order, int64_t start, int64_t len) override {
    return step_on(parts_, order.narrow(0, start, len));
  }
  std::string describe() const override { return parts_.bf16 ? "eager, bf16 autocast" : "eager"; }

 private:
  StepParts parts_;
};

#ifdef TRAIN_HAVE_CUDA
class CudaGraphStep : public TrainStep {
 public:
  CudaGraphStep(const StepParts& parts, int64_t batch, int warmup)
      : parts_(parts), batch_(batch), warmup_(warmup), eager_(parts) {}

  at::Tensor run(const at::Tensor& order, int64_t start, int64_t len) override {
    if (len != batch_) {
      // The epoch's last, smaller batch runs eagerly. Gradients that are views of the flat buffer
      // (several ranks) can't be zeroed the eager way: let that step allocate its own; the
      // graphs keep using the buffer's memory.
      if (flat_grads_.defined()) {
        for (auto& q : parts_.model->module->parameters()) q.mutable_grad() = at::Tensor();
      }
      return eager_.run(order, start, len);
    }
    if (failed_) return eager_.run(order, start, len);
    if (!graph_ && eager_steps_ < warmup_) {
      // Warm-up on the stream the capture will use (the Trainer made a non-default stream current
      // for the whole run), so what it sets up lazily (cuBLAS workspaces, NCCL communicators,
      // optimizer state) exists before the capture starts.
      ++eager_steps_;
      return eager_.run(order, start, len);
    }
    if (!graph_) {
      try {
        return parts_.ddp != nullptr ? capture_split(order, start) : capture(order, start);
      } catch (const c10::Error& e) {
        // Something in the step can't be captured: say so once and train eagerly. The captured
        // step did not run, so this step runs now.
        failed_ = true;
        std::string what = e.what();
        log::warn("--cuda-graph: capturing the step failed (" + what.substr(0, what.find('\n')) +
                  "); the step runs eagerly from now on. Hint: --cuda-graph off skips the attempt.");
        return eager_.run(order, start, len);
      }
    }
    indices_.copy_(order.narrow(0, start, batch_), /*non_blocking=*/true);
    graph_->replay();
    if (update_) {
      parts_.process_group->allreduce_sum(flat_grads_);  // queued on the device; the host goes on
      update_->replay();
    }
    return loss_;
  }

  void invalidate() override {
    if (!graph_) return;
    // Replays may still run on the device; the graph's memory goes back only after them.
    at::cuda::getCurrentCUDAStream().synchronize();
    update_.reset();
    graph_.reset();
    loss_ = at::Tensor();
  }

  std::string describe() const override {
    return std::string("CUDA graph (batch ") + std::to_string(batch_) + ", " + std::to_string(warmup_) +
           " eager warm-up steps" + (parts_.bf16 ? ", bf16 autocast)" : ")");
  }

 private:
  // The indices of the step about to be captured in their fixed tensor, and the device idle.
  // Capture runs on the current stream (never the legacy default stream: the Trainer made a pool
  // stream current).
  void prepare_capture(const at::Tensor& order, int64_t start) {
    if (!indices_.defined()) indices_ = at::empty({batch_}, order.options());
    indices_.copy_(order.narrow(0, start, batch_));
    c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
    TORCH_CHECK(stream != c10::cuda::getDefaultCUDAStream(stream.device_index()),
                "the current stream is the default stream, which can't be captured");
    stream.synchronize();
  }

  // Captures one step and replays it once, so the captured step also trains.
  at::Tensor capture(const at::Tensor& order, int64_t start) {
    prepare_capture(order, start);
    // Gradients are created inside the graph's pool and stay there between replays.
    parts_.optimizer->zero_grad();
    graph_ = std::make_unique<at::cuda::CUDAGraph>();
    graph_->capture_begin();
    try {
      loss_ = step_on(parts_, indices_);
    } catch (...) {
      abandon_capture(*graph_);
      graph_.reset();
      throw;
    }
    graph_->capture_end();
    graph_->replay();
    return loss_;
  }

  // Several ranks: every gradient becomes a view of one flat buffer, so one all-reduce covers
  // them; graph_ computes them (DDP's hooks off), update_ averages and applies them.
  at::Tensor capture_split(const at::Tensor& order, int64_t start) {
    prepare_capture(order, start);
    std::vector<at::Tensor> params = parts_.model->module->parameters();
    if (!flat_grads_.defined()) {
      int64_t total = 0;
      for (const auto& q : params) total += q.numel();
      flat_grads_ = at::zeros({total}, params.front().options());
    }
    // Again at every capture: an eager step in between (a last, smaller batch) replaced them.
    int64_t offset = 0;
    for (auto& q : params) {
      q.mutable_grad() = flat_grads_.narrow(0, offset, q.numel()).view_as(q);
      offset += q.numel();
    }
    graph_ = std::make_unique<at::cuda::CUDAGraph>();
    {
      DistributedDataParallel::NoSync no_sync(*parts_.ddp);
      graph_->capture_begin();
      try {
        flat_grads_.zero_();  // the gradients stay views of the flat buffer
        loss_ = forward_backward(parts_, indices_);
      } catch (...) {
        abandon_capture(*graph_);
        graph_.reset();
        throw;
      }
      graph_->capture_end();
    }
    update_ = std::make_unique<at::cuda::CUDAGraph>();
    update_->capture_begin(graph_->pool());
    try {
      flat_grads_.div_(static_cast<double>(parts_.world_size));
      parts_.optimizer->step();
    } catch (...) {
      abandon_capture(*update_);
      update_.reset();
      graph_.reset();
      throw;
    }
    update_->capture_end();
    graph_->replay();
    parts_.process_group->allreduce_sum(flat_grads_);
    update_->replay();
    return loss_;
  }

  static void abandon_capture(at::cuda::CUDAGraph& graph) {
    try {
      graph.capture_end();
    } catch (...) {
    }
  }

  StepParts parts_;
  int64_t batch_;
  int warmup_;
  int eager_steps_ = 0;
  EagerStep eager_;
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  std::unique_ptr<at::cuda::CUDAGraph> update_;  // several ranks: the update after the all-reduce
  at::Tensor flat_grads_;
  bool failed_ = false;
  at::Tensor indices_;  // this step's sample indices: the graph's only input
  at::Tensor loss_;     // the graph's output
};
#endif

}  // namespace

void use_cuda_device(const at::Device& device) {
#ifdef TRAIN_HAVE_CUDA
  if (!device.is_cuda()) return;
  c10::cuda::set_device(device.index());
  c10::cuda::setCurrentCUDAStream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
#else
  (void)device;
#endif
}

double peak_gpu_memory_mb(const at::Device& device) {
#ifdef TRAIN_HAVE_CUDA
  if (!device.is_cuda()) return 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  const auto& peak = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  return static_cast<double>(peak) / (1024.0 * 1024.0);
#else
  (void)device;
  return 0;
#endif
}

std::unique_ptr<TrainStep> make_eager_step(const StepParts& parts) { return std::make_unique<EagerStep>(parts); }

std::unique_ptr<TrainStep> make_cuda_graph_step(const StepParts& parts, int64_t batch, int warmup) {
#ifdef TRAIN_HAVE_CUDA
  return std::make_unique<CudaGraphStep>(parts, batch, warmup);
#else
  (void)parts, (void)batch, (void)warmup;
  throw ConfigError("--cuda-graph on: expected a build with CUDA, found one without.",
                    "rebuild against a CUDA build of torch, or use --cuda-graph off.");
#endif
}

}  // namespace train::detail
