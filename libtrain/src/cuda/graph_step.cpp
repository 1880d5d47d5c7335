// The training step captured in a CUDA graph (step/train_step.h): the same sequence of kernels as
// the eager step, replayed from static buffers. The batch indices are copied into a fixed tensor
// before each replay; everything else (activations, gradients, the reducer's buckets, the loss)
// lives in the graph's private memory pool. CUDA builds only.
#include "comm/reducer.h"
#include "cuda/graph_comm.h"
#include "cuda/graph_memsets.h"
#include "cuda/optimizer_epilogues.h"
#include "cuda/shard_graph.h"
#include "cuda/step_inputs.h"
#include "optim/device_rates.h"
#include "stops/nonfinite.h"
#include "optim/sharded_optimizer.h"
#include "step/grad_clip.h"
#include "step/train_step.h"
#include "train/base/log.h"
#include "train/process_group.h"
#include "optim/unique_params.h"

#include <ATen/cuda/CUDAGraph.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <algorithm>

namespace train::detail {
namespace {

// Installs `hooks` in the reducer for one scope, and the ones before back at its end.
class UseHooks {
 public:
  UseHooks(Reducer& r, Reducer::Hooks hooks) : r_(r), previous_(r.set_hooks(std::move(hooks))) {}
  ~UseHooks() {
    r_.abandon_backward();  // after a failed capture: forget the half-done backward
    r_.set_hooks(std::move(previous_));
  }
  UseHooks(const UseHooks&) = delete;
  UseHooks& operator=(const UseHooks&) = delete;

 private:
  Reducer& r_;
  Reducer::Hooks previous_;
};

// Gives a sharded optimizer's communication the graph's collectives for one scope.
class UseCollectives {
 public:
  UseCollectives(ShardComm& comm, std::shared_ptr<ShardCollectives> c) : comm_(comm) { comm_.use_collectives(std::move(c)); }
  ~UseCollectives() { comm_.use_collectives(nullptr); }
  UseCollectives(const UseCollectives&) = delete;
  UseCollectives& operator=(const UseCollectives&) = delete;

 private:
  ShardComm& comm_;
};

class CudaGraphStep : public TrainStep {
 public:
  CudaGraphStep(const StepParts& parts, int64_t batch, int warmup)
      : parts_(parts), batch_(batch), warmup_(warmup), eager_(make_eager_step(parts)),
        gather_in_graph_(parts.data != nullptr && parts.data->capturable()) {}

  at::Tensor run(const StepBatch& batch) override {
    if (batch.size() != batch_ || failed_) {
      // The epoch's last, smaller batch runs eagerly, in gradients of its own; the graphs keep
      // using theirs.
      release_grads();
      if (!failed_ && graph_ && comm_) {
        // Where the graph averages through the GPUs' peer memory, so does this step (the
        // process group's all-reduce may be Gloo's).
        if (auto hooks = comm_->eager_hooks()) {
          UseHooks use(*parts_.reducer, std::move(*hooks));
          parts_.optimizer->zero_grad();
          at::Tensor loss = accumulate_backward(parts_, batches_of(parts_, batch));
          parts_.reducer->finish();
          update(parts_);
          return loss;
        }
      }
      return eager_->run(batch);
    }
    if (!graph_ && eager_steps_ < warmup_) {
      // Warm-up on the stream the capture will use (the Trainer made a non-default stream current
      // for the whole run), so what it sets up lazily (cuBLAS workspaces, NCCL communicators,
      // optimizer state) exists before the capture starts.
      ++eager_steps_;
      return eager_->run(batch);
    }
    bool captured_now = false;
    if (!graph_) {
      if (!capture_all(batch)) {
        // This step's batch was already drawn for the capture: train on it, not on a new draw.
        return gather_in_graph_ || inputs_.empty() ? eager_->run(batch) : step_on(parts_, fixed_batches());
      }
      captured_now = true;
    }
    if (gather_in_graph_) {
      queue_inputs(batch);
    } else if (!captured_now) {
      // A batch made outside the step (a loader's), or a dataset the graph can't capture (random
      // augmentation, host state), gathered eagerly: copied into the graph's fixed inputs.
      const StepBatches step = batches_of(parts_, batch);
      for (size_t i = 0; i < inputs_.size(); ++i) {
        const Batch b = step.gather(i);
        inputs_[i].inputs.copy_(b.inputs, /*non_blocking=*/true);
        inputs_[i].targets.copy_(b.targets, /*non_blocking=*/true);
      }
    }
    if (parts_.watch != nullptr) parts_.watch->before_replay();
    graph_->replay();
    if (update_) {
      parts_.process_group->allreduce_sum(flat_grads_);  // queued on the device; the host goes on
      update_->replay();
    }
    if (parts_.clip != nullptr) parts_.clip->norms = norms_;  // this replay's, for the non-finite watch
    return loss_;
  }

