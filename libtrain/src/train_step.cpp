// Eager and CUDA-graph training steps. A captured step is the same sequence of kernels as the
// eager one, replayed from static buffers: the batch indices are copied into a fixed tensor
// before each replay, and everything else (activations, gradients, DDP's buckets, the loss) lives
// in the graph's private memory pool.
#include "train_step.h"

#include "train/error.h"
#include "train/log.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <torch/autograd.h>

#ifdef TRAIN_HAVE_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <limits>
#include <optional>
#endif
#ifdef TRAIN_HAVE_NCCL
#include "process_group_impl.h"
#include "train/adadelta.h"

#include <nccl.h>

#include <dlfcn.h>
#endif
#ifdef TRAIN_HAVE_FUSED_CUDA
#include "peer_reduce.h"
#endif

namespace train::detail {
namespace {

// forward + loss (under bf16 autocast when asked) and backward; the loss is added to the sum.
at::Tensor forward_backward(const StepParts& p, const Batch& b) {
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
at::Tensor step_on(const StepParts& p, const Batch& batch) {
  p.optimizer->zero_grad();
  at::Tensor loss = forward_backward(p, batch);
  p.optimizer->step();
  return loss;
}

class EagerStep : public TrainStep {
 public:
  explicit EagerStep(const StepParts& parts) : parts_(parts) {}
  at::Tensor run(const at::Tensor& order, int64_t start, int64_t len) override {
    return step_on(parts_, parts_.data->get_batch(order.narrow(0, start, len)));
  }
  std::string describe() const override { return parts_.bf16 ? "eager, bf16 autocast" : "eager"; }

 private:
  StepParts parts_;
};

#ifdef TRAIN_HAVE_CUDA
#ifdef TRAIN_HAVE_NCCL
// The NCCL calls the captured step makes, from the libnccl that torch already loaded (libtrain
// links no NCCL of its own, so the two can never differ).
struct NcclCalls {
  using AllReduce = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  using Group = ncclResult_t (*)();
  using ErrorString = const char* (*)(ncclResult_t);
  AllReduce all_reduce = nullptr;
  Group group_start = nullptr;
  Group group_end = nullptr;
  ErrorString error_string = nullptr;
};

const NcclCalls* nccl_calls() {
  static const NcclCalls calls = [] {
    NcclCalls c;
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    void* where = lib != nullptr ? lib : RTLD_DEFAULT;
    c.all_reduce = reinterpret_cast<NcclCalls::AllReduce>(dlsym(where, "ncclAllReduce"));
    c.group_start = reinterpret_cast<NcclCalls::Group>(dlsym(where, "ncclGroupStart"));
    c.group_end = reinterpret_cast<NcclCalls::Group>(dlsym(where, "ncclGroupEnd"));
    c.error_string = reinterpret_cast<NcclCalls::ErrorString>(dlsym(where, "ncclGetErrorString"));
    return c;
  }();
  const bool all = calls.all_reduce != nullptr && calls.group_start != nullptr && calls.group_end != nullptr &&
                   calls.error_string != nullptr;
  return all ? &calls : nullptr;
}

// Averages the gradients inside the captured backward, each where autograd left it (no copy into
// a flat buffer, no accumulation into zeroed memory). AccumulateGrad post-hooks mark each
// parameter done; a bucket whose gradients are all done (and whose predecessors were launched:
// every rank launches in bucket order) gets one grouped ncclAllReduce(avg) of its gradients on a
// side stream that forked from the capture stream at that point. With the fused Adadelta the
// bucket's update follows on the side stream, overlapping the rest of the backward; otherwise the
// optimizer steps after the join. finish() joins the side stream back.
struct GraphReducer {
  struct Bucket {
    std::vector<size_t> params;  // indices into GraphReducer::params
    size_t pending = 0;
    // A small bucket of several gradients goes as one message: NCCL's latency, not its
    // bandwidth, is what a small all-reduce costs, and a grouped call pays it per tensor.
    at::Tensor flat;
    int peer_slot = -1;      // >= 0: averaged by the peer all-reduce, in this message slot
    size_t peer_offset = 0;  // where its message starts in the peer buffers (floats)
  };
  static constexpr int64_t kFlatBucketBytes = int64_t{1} << 20;
  // With an NCCL communicator, a bucket goes through the peer all-reduce while each rank's reads
  // of the others' messages stay under this; larger ones are NCCL's (its ring moves each byte
  // fewer times).
  static constexpr int64_t kPeerMaxBytes = int64_t{16} << 20;
  const NcclCalls* nccl = nullptr;
  ncclComm_t comm = nullptr;
  std::vector<at::Tensor> params;  // last layer first
  std::vector<std::string> names;
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of;  // per parameter
  std::vector<bool> ready;
  size_t next_launch = 0;
  bool armed = false;  // only while the step is being captured
  optim::Adadelta* adadelta = nullptr;  // set: try updating each bucket after its average
  bool updated_in_buckets = false;      // this capture updated every bucket on the side stream
  std::optional<c10::cuda::CUDAStream> capture_stream, comm_stream;
  std::vector<cudaEvent_t> forks;
  cudaEvent_t join = nullptr;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // keep the hooks alive
  std::vector<at::Tensor> copied;  // gradients copied into a flat bucket: the graph still writes them
#ifdef TRAIN_HAVE_FUSED_CUDA
  std::unique_ptr<PeerReduce> peer;  // buckets with a peer_slot go through it
#endif

  ~GraphReducer() {
    for (cudaEvent_t e : forks) (void)cudaEventDestroy(e);
    if (join != nullptr) (void)cudaEventDestroy(join);
  }

  void arm(const c10::cuda::CUDAStream& stream) {
    capture_stream = stream;
    for (Bucket& b : buckets) b.pending = b.params.size();
    ready.assign(params.size(), false);
    next_launch = 0;
    copied.clear();
    updated_in_buckets = adadelta != nullptr;
    armed = true;
  }

  void mark_ready(size_t i) {
    if (!armed || ready[i]) return;
    ready[i] = true;
    if (--buckets[bucket_of[i]].pending != 0) return;
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) launch(next_launch++);
  }

  void check(ncclResult_t r, size_t k) const {
    TORCH_CHECK(r == ncclSuccess, "NCCL all-reduce of gradient bucket ", k, " failed: ", nccl->error_string(r));
  }

  at::Tensor dense_grad(size_t i) const {
    const at::Tensor& g = params[i].grad();
    TORCH_CHECK(g.defined() && g.scalar_type() == at::kFloat && g.is_non_overlapping_and_dense() &&
                    g.device() == params[i].device(),
                "the gradient of ", names[i], " is not a dense float32 tensor on its parameter's device");
    return g;
  }

  void launch(size_t k) {
    const Bucket& b = buckets[k];
    std::vector<at::Tensor> grads;
    for (size_t i : b.params) grads.push_back(dense_grad(i));
    C10_CUDA_CHECK(cudaEventRecord(forks[k], capture_stream->stream()));
    C10_CUDA_CHECK(cudaStreamWaitEvent(comm_stream->stream(), forks[k], 0));
    c10::cuda::CUDAStreamGuard on_side(*comm_stream);
    if (b.peer_slot >= 0) {
      const bool updated = average_peer(b, grads);
      grads.clear();
      if (updated) return;
    } else if (b.flat.defined()) {
      // One copy kernel in, one message; the gradients become views of the averaged buffer
      // (laid out like their parameters), which the update and later replays read.
      std::vector<at::Tensor> pieces;
      for (const at::Tensor& g : grads) pieces.push_back(g.as_strided({g.numel()}, {1}));
      at::Tensor flat = b.flat;
      at::cat_out(flat, pieces);
      check(nccl->all_reduce(b.flat.data_ptr<float>(), b.flat.data_ptr<float>(), static_cast<size_t>(b.flat.numel()),
                             ncclFloat32, ncclAvg, comm, comm_stream->stream()),
            k);
      rebind_to_flat(b, grads);
      grads.clear();
    }
    if (!grads.empty()) check(nccl->group_start(), k);
    for (at::Tensor& g : grads) {
      const ncclResult_t r = nccl->all_reduce(g.data_ptr<float>(), g.data_ptr<float>(), static_cast<size_t>(g.numel()),
                                              ncclFloat32, ncclAvg, comm, comm_stream->stream());
      if (r != ncclSuccess) {
        (void)nccl->group_end();
        check(r, k);
      }
    }
    if (!grads.empty()) check(nccl->group_end(), k);
    if (!updated_in_buckets) return;
    std::vector<at::Tensor> updated;
    for (size_t i : b.params) updated.push_back(params[i]);
    if (adadelta->step_fused(updated)) return;
    // The first bucket decides; a later one can't: earlier buckets are already updated.
    TORCH_CHECK(k == 0, "the fused Adadelta update of gradient bucket ", k, " could not run");
    updated_in_buckets = false;
  }

  // The bucket's gradients become views of its averaged flat buffer (laid out like their
  // parameters), which the update and later replays read; the graph still writes the old ones.
  // (`keep`: the old gradients are a graph's, which still writes them.)
  void rebind_to_flat(const Bucket& b, const std::vector<at::Tensor>& grads, bool keep = true) {
    int64_t offset = 0;
    for (size_t j = 0; j < b.params.size(); ++j) {
      at::Tensor& q = params[b.params[j]];
      if (keep) copied.push_back(grads[j]);
      q.mutable_grad() = b.flat.narrow(0, offset, grads[j].numel()).as_strided(grads[j].sizes(), grads[j].strides());
      offset += grads[j].numel();
    }
  }

#ifdef TRAIN_HAVE_FUSED_CUDA
  // The peer kernel's inputs: the gradients themselves, or (more than it takes) their copy in
  // the bucket's flat buffer.
  static std::vector<PeerInput> peer_inputs(const Bucket& b, const std::vector<at::Tensor>& grads) {
    std::vector<PeerInput> inputs;
    if (grads.size() > static_cast<size_t>(kPeerMaxInputs)) {
      std::vector<at::Tensor> pieces;
      for (const at::Tensor& g : grads) pieces.push_back(g.as_strided({g.numel()}, {1}));
      at::Tensor flat = b.flat;
      at::cat_out(flat, pieces);
      inputs.push_back({b.flat.data_ptr<float>(), b.flat.numel()});
    } else {
      for (const at::Tensor& g : grads) inputs.push_back({g.data_ptr<float>(), g.numel()});
    }
    return inputs;
  }

  // Where the average goes: the flat buffer (several gradients) or the one gradient itself.
  static float* peer_out(const Bucket& b, const std::vector<at::Tensor>& grads) {
    return b.flat.defined() ? b.flat.data_ptr<float>() : grads.front().data_ptr<float>();
  }
#endif

  // One kernel reads the bucket's gradients, exchanges them with the other GPUs through their
  // mapped memory and writes the average: into the gradient itself (one tensor) or the flat
  // buffer the gradients then view. Where the buckets update themselves, the same kernel applies
  // the fused Adadelta update with the average (true: updated).
  bool average_peer(const Bucket& b, const std::vector<at::Tensor>& grads) {
#ifdef TRAIN_HAVE_FUSED_CUDA
    const std::vector<PeerInput> inputs = peer_inputs(b, grads);
    float* out = peer_out(b, grads);
    if (b.flat.defined()) rebind_to_flat(b, grads);
    bool updated = false;
    // A small bucket's update rides along (one launch less where nothing hides it); a large
    // one's takes the whole GPU in its own kernel instead of holding up the later buckets'
    // averages on the side stream.
    int64_t numel = 0;
    for (const PeerInput& in : inputs) numel += in.numel;
    if (updated_in_buckets && inputs.size() == b.params.size() && numel * 4 <= kFlatBucketBytes) {
      std::vector<at::Tensor> bucket_params;
      for (size_t i : b.params) bucket_params.push_back(params[i]);
      updated = adadelta->step_fused(bucket_params, [&](const AdadeltaFusedTensor* t, int n, const AdadeltaFusedOptions& o) {
        TORCH_CHECK(static_cast<size_t>(n) == inputs.size(), "the fused update covers ", n, " of ", inputs.size(),
                    " gradients of a bucket");
        peer->average(b.peer_slot, b.peer_offset, inputs, out, comm_stream->stream(), t, &o);
      });
    }
    if (!updated) peer->average(b.peer_slot, b.peer_offset, inputs, out, comm_stream->stream());
    return updated;
#else
    (void)b, (void)grads;
    TORCH_CHECK(false, "no peer all-reduce in this build");
    return false;
#endif
  }

  bool all_peer() const {
    return std::all_of(buckets.begin(), buckets.end(), [](const Bucket& b) { return b.peer_slot >= 0; });
  }

  // An eager step's average (the epoch's last, smaller batch): every bucket through the peer
  // all-reduce on the current stream, in bucket order on every rank, like a replay's.
  void average_eager() {
#ifdef TRAIN_HAVE_FUSED_CUDA
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    for (const Bucket& b : buckets) {
      std::vector<at::Tensor> grads;
      for (size_t i : b.params) grads.push_back(dense_grad(i));
      peer->average(b.peer_slot, b.peer_offset, peer_inputs(b, grads), peer_out(b, grads), stream);
      if (b.flat.defined()) rebind_to_flat(b, grads, /*keep=*/false);
    }
#endif
  }

  // After the captured backward: every bucket launched, the side stream joined.
  void finish() {
    armed = false;
    if (next_launch != buckets.size()) {
      std::string missing;
      for (size_t i = 0; i < ready.size(); ++i) {
        if (!ready[i]) missing += (missing.empty() ? "" : ", ") + names[i];
      }
      TORCH_CHECK(false, "no gradient for ", missing, " in the captured backward");
    }
    C10_CUDA_CHECK(cudaEventRecord(join, comm_stream->stream()));
    C10_CUDA_CHECK(cudaStreamWaitEvent(capture_stream->stream(), join, 0));
  }
};

class ReducerHook : public torch::autograd::FunctionPostHook {
 public:
  ReducerHook(std::weak_ptr<GraphReducer> reducer, size_t index) : reducer_(std::move(reducer)), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    if (auto r = reducer_.lock()) r->mark_ready(index_);
    return outputs;
  }

