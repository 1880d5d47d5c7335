// Fused SGD, Adam and AdamW (train/fused_optim.h): the state and argument handling of
// torch/optim/sgd.py's and adam.py's fused paths, the arithmetic in ATen's kernels. On the CPU
// ATen's CPU fused kernels run with the rate as a number, as Python's do.
#include "train/fused_optim.h"

#include "optim/fused_adam_buckets.h"
#include "train/base/error.h"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_fused_sgd.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>
#include <torch/optim/serialize.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

namespace train::optim {
namespace {

[[noreturn]] void bad_option(const std::string& optimizer, const std::string& what, double found,
                             const std::string& expected) {
  throw ConfigError(optimizer + " " + what + ": expected " + expected + ", found " + std::to_string(found) + ".",
                    "check --lr and the optimizer's options (the same rules as torch.optim's).");
}

void check_adam_options(const std::string& name, double lr, std::tuple<double, double> betas, double eps, double wd) {
  if (lr < 0) bad_option(name, "lr", lr, "lr >= 0");
  if (eps < 0) bad_option(name, "eps", eps, "eps >= 0");
  if (std::get<0>(betas) < 0 || std::get<0>(betas) >= 1) bad_option(name, "beta1", std::get<0>(betas), "0 <= beta1 < 1");
  if (std::get<1>(betas) < 0 || std::get<1>(betas) >= 1) bad_option(name, "beta2", std::get<1>(betas), "0 <= beta2 < 1");
  if (wd < 0) bad_option(name, "weight_decay", wd, "weight_decay >= 0");
}

at::Tensor run_closure(const torch::optim::Optimizer::LossClosure& closure) {
  if (closure == nullptr) return {};
  at::AutoGradMode enable_grad(true);
  return closure();
}

/// Adam's and AdamW's hyper-parameters, read from either options type.
struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad;
};

template <typename Options>
AdamHyper hyper_of(const torch::optim::OptimizerOptions& options) {
  const auto& o = static_cast<const Options&>(options);
  return {o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(), o.weight_decay(), o.amsgrad()};
}

}  // namespace

std::vector<std::vector<at::Tensor>> FusedOptimizer::params_with_grads(size_t group) const {
  std::vector<std::vector<at::Tensor>> split;
  for (const auto& p : param_groups_[group].params()) {
    if (!p.grad().defined()) continue;
    if (p.grad().is_sparse()) {
      throw ConfigError("fused optimizer: expected dense gradients, found a sparse one (shape " +
                            std::to_string(p.dim()) + "-d).",
                        "use torch::optim::SGD or Adam for sparse gradients (they run eagerly).");
    }
    bool placed = false;
    for (auto& same : split) {
      if (same.front().device() == p.device() && same.front().scalar_type() == p.scalar_type()) {
        same.push_back(p);
        placed = true;
        break;
      }
    }
    if (!placed) split.push_back({p});
  }
  return split;
}

FusedSGD::FusedSGD(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
                   torch::optim::SGDOptions defaults)
    : FusedOptimizer(param_groups, std::make_unique<torch::optim::SGDOptions>(defaults)) {
  if (defaults.lr() < 0) bad_option("FusedSGD", "lr", defaults.lr(), "lr >= 0");
  if (defaults.momentum() < 0) bad_option("FusedSGD", "momentum", defaults.momentum(), "momentum >= 0");
  if (defaults.weight_decay() < 0) bad_option("FusedSGD", "weight_decay", defaults.weight_decay(), ">= 0");
  if (defaults.nesterov() && (defaults.momentum() <= 0 || defaults.dampening() != 0)) {
    bad_option("FusedSGD", "nesterov momentum", defaults.momentum(), "momentum > 0 and dampening 0 with nesterov");
  }
}