  // libtrain's Adadelta and fused optimizers read the rate from the device: the graph follows a
  // new rate once it is written there. Any other optimizer's rate is baked into the graph: capture again.
  void lr_changed() override {
    if (parts_.shard != nullptr) {
      if (!parts_.shard->follow_rates()) release();  // the shard's optimizer steps, not the run's
      return;
    }
    optim::DeviceStateOptimizer* on_device = optim::device_state(*parts_.optimizer);
    if (on_device != nullptr && on_device->lr_on_device()) {
      // The captured update reads the rate from the device. It goes there with the next replay's
      // indices, in one kernel (queue_inputs); an eager step or a capture before then writes it
      // first itself.
      if (!rates_with_inputs()) on_device->sync_lr();
    } else {
      release();
    }
  }

  void release() override {
    if (!graph_) return;
    // Replays may still run on the device; the graph's memory goes back only after them.
    c10::cuda::getCurrentCUDAStream().synchronize();
    update_.reset();
    graph_.reset();
    loss_ = at::Tensor();
    norms_ = at::Tensor();
  }

  std::string describe() const override {
    std::string ranks;
    if (parts_.world_size > 1 && parts_.shard != nullptr) {
      ranks = ", gradients reduce-scattered and parameters all-gathered inside the graph (ZeRO-1)";
      if (parts_.shard->comm()->params_bound()) ranks += ", into the parameters in place";
    } else if (parts_.world_size > 1) {
      ranks = parts_.graph_average == GraphAverage::in_graph ? ", gradients averaged inside the graph"
                                                             : ", one eager all-reduce between two graphs";
    }
    const size_t micro = micro_spans(parts_, batch_).size();
    const std::string accumulated =
        micro > 1 ? " in " + std::to_string(micro) + " accumulated micro-batches of " + std::to_string(parts_.micro_batch) : "";
    return std::string("CUDA graph (batch ") + std::to_string(batch_) + accumulated + ", " + std::to_string(warmup_) +
           " eager warm-up steps" + (parts_.bf16 ? ", bf16 autocast" : "") + ranks +
           (parts_.clip != nullptr ? ", gradients clipped in the graph" : "") +
           (gather_in_graph_ ? "" : ", batches gathered outside the graph") + ")";
  }

 private:
  // Captures the step (graph_, and update_ for "between"); with several ranks, all of them agree
  // that every capture worked. False: the step runs eagerly from now on, on every rank (a rank
  // replaying NCCL calls that another rank makes eagerly would pair different collectives).
  bool capture_all(const StepBatch& batch) {
    std::string error;
    // A rate left for queue_inputs() goes to the device now: a capture must not take its write.
    if (optim::DeviceStateOptimizer* on_device = optim::device_state(*parts_.optimizer)) on_device->sync_lr();
    try {
      prepare_capture(batch);
      if (parts_.reducer == nullptr || parts_.world_size == 1) {
        // One rank (also DDP over one, --ddp-single-rank: the average is the gradient itself).
        Unreduced off(parts_.reducer);
        capture();
      } else if (parts_.shard != nullptr) {
        capture_sharded();
      } else if (use_in_graph()) {
        capture_in_graph();
      } else {
        capture_split();
      }
    } catch (const c10::Error& e) {
      error = e.what();
      error = error.substr(0, error.find('\n'));
    }
    if (parts_.world_size > 1) {
      at::Tensor failed = at::full({1}, error.empty() ? 0.0 : 1.0, loss_sum_options().dtype(at::kFloat));
      parts_.process_group->allreduce_sum(failed);
      if (failed.item<float>() > 0 && error.empty()) error = "another rank could not capture its step";
    }
    if (error.empty()) return true;
    // Something in the step can't be captured: say so once and train eagerly.
    failed_ = true;
    update_.reset();
    graph_.reset();
    norms_ = at::Tensor();
    release_grads();
    log::warn("--cuda-graph: capturing the step failed (" + error +
              "); the step runs eagerly from now on. Hint: --cuda-graph off skips the attempt.");
    return false;
  }