 private:
  std::weak_ptr<GraphReducer> reducer_;
  size_t index_;
};
#endif

class CudaGraphStep : public TrainStep {
 public:
  CudaGraphStep(const StepParts& parts, int64_t batch, int warmup)
      : parts_(parts), batch_(batch), warmup_(warmup), eager_(parts), gather_in_graph_(parts.data->capturable()) {}

  at::Tensor run(const at::Tensor& order, int64_t start, int64_t len) override {
    if (len != batch_ || failed_) {
      // The epoch's last, smaller batch runs eagerly, in gradients of its own; the graphs keep
      // using theirs.
      release_grads();
#ifdef TRAIN_HAVE_NCCL
      // Where the graph averages through the GPUs' peer memory, so does this step (DDP's own
      // all-reduce would go through the process group, which may be Gloo).
      if (!failed_ && graph_ && reducer_ && reducer_->all_peer()) return eager_peer_step(order, start, len);
#endif
      return eager_.run(order, start, len);
    }
    if (!graph_ && eager_steps_ < warmup_) {
      // Warm-up on the stream the capture will use (the Trainer made a non-default stream current
      // for the whole run), so what it sets up lazily (cuBLAS workspaces, NCCL communicators,
      // optimizer state) exists before the capture starts.
      ++eager_steps_;
      return eager_.run(order, start, len);
    }
    bool captured_now = false;
    if (!graph_) {
      if (!capture_all(order, start)) {
        // This step's batch was already drawn for the capture: train on it, not on a new draw.
        return gather_in_graph_ || !inputs_.inputs.defined() ? eager_.run(order, start, len) : step_on(parts_, inputs_);
      }
      captured_now = true;
    }
    if (gather_in_graph_) {
      indices_.copy_(order.narrow(0, start, batch_), /*non_blocking=*/true);
    } else if (!captured_now) {
      // A dataset the graph can't capture (random augmentation, host state) gathers eagerly
      // into the graph's fixed inputs.
      const Batch b = parts_.data->get_batch(order.narrow(0, start, batch_));
      inputs_.inputs.copy_(b.inputs, /*non_blocking=*/true);
      inputs_.targets.copy_(b.targets, /*non_blocking=*/true);
    }
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
    std::string ranks;
    if (parts_.world_size > 1) {
      ranks = parts_.graph_allreduce == "in-graph" ? ", gradients averaged inside the graph"
                                                   : ", one eager all-reduce between two graphs";
    }
    return std::string("CUDA graph (batch ") + std::to_string(batch_) + ", " + std::to_string(warmup_) +
           " eager warm-up steps" + (parts_.bf16 ? ", bf16 autocast" : "") + ranks +
           (gather_in_graph_ ? "" : ", batches gathered outside the graph") + ")";
  }

