// DistributedDataParallel on c10d's Backend: our own bucketed reducer driven by AccumulateGrad
// post-hooks (docs/design.md says why we don't use c10d::Reducer).
#include "train/ddp.h"

#include "process_group_impl.h"
#include "train/error.h"
#include "train/log.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <map>
#include <mutex>

namespace train {

struct DistributedDataParallel::State {
  struct Bucket {
    at::Tensor flat;                 // fixed buffer the all-reduce works on
    std::vector<size_t> params;      // indices into State::params
    std::vector<at::Tensor> views;   // views of flat, shaped like each param
    size_t pending = 0;              // gradients still missing in this backward
    c10::intrusive_ptr<c10d::Work> work;
    // Shared-memory path: flat lives in this rank's slot at shm_offset; the sum appears in
    // result_views (the same place in the shared result region).
    size_t shm_offset = 0;
    std::vector<at::Tensor> result_views;
  };
  struct Slot {
    size_t bucket = 0;
    size_t index_in_bucket = 0;
    bool ready = false;
  };

  detail::ProcessGroupImpl* pg = nullptr;
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // keeps the hooks alive
  std::vector<Slot> slots;
  // Declared before the buckets: their flat buffers may live in its mapping.
  std::unique_ptr<detail::ShmGroup> shm;
  std::vector<Bucket> buckets;
  at::Tensor scale;  // 0-dim CPU tensor 1/world: a wrapped scalar for any device
  std::mutex mu;
  bool sync_enabled = true;
  bool in_backward = false;
  size_t next_launch = 0;
  std::string error;  // first failure seen in a hook, rethrown from the final callback

  void reset_for_backward() {
    for (auto& b : buckets) {
      b.pending = b.params.size();
      b.work.reset();
    }
    for (auto& s : slots) s.ready = false;
    next_launch = 0;
  }

  void launch_ready_buckets() {
    if (shm) return;  // summed synchronously in finalize(): no background thread competes for cores
    // Buckets are launched in bucket order on every rank, never in ready order: c10d matches
    // collectives by sequence, so a different order would pair up different buckets.
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      Bucket& b = buckets[next_launch];
      std::vector<at::Tensor> v{b.flat};
      c10d::AllreduceOptions o;
      o.reduceOp = c10d::ReduceOp::SUM;
      o.timeout = pg->timeout;
      pg->guarded("DDP gradient allreduce (bucket " + std::to_string(next_launch) + ")",
                  [&] { b.work = pg->pg->allreduce(v, o); });
      ++next_launch;
    }
  }

  void mark_ready(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    if (!sync_enabled) return;
    if (!in_backward) {
      in_backward = true;
      reset_for_backward();
      std::weak_ptr<State> weak = self;
      torch::autograd::Engine::get_default_engine().queue_callback([weak] {
        if (auto s = weak.lock()) s->finalize();
      });
    }
    Slot& slot = slots[i];
    if (slot.ready) return;  // a parameter used twice still reports once per backward
    slot.ready = true;
    Bucket& b = buckets[slot.bucket];
    at::Tensor& view = b.views[slot.index_in_bucket];
    const at::Tensor& grad = params[i].grad();
    if (grad.defined()) {
      at::mul_out(view, grad, scale);
    } else {
      view.zero_();
    }
    --b.pending;
    if (b.pending == 0) launch_ready_buckets();
  }

  void finalize() {
    std::lock_guard<std::mutex> lock(mu);
    in_backward = false;
    std::string missing;
    for (size_t i = 0; i < slots.size(); ++i) {
      if (!slots[i].ready) missing += (missing.empty() ? "" : ", ") + names[i];
    }
    if (!missing.empty()) {
      // Launching what is ready would pair our buckets with other ranks' different ones.
      throw ConfigError(
          "DistributedDataParallel: expected a gradient for every parameter in each backward, "
          "found none for: " + missing + ".",
          "every parameter that requires grad must take part in the loss on every rank; freeze "
          "unused parameters with requires_grad(false).");
    }
    for (size_t k = 0; k < buckets.size(); ++k) {
      Bucket& b = buckets[k];
      const std::string op = "DDP gradient allreduce (bucket " + std::to_string(k) + ")";
      if (shm) {
        shm->allreduce_sum(b.shm_offset, static_cast<size_t>(b.flat.numel()),
                           *detail::shm_dtype_of(b.flat.scalar_type()), op);
      } else {
        pg->wait(b.work, op);
        b.work.reset();
      }
      const std::vector<at::Tensor>& summed = shm ? b.result_views : b.views;
      for (size_t j = 0; j < b.params.size(); ++j) {
        at::Tensor& p = params[b.params[j]];
        if (p.grad().defined()) {
          p.mutable_grad().copy_(summed[j]);
        } else {
          p.mutable_grad() = summed[j].clone();
        }
      }
    }
  }