  // Options of a small tensor on the step's device.
  at::TensorOptions loss_sum_options() const { return parts_.loss_sum->options(); }

  // Whether the optimizer's new rates wait for queue_inputs() (lr_changed()).
  bool rates_with_inputs() const {
    return gather_in_graph_ && parts_.shard == nullptr && step_inputs_available() &&
           optim::device_state(*parts_.optimizer) != nullptr;
  }

  // The next replay's indices (this step's slice of the epoch's order) and the rates the schedule
  // changed since the last replay: one kernel (step_inputs.h) where it applies, else a copy and
  // the optimizer's fills.
  void queue_inputs(const StepBatch& batch) {
    const at::Tensor& slice = batch.indices;
    optim::DeviceStateOptimizer* on_device = optim::device_state(*parts_.optimizer);
    std::vector<details::DeviceRates::Write> rates;
    if (rates_with_inputs() && slice.is_contiguous() && slice.scalar_type() == at::kLong &&
        indices_.scalar_type() == at::kLong && indices_.is_contiguous() &&
        optim::take_rate_writes(*on_device, kStepInputRates, &rates)) {
      StepInputs in;
      in.indices = indices_.mutable_data_ptr<int64_t>();
      in.order = slice.const_data_ptr<int64_t>();
      in.count = batch_;
      for (const auto& r : rates) {
        in.rate[in.rates] = r.tensor.mutable_data_ptr<float>();
        in.value[in.rates++] = static_cast<float>(r.value);
      }
      if (step_inputs_launch(in, c10::cuda::getCurrentCUDAStream().stream()) == 0) return;
      for (const auto& r : rates) r.tensor.fill_(r.value);  // taken as written: write them
    } else if (on_device != nullptr) {
      on_device->sync_lr();
    }
    indices_.copy_(slice, /*non_blocking=*/true);
  }

  // The indices of the step about to be captured in their fixed tensor, and the device idle.
  // Capture runs on the current stream (never the legacy default stream: the Trainer made a pool
  // stream current).
  void prepare_capture(const StepBatch& batch) {
    if (gather_in_graph_) {
      if (!indices_.defined()) indices_ = at::empty({batch_}, batch.indices.options());
      indices_.copy_(batch.indices);
    } else {
      const StepBatches step = batches_of(parts_, batch);
      inputs_.clear();
      for (size_t i = 0; i < step.spans.size(); ++i) {
        const Batch b = step.gather(i);
        inputs_.push_back({b.inputs.clone(), b.targets.clone()});  // fixed addresses, outside the graph's pool
      }
    }
    c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
    TORCH_CHECK(stream != c10::cuda::getDefaultCUDAStream(stream.device_index()),
                "the current stream is the default stream, which can't be captured");
    stream.synchronize();
  }

  // The captured step's micro-batches: gathered inside the graph from indices_, or the fixed inputs.
  StepBatches graph_batches() {
    if (!gather_in_graph_) return fixed_batches();
    StepBatches b;
    b.spans = micro_spans(parts_, batch_);
    b.gather = [this, spans = b.spans](size_t i) {
      at_phase(parts_, "Dataset::get_batch");
      return parts_.data->get_batch(spans.size() == 1 ? indices_ : indices_.narrow(0, spans[i].first, spans[i].second));
    };
    return b;
  }

  // The fixed inputs (a dataset the graph can't capture), one per micro-batch.
  StepBatches fixed_batches() {
    StepBatches b;
    b.spans = micro_spans(parts_, batch_);
    b.gather = [this](size_t i) { return inputs_[i]; };
    return b;
  }

  // The clipped norms the graph writes (the non-finite watch reads them after each replay).
  void keep_norms() { norms_ = parts_.clip != nullptr ? parts_.clip->norms : at::Tensor(); }

  // One rank: the whole step, gradients created inside the graph's pool.
  void capture() {
    parts_.optimizer->zero_grad();
    graph_ = new_graph();
    capture_into(*graph_, begin_global, [&] {
      loss_ = step_on(parts_, graph_batches());
      if (parts_.watch != nullptr) parts_.watch->note_in_capture(loss_);
    });
    keep_norms();
  }