at::Tensor FusedSGD::step(LossClosure closure) {
  at::Tensor loss = run_closure(closure);
  at::NoGradGuard no_grad;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(param_groups_[g].options());
    for (const std::vector<at::Tensor>& params : params_with_grads(g)) {
      std::vector<at::Tensor> grads, buffers;
      bool first = o.momentum() != 0;  // Python's is_first_step: no buffer yet for any of them
      for (const auto& p : params) {
        grads.push_back(p.grad());
        if (o.momentum() == 0) continue;
        auto& slot = state_[p.unsafeGetTensorImpl()];
        if (!slot) {
          auto st = std::make_unique<torch::optim::SGDParamState>();
          st->momentum_buffer(at::empty_like(p.grad()));  // the first step writes it (buf = grad)
          slot = std::move(st);
        } else {
          first = false;
        }
        buffers.push_back(static_cast<torch::optim::SGDParamState&>(*slot).momentum_buffer());
      }
      if (params.front().is_cuda()) {
        at::_fused_sgd_(params, grads, buffers, o.weight_decay(), o.momentum(), device_lr(g, params.front().device()),
                        o.dampening(), o.nesterov(), /*maximize=*/false, first);
      } else {
        at::_fused_sgd_(params, grads, buffers, o.weight_decay(), o.momentum(), o.lr(), o.dampening(), o.nesterov(),
                        /*maximize=*/false, first);
      }
    }
  }
  return loss;
}

void FusedSGD::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<torch::optim::SGDParamState, torch::optim::SGDOptions>(archive, *this);
}

void FusedSGD::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<torch::optim::SGDParamState, torch::optim::SGDOptions>(archive, *this);
}

void FusedAdamParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(max_exp_avg_sq);  // skipped when undefined (no amsgrad)
}

void FusedAdamParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(at::Tensor, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(at::Tensor, exp_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(at::Tensor, exp_avg_sq);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(at::Tensor, max_exp_avg_sq);
}

namespace {

/// One Adam or AdamW step of one group's parameters of one device and dtype, as torch/optim/
/// adam.py's _fused_adam: state created on the first step, the device step counts bumped, then
/// the fused kernel, with the rate in device memory (`lr_tensor`) or as a number (the CPU).
template <bool kDecoupled>
void adam_update(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params, const AdamHyper& h,
                 const at::Tensor* lr_tensor, bool advance = true) {
  std::vector<at::Tensor> grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
  auto& states = optimizer.state();
  for (const auto& p : params) {
    auto& slot = states[p.unsafeGetTensorImpl()];
    if (!slot) {
      auto st = std::make_unique<FusedAdamParamState>();
      st->step(at::zeros({}, p.options().dtype(at::kFloat)));
      st->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
      st->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
      if (h.amsgrad) st->max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
      slot = std::move(st);
    }
    auto& st = static_cast<FusedAdamParamState&>(*slot);
    if (h.amsgrad && !st.max_exp_avg_sq().defined()) {
      st.max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
    }
    grads.push_back(p.grad());
    exp_avgs.push_back(st.exp_avg());
    exp_avg_sqs.push_back(st.exp_avg_sq());
    if (h.amsgrad) max_exp_avg_sqs.push_back(st.max_exp_avg_sq());
    steps.push_back(st.step());
  }
  if (advance) at::_foreach_add_(steps, 1);
  const std::optional<at::Tensor> none;
  auto kernel = [&](const auto& lr) {  // the rate as a tensor or as a number: ATen has both overloads
    if constexpr (kDecoupled) {
      at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, h.beta1, h.beta2,
                        h.weight_decay, h.eps, h.amsgrad, /*maximize=*/false, none, none);
    } else {
      at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, h.beta1, h.beta2,
                       h.weight_decay, h.eps, h.amsgrad, /*maximize=*/false, none, none);
    }
  };
  if (lr_tensor != nullptr) {
    kernel(*lr_tensor);
  } else {
    kernel(h.lr);
  }
}

template <typename Options>
constexpr bool kIsAdamW = std::is_same_v<Options, torch::optim::AdamWOptions>;

}  // namespace