  std::weak_ptr<State> self;

  // Set-up, in the constructor's order.
  struct Group {
    std::vector<size_t> params;  // indices into params
    at::ScalarType type;
  };
  void collect_params(torch::nn::Module& module);
  std::vector<Group> plan_buckets(const DdpOptions& options) const;
  void build_buckets(const std::vector<Group>& groups, const DdpOptions& options, ProcessGroup& process_group);
};

namespace {

class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(std::weak_ptr<DistributedDataParallel::State> state, size_t index)
      : state_(std::move(state)), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    if (auto s = state_.lock()) s->mark_ready(index_);
    return outputs;
  }

 private:
  std::weak_ptr<DistributedDataParallel::State> state_;
  size_t index_;
};

}  // namespace

// The trainable parameters, with their names, all on one device.
void DistributedDataParallel::State::collect_params(torch::nn::Module& module) {
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    params.push_back(item.value());
    names.push_back(item.key());
  }
  if (params.empty()) {
    throw ConfigError("DistributedDataParallel: expected a module with trainable parameters, found none.",
                      "check that the model registers its layers with register_module().");
  }
  const auto device = params.front().device();
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].device() != device) {
      throw ConfigError("DistributedDataParallel: expected every parameter on " + device.str() +
                            ", found " + names[i] + " on " + params[i].device().str() + ".",
                        "move the whole model with model->to(device) before wrapping it.");
    }
  }
}

// Buckets in reverse registration order, split by dtype; the first is capped small.
std::vector<DistributedDataParallel::State::Group> DistributedDataParallel::State::plan_buckets(
    const DdpOptions& options) const {
  std::vector<Group> groups;
  size_t open = SIZE_MAX, open_bytes = 0;
  for (size_t k = params.size(); k-- > 0;) {
    const at::Tensor& p = params[k];
    if (open == SIZE_MAX || groups[open].type != p.scalar_type()) {
      groups.push_back({{}, p.scalar_type()});
      open = groups.size() - 1;
      open_bytes = 0;
    }
    groups[open].params.push_back(k);
    open_bytes += p.numel() * p.element_size();
    const double cap = (groups.size() == 1 ? options.first_bucket_cap_mb : options.bucket_cap_mb) *
                       1024.0 * 1024.0;
    if (open_bytes >= cap) open = SIZE_MAX;
  }
  return groups;
}