  // The trainable parameters, last layer first: the order their gradients are done in.
  std::vector<at::Tensor> params_last_first() const {
    std::vector<at::Tensor> params;
    for (auto& q : unique_parameters(*parts_.model->module)) {
      if (q.requires_grad()) params.push_back(q);
    }
    std::reverse(params.begin(), params.end());
    return params;
  }

  // Every gradient becomes a view of one flat buffer (again at every capture: an eager step in
  // between replaced them).
  void bind_flat_grads() {
    std::vector<at::Tensor> params = params_last_first();
    TORCH_CHECK(!params.empty(), "the model has no trainable parameters");
    if (!flat_grads_.defined()) {
      int64_t total = 0;
      for (const auto& q : params) {
        TORCH_CHECK(q.scalar_type() == params.front().scalar_type(),
                    "parameters of more than one dtype can't share one gradient buffer");
        total += q.numel();
      }
      flat_grads_ = at::zeros({total}, params.front().options().requires_grad(false));
    }
    int64_t offset = 0;
    for (auto& q : params) {
      // The parameter's own strides (channels-last weights too): AccumulateGrad and the fused
      // optimizer want gradients laid out like their parameters.
      at::Tensor slice = flat_grads_.narrow(0, offset, q.numel());
      q.mutable_grad() = q.is_non_overlapping_and_dense() ? slice.as_strided(q.sizes(), q.strides()) : slice.view_as(q);
      offset += q.numel();
    }
  }

  // Before an eager step: gradients that are views of a buffer (the flat one of "between", a
  // small bucket's of "in-graph") can't take the optimizer's zero_grad (it detaches them in
  // place); the eager step makes its own.
  void release_grads() {
    for (auto& q : parts_.model->module->parameters()) q.mutable_grad() = at::Tensor();
  }

  bool use_in_graph() {
    if (parts_.graph_average != GraphAverage::in_graph) return false;
    if (!comm_tried_) {
      comm_tried_ = true;
      // The optimizer's epilogue on each bucket (the fused Adadelta's, Adam's or AdamW's
      // update), wired here: the communication knows no optimizer.
      // Clipping needs every bucket's average before any update: no per-bucket epilogue then.
      std::shared_ptr<BucketEpilogue> epilogue;
      if (parts_.clip == nullptr) epilogue = bucket_epilogue_of(*parts_.optimizer, parts_.reducer->params());
      comm_ = GraphComm::create(*parts_.reducer, *parts_.process_group, std::move(epilogue), parts_.peer,
                                choice_name(parts_.peer_flag));
    }
    return comm_ != nullptr;
  }

  // Several ranks, one graph: forward and backward into fresh gradients (autograd's own, in the
  // graph's pool), the buckets' averages (and updates) launched from the reducer's hooks, join,
  // and the update where the buckets didn't do it.
  void capture_in_graph() {
    release_grads();
    parts_.optimizer->zero_grad();
    c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
    graph_ = new_graph();
    UseHooks use(*parts_.reducer, comm_->capture_hooks());
    capture_into(*graph_, begin_thread_local, [&] {
      comm_->begin(stream);
      loss_ = accumulate_backward(parts_, graph_batches());
      parts_.reducer->finish();
      comm_->join();
      if (!comm_->updated_in_buckets()) update(parts_);
      if (parts_.watch != nullptr) parts_.watch->note_in_capture(loss_);
    });
    keep_norms();
  }

  // ZeRO-1, one graph: the backward's buckets reduce-scattered on a side stream as they complete
  // (the sharded optimizer's own hooks, their collectives NCCL's calls for the capture), join,
  // the clipping and the shard's update, the parameters all-gathered.
  void capture_sharded() {
    if (!shard_graph_) {
      std::string why_not;
      shard_graph_ = ShardGraph::create(*parts_.process_group, parts_.reducer->params().front().device().index(), &why_not);
      TORCH_CHECK(shard_graph_ != nullptr, "--shard-optimizer in the graph: ", why_not);
    }
    const std::shared_ptr<ShardComm>& comm = parts_.shard->comm();
    comm->bind_grads(*parts_.reducer);  // the backward accumulates into the reduce-scatter's input
    UseHooks use(*parts_.reducer, parts_.reducer->all_buckets(comm, /*manual=*/true));
    UseCollectives collectives(*comm, shard_graph_);
    graph_ = new_graph();
    capture_into(*graph_, begin_thread_local, [&] {
      shard_graph_->begin(c10::cuda::getCurrentCUDAStream());
      comm->zero_grads();
      loss_ = accumulate_backward(parts_, graph_batches());
      parts_.reducer->finish();
      shard_graph_->join();
      // Before the update: where the parameters could not move into their buckets' buffers, the
      // all-gather lands in the flat buffers that the gradients view.
      if (parts_.watch != nullptr) parts_.watch->note_in_capture(loss_);
      update(parts_);
    });
    keep_norms();
  }

