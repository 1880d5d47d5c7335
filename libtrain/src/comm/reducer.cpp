// The reducer's bucketing and its bookkeeping of one backward: which gradients are done, which
// buckets were launched, and the end of the backward (reducer.h says what it promises).
#include "comm/reducer.h"

#include "train/base/error.h"
#include "optim/unique_params.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>

#include <cstdint>

namespace train {
namespace {

class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(Reducer* reducer, std::weak_ptr<bool> alive, size_t index)
      : reducer_(reducer), alive_(std::move(alive)), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    if (!alive_.expired()) reducer_->mark_ready(index_);
    return outputs;
  }

 private:
  Reducer* reducer_;
  std::weak_ptr<bool> alive_;  // the hooks outlive the reducer on the accumulators they sit on
  size_t index_;
};

// The module a parameter belongs to ("conv1" for "conv1.weight").
std::string module_of(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

}  // namespace

Reducer::Reducer(torch::nn::Module& module, const BucketOptions& options) : alive_(std::make_shared<bool>(true)) {
  if (options.cap_mb <= 0 || options.first_cap_mb <= 0) {
    throw ConfigError("--bucket-cap-mb: expected a positive size in MB, found " + std::to_string(options.cap_mb) + ".",
                      "the default is 25.");
  }
  collect_params(module);
  plan_buckets(options);
  pending_.assign(buckets_.size(), 0);
  ready_.assign(params_.size(), false);
  hooks_.per_bucket.assign(buckets_.size(), nullptr);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    acc->add_post_hook(std::make_unique<ReadyHook>(this, alive_, i));
    accumulators_.push_back(std::move(acc));
  }
}

Reducer::~Reducer() {
  std::lock_guard<std::mutex> lock(mu_);
  alive_.reset();  // the hooks (and a queued engine callback) turn into no-ops
}

// The trainable parameters, with their names, all on one device.
void Reducer::collect_params(torch::nn::Module& module) {
  for (auto& [name, p] : detail::unique_named_parameters(module)) {
    if (!p.requires_grad()) continue;
    params_.push_back(p);
    names_.push_back(name);
  }
  if (params_.empty()) {
    throw ConfigError("DistributedDataParallel: expected a module with trainable parameters, found none.",
                      "check that the model registers its layers with register_module().");
  }
  const auto device = params_.front().device();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].device() != device) {
      throw ConfigError("DistributedDataParallel: expected every parameter on " + device.str() + ", found " +
                            names_[i] + " on " + params_[i].device().str() + ".",
                        "move the whole model with model->to(device) before wrapping it.");
    }
  }
}

// Buckets in reverse registration order (the order the backward finishes the gradients), split
// by dtype; the first is capped small. Optionally the first module's parameters close the last
// bucket as a bucket of their own.
void Reducer::plan_buckets(const BucketOptions& options) {
  size_t open_bytes = 0;
  bool open = false;
  for (size_t k = params_.size(); k-- > 0;) {
    const at::Tensor& p = params_[k];
    if (!open || buckets_.back().dtype != p.scalar_type()) {
      buckets_.push_back({{}, p.scalar_type(), 0});
      open = true;
      open_bytes = 0;
    }
    buckets_.back().params.push_back(k);
    buckets_.back().numel += p.numel();
    open_bytes += p.numel() * p.element_size();
    const double cap = (buckets_.size() == 1 ? options.first_cap_mb : options.cap_mb) * 1024.0 * 1024.0;
    if (static_cast<double>(open_bytes) >= cap) open = false;
  }
  if (options.split_first_module) {
    GradBucket& last = buckets_.back();
    const std::string first = module_of(names_[last.params.back()]);
    size_t m = 0;
    while (m < last.params.size() && module_of(names_[last.params[last.params.size() - 1 - m]]) == first) ++m;
    if (m > 0 && m < last.params.size()) {
      GradBucket split{{}, last.dtype, 0};
      for (size_t j = last.params.size() - m; j < last.params.size(); ++j) {
        split.params.push_back(last.params[j]);
        split.numel += params_[last.params[j]].numel();
      }
      last.params.resize(last.params.size() - m);
      last.numel -= split.numel;
      buckets_.push_back(std::move(split));
    }
  }
  bucket_of_.assign(params_.size(), 0);
  index_in_bucket_.assign(params_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t j = 0; j < buckets_[b].params.size(); ++j) {
      bucket_of_[buckets_[b].params[j]] = b;
      index_in_bucket_[buckets_[b].params[j]] = j;
    }
  }
}