// Each bucket's flat buffer and the parameters' views of it. CPU float/double gradients of ranks
// that share one machine are summed through shared memory: the buckets' flat buffers live in
// this rank's slot of the segment. (Floating-point gradients only: an integer parameter can't
// require grad.)
void DistributedDataParallel::State::build_buckets(const std::vector<Group>& groups, const DdpOptions& options,
                                                   ProcessGroup& process_group) {
  slots.resize(params.size());
  std::vector<size_t> offsets;
  std::vector<int64_t> numels;
  size_t shm_bytes = 0;
  bool shm_dtypes = params.front().device().is_cpu();
  for (const Group& g : groups) {
    int64_t numel = 0;
    for (size_t k : g.params) numel += params[k].numel();
    numels.push_back(numel);
    if (!detail::shm_dtype_of(g.type)) shm_dtypes = false;
    offsets.push_back(shm_bytes);
    shm_bytes += (static_cast<size_t>(numel) * c10::elementSize(g.type) + 63) / 64 * 64;
  }
  if (shm_dtypes && options.shared_memory && process_group.backend() == Backend::gloo && process_group.size() > 1) {
    std::string why;
    shm = pg->create_shm_group(shm_bytes, &why);
    if (shm) {
      log::debug("DDP: gradients are summed in shared memory (" + std::to_string(shm_bytes >> 10) +
                 " KiB per rank)");
    } else {
      log::debug("DDP: Gloo sums the gradients (" + why + ")");
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    Bucket b;
    const int64_t numel = numels[g];
    const auto opts = params[groups[g].params.front()].options().requires_grad(false);
    at::Tensor result;
    if (shm) {
      b.shm_offset = offsets[g];
      b.flat = at::from_blob(static_cast<char*>(shm->slot()) + offsets[g], {numel}, opts);
      b.flat.zero_();
      result = at::from_blob(const_cast<char*>(static_cast<const char*>(shm->result())) + offsets[g],
                             {numel}, opts);
    } else {
      b.flat = at::zeros({numel}, opts);
    }
    int64_t off = 0;
    for (size_t j = 0; j < groups[g].params.size(); ++j) {
      size_t k = groups[g].params[j];
      b.params.push_back(k);
      b.views.push_back(b.flat.narrow(0, off, params[k].numel()).view(params[k].sizes()));
      if (shm) b.result_views.push_back(result.narrow(0, off, params[k].numel()).view(params[k].sizes()));
      off += params[k].numel();
      slots[k].bucket = g;
      slots[k].index_in_bucket = j;
    }
    buckets.push_back(std::move(b));
  }
}

void broadcast_module(torch::nn::Module& module, ProcessGroup& process_group, int root) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> tensors;
  for (auto& p : module.parameters()) tensors.push_back(p);
  for (auto& b : module.buffers()) tensors.push_back(b);
  if (tensors.empty()) return;
  // One flat broadcast per dtype instead of one per tensor.
  std::map<at::ScalarType, std::vector<at::Tensor>> by_type;
  for (auto& t : tensors) by_type[t.scalar_type()].push_back(t);
  for (auto& [type, group] : by_type) {
    std::vector<at::Tensor> flat_parts;
    for (auto& t : group) flat_parts.push_back(t.reshape({-1}));
    at::Tensor flat = at::cat(flat_parts);
    process_group.broadcast(flat, root);
    int64_t off = 0;
    for (auto& t : group) {
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  }
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> process_group,
                                                 DdpOptions options)
    : module_(std::move(module)), pg_(std::move(process_group)), state_(std::make_shared<State>()) {
  if (!module_ || !pg_) {
    throw ConfigError("DistributedDataParallel: expected a module and a process group, found null.",
                      "create the model and the ProcessGroup first.");
  }
  if (options.bucket_cap_mb <= 0 || options.first_bucket_cap_mb <= 0) {
    throw ConfigError("--bucket-cap-mb: expected a positive size in MB, found " +
                          std::to_string(options.bucket_cap_mb) + ".",
                      "the default is 25.");
  }
  State& s = *state_;
  s.self = state_;
  s.pg = &pg_->impl();
  s.scale = at::scalar_tensor(1.0 / pg_->size(), at::TensorOptions().dtype(at::kDouble));
  s.scale.unsafeGetTensorImpl()->set_wrapped_number(true);
  s.collect_params(*module_);
  if (options.broadcast_at_start) broadcast_module(*module_, *pg_, 0);
  s.build_buckets(s.plan_buckets(options), options, *pg_);
  s.reset_for_backward();
  for (size_t i = 0; i < s.params.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(s.params[i]);
    acc->add_post_hook(std::make_unique<ReadyHook>(state_, i));
    s.accumulators.push_back(std::move(acc));
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  // The hooks hold weak pointers, so they turn into no-ops once state_ is gone; the
  // accumulators (and their hooks) are released with it.
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp) {
  std::lock_guard<std::mutex> lock(ddp_.state_->mu);
  previous_ = ddp_.state_->sync_enabled;
  ddp_.state_->sync_enabled = false;
}

DistributedDataParallel::NoSync::~NoSync() {
  std::lock_guard<std::mutex> lock(ddp_.state_->mu);
  ddp_.state_->sync_enabled = previous_;
}

std::vector<size_t> DistributedDataParallel::bucket_param_counts() const {
  std::vector<size_t> out;
  for (const auto& b : state_->buckets) out.push_back(b.params.size());
  return out;
}

std::vector<size_t> DistributedDataParallel::bucket_bytes() const {
  std::vector<size_t> out;
  for (const auto& b : state_->buckets) out.push_back(b.flat.numel() * b.flat.element_size());
  return out;
}

}  // namespace train