template <typename Options>
FusedAdamBase<Options>::FusedAdamBase(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
                                      Options defaults)
    : FusedOptimizer(param_groups, std::make_unique<Options>(defaults)) {
  check_adam_options(kIsAdamW<Options> ? "FusedAdamW" : "FusedAdam", defaults.lr(), defaults.betas(),
                     defaults.eps(), defaults.weight_decay());
}

template <typename Options>
at::Tensor FusedAdamBase<Options>::step(LossClosure closure) {
  at::Tensor loss = run_closure(closure);
  at::NoGradGuard no_grad;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    const AdamHyper h = hyper_of<Options>(param_groups_[g].options());
    for (const std::vector<at::Tensor>& params : params_with_grads(g)) {
      const bool cuda = params.front().is_cuda();
      adam_update<kIsAdamW<Options>>(*this, params, h, cuda ? &device_lr(g, params.front().device()) : nullptr);
    }
  }
  return loss;
}

template <typename Options>
void FusedAdamBase<Options>::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<FusedAdamParamState, Options>(archive, *this);
}

template <typename Options>
void FusedAdamBase<Options>::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<FusedAdamParamState, Options>(archive, *this);
}

template class FusedAdamBase<torch::optim::AdamOptions>;
template class FusedAdamBase<torch::optim::AdamWOptions>;

}  // namespace train::optim

namespace train::details {
namespace {

struct Found {
  optim::FusedOptimizer* optimizer = nullptr;
  bool decoupled = true;
};

Found fused_adam(torch::optim::Optimizer& optimizer) {
  if (auto* adamw = dynamic_cast<optim::FusedAdamW*>(&optimizer)) return {adamw, true};
  if (auto* adam = dynamic_cast<optim::FusedAdam*>(&optimizer)) return {adam, false};
  return {};
}

// The group that holds `p`, or -1.
int group_of(const torch::optim::Optimizer& optimizer, const at::Tensor& p) {
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& q : groups[g].params()) {
      if (q.is_same(p)) return static_cast<int>(g);
    }
  }
  return -1;
}

optim::AdamHyper hyper_of_group(const Found& f, size_t group) {
  const auto& options = f.optimizer->param_groups()[group].options();
  if (f.decoupled) return optim::hyper_of<torch::optim::AdamWOptions>(options);
  return optim::hyper_of<torch::optim::AdamOptions>(options);
}

optim::FusedAdamParamState* state_of(torch::optim::Optimizer& optimizer, const at::Tensor& p) {
  auto it = optimizer.state().find(p.unsafeGetTensorImpl());
  return it == optimizer.state().end() ? nullptr : dynamic_cast<optim::FusedAdamParamState*>(it->second.get());
}

bool laid_out_like(const at::Tensor& t, const at::Tensor& p) {
  return t.defined() && t.device() == p.device() && t.scalar_type() == at::kFloat && t.strides() == p.strides() &&
         t.sizes() == p.sizes();
}

// `params` split by group, in their order within each.
std::vector<std::pair<size_t, std::vector<at::Tensor>>> by_group(const torch::optim::Optimizer& optimizer,
                                                                 const std::vector<at::Tensor>& params) {
  std::vector<std::pair<size_t, std::vector<at::Tensor>>> split;
  for (const auto& p : params) {
    const int g = group_of(optimizer, p);
    TORCH_CHECK(g >= 0, "a parameter of the bucket is not the optimizer's");
    const auto group = static_cast<size_t>(g);
    auto it = std::find_if(split.begin(), split.end(), [&](const auto& s) { return s.first == group; });
    if (it == split.end()) {
      split.push_back({group, {}});
      it = split.end() - 1;
    }
    it->second.push_back(p);
  }
  return split;
}

}  // namespace

bool updates_only(const torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params) {
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& q : group.params()) {
      if (!q.requires_grad()) continue;  // frozen: step() never updates it
      if (std::none_of(params.begin(), params.end(), [&](const at::Tensor& p) { return p.is_same(q); })) return false;
    }
  }
  return true;
}