 private:
  // Captures the step (graph_, and update_ for "between"); with several ranks, all of them agree
  // that every capture worked. False: the step runs eagerly from now on, on every rank (a rank
  // replaying NCCL calls that another rank makes eagerly would pair different collectives).
  bool capture_all(const at::Tensor& order, int64_t start) {
    std::string error;
    try {
      prepare_capture(order, start);
      if (parts_.ddp == nullptr) {
        capture();
      } else if (parts_.world_size == 1) {
        // DDP over one rank (--ddp-single-rank): the average is the gradient itself, so the
        // captured step is the plain one.
        DistributedDataParallel::NoSync no_sync(*parts_.ddp);
        capture();
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
      at::Tensor failed = at::full({1}, error.empty() ? 0.0 : 1.0, order.options().dtype(at::kFloat));
      parts_.process_group->allreduce_sum(failed);
      if (failed.item<float>() > 0 && error.empty()) error = "another rank could not capture its step";
    }
    if (error.empty()) return true;
    // Something in the step can't be captured: say so once and train eagerly.
    failed_ = true;
    update_.reset();
    graph_.reset();
    release_grads();
    log::warn("--cuda-graph: capturing the step failed (" + error +
              "); the step runs eagerly from now on. Hint: --cuda-graph off skips the attempt.");
    return false;
  }

  // The indices of the step about to be captured in their fixed tensor, and the device idle.
  // Capture runs on the current stream (never the legacy default stream: the Trainer made a pool
  // stream current).
  void prepare_capture(const at::Tensor& order, int64_t start) {
    if (!indices_.defined()) indices_ = at::empty({batch_}, order.options());
    indices_.copy_(order.narrow(0, start, batch_));
    if (!gather_in_graph_) {
      const Batch b = parts_.data->get_batch(indices_);
      inputs_ = {b.inputs.clone(), b.targets.clone()};  // fixed addresses, outside the graph's pool
    }
    c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
    TORCH_CHECK(stream != c10::cuda::getDefaultCUDAStream(stream.device_index()),
                "the current stream is the default stream, which can't be captured");
    stream.synchronize();
  }

  // The captured step's batch: gathered inside the graph from indices_, or the fixed inputs.
  Batch graph_batch() { return gather_in_graph_ ? parts_.data->get_batch(indices_) : inputs_; }

  // One rank: the whole step, gradients created inside the graph's pool.
  void capture() {
    parts_.optimizer->zero_grad();
    graph_ = std::make_unique<at::cuda::CUDAGraph>();
    graph_->capture_begin();
    try {
      loss_ = step_on(parts_, graph_batch());
    } catch (...) {
      abandon_capture(*graph_);
      throw;
    }
    graph_->capture_end();
  }

  // The trainable parameters, last layer first: the order their gradients are done in.
  // (DDP's bucket order too.) With `names`, also their names.
  std::vector<at::Tensor> params_last_first(std::vector<std::string>* names = nullptr) const {
    std::vector<at::Tensor> params;
    for (auto& item : parts_.model->module->named_parameters()) {
      if (!item.value().requires_grad()) continue;
      params.push_back(item.value());
      if (names != nullptr) names->push_back(item.key());
    }
    std::reverse(params.begin(), params.end());
    if (names != nullptr) std::reverse(names->begin(), names->end());
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

#ifdef TRAIN_HAVE_NCCL
  bool use_in_graph() {
    if (parts_.graph_allreduce != "in-graph") return false;
    if (!reducer_) reducer_ = make_reducer();
    return reducer_ != nullptr;
  }

  at::Tensor eager_peer_step(const at::Tensor& order, int64_t start, int64_t len) {
    parts_.optimizer->zero_grad();
    const Batch b = parts_.data->get_batch(order.narrow(0, start, len));
    at::Tensor loss;
    {
      DistributedDataParallel::NoSync no_sync(*parts_.ddp);
      loss = forward_backward(parts_, b);
    }
    reducer_->average_eager();
    parts_.optimizer->step();
    return loss;
  }

  // DDP's buckets (the same parameters in the same order), hooks on the parameters' gradient
  // accumulators, the side stream and events. Null, with the reason logged, where NCCL's
  // communicator or calls can't be reached.
  std::shared_ptr<GraphReducer> make_reducer() {
    auto r = std::make_shared<GraphReducer>();
    r->nccl = nccl_calls();
    r->comm = static_cast<ncclComm_t>(parts_.process_group->impl().nccl_comm());
    r->params = params_last_first(&r->names);
    TORCH_CHECK(!r->params.empty(), "the model has no trainable parameters");
    std::vector<size_t> counts = parts_.ddp->bucket_param_counts();
    if (peer_wanted()) split_first_module(counts, r->names);
    size_t covered = 0;
    for (const size_t count : counts) covered += count;
    TORCH_CHECK(covered == r->params.size(), "DDP's buckets hold ", covered, " parameters, the model trains ",
                r->params.size());
    for (const size_t count : counts) {
      GraphReducer::Bucket b;
      int64_t numel = 0;
      for (size_t j = 0; j < count; ++j) {
        numel += r->params[r->bucket_of.size()].numel();
        b.params.push_back(r->bucket_of.size());
        r->bucket_of.push_back(r->buckets.size());
      }
      if (count > 1 && numel * 4 <= GraphReducer::kFlatBucketBytes) {
        b.flat = at::empty({numel}, r->params.front().options().dtype(at::kFloat).requires_grad(false));
      }
      r->buckets.push_back(std::move(b));
    }
    setup_peer(*r);
    if (!r->all_peer() && (r->nccl == nullptr || r->comm == nullptr)) {
      log::warn(std::string("--graph-allreduce in-graph: ") +
                (r->nccl == nullptr ? "NCCL's calls aren't loaded" : "no NCCL communicator (backend isn't NCCL)") +
                " and no peer all-reduce for every bucket; falling back to one eager all-reduce between two graphs"
                " (slower). Hint: --backend nccl averages inside the graph with NCCL.");
      return nullptr;
    }
    r->adadelta = dynamic_cast<optim::Adadelta*>(parts_.optimizer);
    r->comm_stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, r->params.front().device().index());
    r->forks.resize(r->buckets.size(), nullptr);
    for (cudaEvent_t& e : r->forks) C10_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&r->join, cudaEventDisableTiming));
    std::weak_ptr<GraphReducer> weak = r;
    for (size_t k = 0; k < r->params.size(); ++k) {
      auto acc = torch::autograd::impl::grad_accumulator(r->params[k]);
      acc->add_post_hook(std::make_unique<ReducerHook>(weak, k));
      r->accumulators.push_back(std::move(acc));
    }
    log::debug("--graph-allreduce in-graph: " + std::to_string(r->buckets.size()) + " gradient buckets");
    return r;
  }