Reducer::Hooks Reducer::set_hooks(Hooks hooks) {
  TORCH_CHECK(hooks.per_bucket.size() == buckets_.size(), "expected a hook for each of the ", buckets_.size(),
              " gradient buckets, found ", hooks.per_bucket.size());
  std::lock_guard<std::mutex> lock(mu_);
  TORCH_CHECK(!in_backward_, "the reducer's hooks can't change during a backward");
  std::swap(hooks, hooks_);
  return hooks;
}

Reducer::Hooks Reducer::all_buckets(std::shared_ptr<CommHook> hook, bool manual) const {
  Hooks h;
  h.per_bucket.assign(buckets_.size(), std::move(hook));
  h.manual = manual;
  return h;
}

void Reducer::set_enabled(bool enabled) {
  std::lock_guard<std::mutex> lock(mu_);
  enabled_ = enabled;
}

bool Reducer::enabled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return enabled_;
}

void Reducer::start_backward() {
  in_backward_ = true;
  for (size_t k = 0; k < buckets_.size(); ++k) pending_[k] = buckets_[k].params.size();
  ready_.assign(params_.size(), false);
  next_launch_ = 0;
  if (hooks_.manual) return;
  std::weak_ptr<bool> alive = alive_;
  torch::autograd::Engine::get_default_engine().queue_callback([this, alive] {
    if (!alive.expired()) finalize(/*from_engine=*/true);
  });
}

void Reducer::mark_ready(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_ || hooks_.per_bucket.empty() || hooks_.per_bucket.front() == nullptr) return;
  if (!in_backward_) start_backward();
  if (ready_[i]) return;  // a parameter used twice still reports once per backward
  ready_[i] = true;
  const size_t k = bucket_of_[i];
  hooks_.per_bucket[k]->add(*this, k, i);
  if (--pending_[k] != 0) return;
  // Buckets are launched in bucket order on every rank, never in ready order: collectives are
  // matched by sequence, so a different order would pair up different buckets.
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) {
    hooks_.per_bucket[next_launch_]->launch(*this, next_launch_);
    ++next_launch_;
  }
}

std::string Reducer::missing_gradients() const {
  std::string missing;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!ready_[i]) missing += (missing.empty() ? "" : ", ") + names_[i];
  }
  return missing;
}

void Reducer::abandon_backward() {
  std::lock_guard<std::mutex> lock(mu_);
  in_backward_ = false;
}

void Reducer::finish() {
  TORCH_CHECK(hooks_.manual, "Reducer::finish() is for hooks installed as manual");
  finalize(/*from_engine=*/false);
}

void Reducer::finalize(bool from_engine) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!in_backward_) {
    // No gradient arrived at all (a manual backward that produced none).
    TORCH_CHECK(from_engine, "no gradient reached the reducer in this backward");
    return;
  }
  in_backward_ = false;
  const std::string missing = missing_gradients();
  if (!missing.empty()) {
    // Launching what is ready would pair our buckets with other ranks' different ones.
    const std::string what = "DistributedDataParallel: expected a gradient for every parameter in each backward, "
                             "found none for: " + missing + ".";
    if (!from_engine) TORCH_CHECK(false, what);
    throw ConfigError(what, "every parameter that requires grad must take part in the loss on every rank; freeze "
                            "unused parameters with requires_grad(false).");
  }
  for (size_t k = 0; k < buckets_.size(); ++k) hooks_.per_bucket[k]->finalize(*this, k);
}

}  // namespace train