bool FusedAdamBuckets::is_fused_adam(torch::optim::Optimizer& optimizer) {
  return fused_adam(optimizer).optimizer != nullptr;
}

bool FusedAdamBuckets::applies(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params,
                               std::string* why) {
  const Found f = fused_adam(optimizer);
  auto no = [&](const std::string& reason) {
    *why = reason;
    return false;
  };
  if (f.optimizer == nullptr) return no("not a FusedAdam or FusedAdamW");
  if (params.empty()) return no("no parameters");
  if (!updates_only(optimizer, params)) return no("the optimizer trains a tensor that the step does not average");
  for (const auto& p : params) {
    const int g = group_of(optimizer, p);
    if (g < 0) return no("a parameter the step averages is not the optimizer's");
    if (!p.is_cuda() || p.scalar_type() != at::kFloat || !p.is_non_overlapping_and_dense()) {
      return no("a parameter is not a dense float32 CUDA tensor");
    }
    const auto* st = state_of(optimizer, p);
    if (st == nullptr || !st->step().defined() || st->step().device() != p.device() ||
        st->step().scalar_type() != at::kFloat || st->step().numel() != 1) {
      return no("a parameter has no state on its device yet (no eager step before)");
    }
    if (!laid_out_like(st->exp_avg(), p) || !laid_out_like(st->exp_avg_sq(), p)) {
      return no("a parameter's moments are not laid out like it");
    }
    if (hyper_of_group(f, static_cast<size_t>(g)).amsgrad && !laid_out_like(st->max_exp_avg_sq(), p)) {
      return no("a parameter's amsgrad maximum is not laid out like it");
    }
    if (!rates_of(*f.optimizer).has(static_cast<size_t>(g), p.device())) {
      return no("a group's rate is not in device memory yet (no eager step before)");
    }
  }
  return true;
}

void FusedAdamBuckets::advance_steps(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> steps;
  for (const auto& p : params) {
    auto* st = state_of(optimizer, p);
    TORCH_CHECK(st != nullptr, "advancing the step count of a parameter without state");
    steps.push_back(st->step());
  }
  at::_foreach_add_(steps, 1);
}

void FusedAdamBuckets::update(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params) {
  at::NoGradGuard no_grad;
  const Found f = fused_adam(optimizer);
  TORCH_CHECK(f.optimizer != nullptr, "a bucket's Adam update with another optimizer");
  for (const auto& [g, same] : by_group(optimizer, params)) {
    const optim::AdamHyper h = hyper_of_group(f, g);
    const at::Tensor& lr = f.optimizer->device_lr(g, same.front().device());
    if (f.decoupled) {
      optim::adam_update<true>(optimizer, same, h, &lr, /*advance=*/false);
    } else {
      optim::adam_update<false>(optimizer, same, h, &lr, /*advance=*/false);
    }
  }
}

std::optional<FusedAdamBuckets::Hyper> FusedAdamBuckets::describe(torch::optim::Optimizer& optimizer,
                                                                  const std::vector<at::Tensor>& params,
                                                                  std::vector<Tensors>* tensors) {
  const Found f = fused_adam(optimizer);
  if (f.optimizer == nullptr || params.empty()) return std::nullopt;
  const auto split = by_group(optimizer, params);
  if (split.size() != 1) return std::nullopt;
  const optim::AdamHyper h = hyper_of_group(f, split.front().first);
  if (h.amsgrad) return std::nullopt;
  tensors->clear();
  for (const auto& p : params) {
    const auto* st = state_of(optimizer, p);
    TORCH_CHECK(st != nullptr, "describing the update of a parameter without state");
    tensors->push_back({p, st->exp_avg(), st->exp_avg_sq(), st->step()});
  }
  Hyper out;
  out.beta1 = h.beta1, out.beta2 = h.beta2, out.eps = h.eps, out.weight_decay = h.weight_decay;
  out.decoupled = f.decoupled;
  out.lr = f.optimizer->device_lr(split.front().first, params.front().device());
  return out;
}

}  // namespace train::details