  // The last bucket's average is the one nothing overlaps: it waits for the first module's
  // gradients, the last ones the backward makes. Where buckets are cheap (the peer all-reduce),
  // that module gets a bucket of its own, so the rest of the last bucket is averaged while the
  // first module's backward still runs. `names` are last layer first; every rank splits alike.
  static void split_first_module(std::vector<size_t>& counts, const std::vector<std::string>& names) {
    if (counts.empty() || names.empty()) return;
    auto module_of = [](const std::string& name) {
      const size_t dot = name.rfind('.');
      return dot == std::string::npos ? std::string() : name.substr(0, dot);
    };
    const std::string first = module_of(names.back());
    size_t m = 0;
    while (m < names.size() && module_of(names[names.size() - 1 - m]) == first) ++m;
    if (m == 0 || m >= counts.back()) return;
    counts.back() -= m;
    counts.push_back(m);
  }

  // auto: the two-GPU case, measured; on: up to kPeerMaxRanks GPUs of one machine.
  bool peer_wanted() const {
#ifdef TRAIN_HAVE_FUSED_CUDA
    const bool asked = parts_.peer_allreduce == "on" || (parts_.peer_allreduce == "auto" && parts_.world_size == 2);
    return asked && parts_.world_size <= kPeerMaxRanks;
#else
    return false;
#endif
  }