  // Several ranks, two graphs ("between"): graph_ computes the gradients (the reducer off), the
  // eager all-reduce between the replays sums them, update_ averages and applies them.
  void capture_split() {
    bind_flat_grads();
    graph_ = new_graph();
    {
      Unreduced off(parts_.reducer);
      capture_into(*graph_, begin_global, [&] {
        flat_grads_.zero_();  // the gradients stay views of the flat buffer
        loss_ = accumulate_backward(parts_, graph_batches());
      });
    }
    update_ = new_graph();
    const auto pool = graph_->pool();
    capture_into(*update_, [pool](at::cuda::CUDAGraph& g) { g.capture_begin(pool); }, [&] {
      flat_grads_.div_(static_cast<double>(parts_.world_size));
      update(parts_);
      if (parts_.watch != nullptr) parts_.watch->note_in_capture(loss_);
    });
    keep_norms();
  }

  // A graph that keeps its captured form until end_capture has rewritten it.
  static std::unique_ptr<at::cuda::CUDAGraph> new_graph() {
    return std::make_unique<at::cuda::CUDAGraph>(/*keep_graph=*/true);
  }

  // Ends the capture, turns its memset nodes into kernels (graph_memsets.h: the GPU idles after a
  // memset node) and instantiates the graph.
  static void end_capture(at::cuda::CUDAGraph& graph) {
    graph.capture_end();
    int replaced = 0;
    C10_CUDA_CHECK(static_cast<cudaError_t>(graph_memsets_to_kernels(graph.raw_cuda_graph(), &replaced)));
    log::debug("CUDA graph: " + std::to_string(replaced) + " memset nodes now kernels");
    graph.instantiate();
  }

  static void abandon_capture(at::cuda::CUDAGraph& graph) {
    try {
      graph.capture_end();
    } catch (...) {
    }
  }

  // How a capture begins: on the current stream, in the global mode, in a pool of its own; or
  // thread-local (c10d's watchdog thread keeps polling earlier collectives' events meanwhile).
  static void begin_global(at::cuda::CUDAGraph& graph) { graph.capture_begin(); }
  static void begin_thread_local(at::cuda::CUDAGraph& graph) {
    graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
  }

  // Captures `body` into `graph`, begun by `begin`: a body that throws abandons the capture, else
  // the capture ends as end_capture() says.
  template <class Begin, class Body>
  static void capture_into(at::cuda::CUDAGraph& graph, Begin&& begin, Body&& body) {
    begin(graph);
    try {
      body();
    } catch (...) {
      abandon_capture(graph);
      throw;
    }
    end_capture(graph);
  }

  StepParts parts_;
  int64_t batch_;
  int warmup_;
  int eager_steps_ = 0;
  std::unique_ptr<TrainStep> eager_;
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  std::unique_ptr<at::cuda::CUDAGraph> update_;  // "between": the update after the all-reduce
  at::Tensor flat_grads_;
  bool failed_ = false;
  bool gather_in_graph_;  // the dataset is capturable: the graph gathers the batch itself
  at::Tensor indices_;    // this step's sample indices: the graph's input when it gathers
  std::vector<Batch> inputs_;  // else the graph's fixed inputs, one per micro-batch
  at::Tensor loss_;       // the graph's output
  at::Tensor norms_;      // --clip-grad-norm: the gradients' norms the graph writes
  std::unique_ptr<GraphComm> comm_;  // in-graph averaging, set up at the first capture
  std::shared_ptr<ShardGraph> shard_graph_;  // --shard-optimizer: the collectives of its captures
  bool comm_tried_ = false;
};

}  // namespace

std::unique_ptr<TrainStep> make_cuda_graph_step(const StepParts& parts, int64_t batch, int warmup) {
  return std::make_unique<CudaGraphStep>(parts, batch, warmup);
}

}  // namespace train::detail