  // --peer-allreduce auto: the buckets whose one-shot exchange (each rank reads every other's
  // message) stays small go through the GPUs' peer memory when every rank is on this machine;
  // without an NCCL communicator (the Gloo group --backend auto takes for two such GPUs) every
  // bucket does, whatever its size. Collective: every rank decides the same from the same buckets.
  void setup_peer(GraphReducer& r) {
#ifdef TRAIN_HAVE_FUSED_CUDA
    if (!peer_wanted()) return;
    const int64_t max_bytes = r.comm != nullptr ? GraphReducer::kPeerMaxBytes : std::numeric_limits<int64_t>::max();
    size_t capacity = 0;
    int slots = 0;
    int64_t bytes = 0;
    std::vector<GraphReducer::Bucket*> peer_flat;  // flat buffers only the peer path needs
    for (GraphReducer::Bucket& b : r.buckets) {
      int64_t numel = 0;
      for (size_t i : b.params) numel += r.params[i].numel();
      if (numel * 4 * (parts_.world_size - 1) > max_bytes) continue;
      b.peer_slot = slots++;
      b.peer_offset = capacity;
      capacity += (static_cast<size_t>(numel) + 63) / 64 * 64;
      bytes += numel * 4;
      if (b.params.size() > 1 && !b.flat.defined()) {
        b.flat = at::empty({numel}, r.params.front().options().dtype(at::kFloat).requires_grad(false));
        peer_flat.push_back(&b);
      }
    }
    if (slots == 0) return;
    std::string why;
    r.peer = PeerReduce::create(parts_.process_group->impl(), slots, capacity, &why);
    if (!r.peer) {
      for (GraphReducer::Bucket& b : r.buckets) b.peer_slot = -1;
      for (GraphReducer::Bucket* b : peer_flat) b->flat = at::Tensor();  // NCCL sends large buckets as they are
      log::info("--peer-allreduce " + parts_.peer_allreduce + ": no peer all-reduce (" + why + ")");
      return;
    }
    log::info("--peer-allreduce " + parts_.peer_allreduce + ": " + std::to_string(slots) + " of " + std::to_string(r.buckets.size()) +
              " gradient buckets (" + std::to_string(bytes) + " bytes) averaged through the GPUs' peer memory" +
              (static_cast<size_t>(slots) < r.buckets.size() ? ", NCCL for the rest" : ""));
#else
    (void)r;
#endif
  }

  // Several ranks, one graph: forward and backward into fresh gradients (autograd's own, in the
  // graph's pool), the buckets' NCCL averages (and updates) launched from the hooks, join, and
  // the update where the buckets didn't do it.
  void capture_in_graph() {
    release_grads();
    parts_.optimizer->zero_grad();
    c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
    graph_ = std::make_unique<at::cuda::CUDAGraph>();
    DistributedDataParallel::NoSync no_sync(*parts_.ddp);
    // Thread-local capture: c10d's watchdog thread keeps polling earlier collectives' events.
    graph_->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      reducer_->arm(stream);
      loss_ = forward_backward(parts_, graph_batch());
      reducer_->finish();
      if (!reducer_->updated_in_buckets) parts_.optimizer->step();
    } catch (...) {
      reducer_->armed = false;
      abandon_capture(*graph_);
      throw;
    }
    graph_->capture_end();
  }
#else
  bool use_in_graph() { return false; }
  void capture_in_graph() {}
#endif

  // Several ranks, two graphs ("between"): graph_ computes the gradients (DDP's hooks off), the
  // eager all-reduce between the replays sums them, update_ averages and applies them.
  void capture_split() {
    bind_flat_grads();
    graph_ = std::make_unique<at::cuda::CUDAGraph>();
    {
      DistributedDataParallel::NoSync no_sync(*parts_.ddp);
      graph_->capture_begin();
      try {
        flat_grads_.zero_();  // the gradients stay views of the flat buffer
        loss_ = forward_backward(parts_, graph_batch());
      } catch (...) {
        abandon_capture(*graph_);
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
      throw;
    }
    update_->capture_end();
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
  std::unique_ptr<at::cuda::CUDAGraph> update_;  // "between": the update after the all-reduce
  at::Tensor flat_grads_;
  bool failed_ = false;
  bool gather_in_graph_;  // the dataset is capturable: the graph gathers the batch itself
  at::Tensor indices_;    // this step's sample indices: the graph's input when it gathers
  Batch inputs_;          // else the graph's fixed inputs
  at::Tensor loss_;     // the graph's output
#ifdef TRAIN_HAVE_NCCL
  std::shared_ptr<GraphReducer> reducer_;
#endif
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

bool cuda_bf16_supported(const at::Device& device) {
#ifdef TRAIN_HAVE_CUDA
  return device.is_cuda() && at::cuda::getDeviceProperties(device.index())->major >= 8;
#else
  (void)device;
  return false;
#endif
}

bool cuda_peer_access(int device, int peer) {
#ifdef TRAIN_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || peer < 0 || device >= count || peer >= count ||
      device == peer) {
    (void)cudaGetLastError();
    return false;
  }
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, device, peer) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return can != 0;
#else
  (void)device, (void)peer;
  return false;
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
