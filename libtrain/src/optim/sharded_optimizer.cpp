// ZeRO-1's optimizer side (sharded_optimizer.h): the run's optimizer rebuilt over views of this
// rank's parameter slices, its state sliced on the way in and gathered whole for checkpoints.
// The update is the optimizer's own element-wise kernel on aligned slices (comm/shard_comm.h's
// kShardAlign), so each element gets the bits an unsharded update gives it.
#include "optim/sharded_optimizer.h"

#include "optim/device_rates.h"
#include "train/adadelta.h"
#include "train/base/error.h"
#include "train/base/log.h"
#include "train/fused_optim.h"

#include <ATen/ops/_foreach_copy.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/add.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/full.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/reciprocal.h>
#include <ATen/ops/sqrt.h>
#include <ATen/ops/square.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Type.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/optim/sgd.h>

#include <functional>
#include <typeinfo>

namespace train::detail {

using torch::optim::Optimizer;
using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamGroup;
using torch::optim::OptimizerParamState;

/// An optimizer type's state: `fields` tensors shaped like the parameter, a step count, and how to
/// build the state and the optimizer itself.
struct ShardedOptimizer::Codec {
  std::string name;
  int fields = 0;
  std::function<int(const OptimizerOptions&)> fields_for;  // a group's: SGD without momentum keeps none
  std::function<at::Tensor(const OptimizerParamState&, int f)> field;
  std::function<int64_t(const OptimizerParamState&)> step;
  std::function<std::unique_ptr<OptimizerParamState>(std::vector<at::Tensor>, int64_t step)> make;
  std::function<std::unique_ptr<Optimizer>(const Optimizer&, const std::vector<OptimizerParamGroup>&)> build;
};

namespace {

template <class Opt, class Options>
std::function<std::unique_ptr<Optimizer>(const Optimizer&, const std::vector<OptimizerParamGroup>&)> builder() {
  return [](const Optimizer& full, const std::vector<OptimizerParamGroup>& groups) -> std::unique_ptr<Optimizer> {
    return std::make_unique<Opt>(groups, static_cast<const Options&>(full.defaults()));
  };
}

ShardedOptimizer::Codec adam_codec(const std::string& name) {
  ShardedOptimizer::Codec c;
  c.name = name;
  c.fields = 2;
  c.fields_for = [](const OptimizerOptions&) { return 2; };
  c.field = [](const OptimizerParamState& s, int f) {
    const auto& a = static_cast<const optim::FusedAdamParamState&>(s);
    return f == 0 ? a.exp_avg() : a.exp_avg_sq();
  };
  c.step = [](const OptimizerParamState& s) {
    return static_cast<int64_t>(static_cast<const optim::FusedAdamParamState&>(s).step().item<double>());
  };
  c.make = [](std::vector<at::Tensor> t, int64_t step) {
    auto s = std::make_unique<optim::FusedAdamParamState>();
    s->step(at::full({}, static_cast<double>(step), t[0].options().dtype(at::kFloat)));
    s->exp_avg(std::move(t[0]));
    s->exp_avg_sq(std::move(t[1]));
    return s;
  };
  return c;
}

std::unique_ptr<ShardedOptimizer::Codec> codec_for(const Optimizer& o) {
  const std::type_info& type = typeid(o);
  ShardedOptimizer::Codec c;
  if (type == typeid(optim::FusedAdam)) {
    c = adam_codec("train::optim::FusedAdam");
    c.build = builder<optim::FusedAdam, torch::optim::AdamOptions>();
  } else if (type == typeid(optim::FusedAdamW)) {
    c = adam_codec("train::optim::FusedAdamW");
    c.build = builder<optim::FusedAdamW, torch::optim::AdamWOptions>();
  } else if (type == typeid(optim::FusedSGD)) {
    c.name = "train::optim::FusedSGD";
    c.fields = 1;
    c.fields_for = [](const OptimizerOptions& o) {
      return static_cast<const torch::optim::SGDOptions&>(o).momentum() != 0 ? 1 : 0;
    };
    c.field = [](const OptimizerParamState& s, int) {
      return static_cast<const torch::optim::SGDParamState&>(s).momentum_buffer();
    };
    c.step = [](const OptimizerParamState&) { return int64_t{0}; };
    c.make = [](std::vector<at::Tensor> t, int64_t) {
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(std::move(t[0]));
      return s;
    };
    c.build = builder<optim::FusedSGD, torch::optim::SGDOptions>();
  } else if (type == typeid(optim::Adadelta)) {
    c.name = "train::optim::Adadelta";
    c.fields = 2;
    c.fields_for = [](const OptimizerOptions&) { return 2; };
    c.field = [](const OptimizerParamState& s, int f) {
      const auto& a = static_cast<const optim::AdadeltaParamState&>(s);
      return f == 0 ? a.square_avg() : a.acc_delta();
    };
    c.step = [](const OptimizerParamState& s) { return static_cast<const optim::AdadeltaParamState&>(s).step(); };
    c.make = [](std::vector<at::Tensor> t, int64_t step) {
      auto s = std::make_unique<optim::AdadeltaParamState>();
      s->step(step);
      s->square_avg(std::move(t[0]));
      s->acc_delta(std::move(t[1]));
      return s;
    };
    c.build = builder<optim::Adadelta, optim::AdadeltaOptions>();
  } else {
    return nullptr;
  }
  return std::make_unique<ShardedOptimizer::Codec>(std::move(c));
}

bool amsgrad(const Optimizer& o) {
  for (const auto& g : o.param_groups()) {
    if (const auto* a = dynamic_cast<const torch::optim::AdamOptions*>(&g.options()); a && a->amsgrad()) return true;
    if (const auto* w = dynamic_cast<const torch::optim::AdamWOptions*>(&g.options()); w && w->amsgrad()) return true;
  }
  return false;
}

}  // namespace

std::string shard_refusal(const Optimizer& optimizer) {
  if (!codec_for(optimizer)) {
    return c10::demangle(typeid(optimizer).name()) +
           " is not one libtrain shards (expected train::optim::FusedSGD, FusedAdam, FusedAdamW or Adadelta: "
           "element-wise updates whose state has the parameters' shapes)";
  }
  if (amsgrad(optimizer)) return "amsgrad keeps a third moment that --shard-optimizer does not slice yet";
  return "";
}

ShardedOptimizer::ShardedOptimizer(Optimizer& full, std::shared_ptr<ShardComm> comm, const Reducer& reducer)
    : full_(full), comm_(std::move(comm)), reducer_(reducer), codec_(codec_for(full)) {
  const std::string refusal = shard_refusal(full);
  if (!refusal.empty()) {
    throw ConfigError("--shard-optimizer: " + refusal + ".",
                      "build the optimizer as train::optim::FusedAdamW (or FusedSGD, FusedAdam, Adadelta; "
                      "train/fused_optim.h), or leave --shard-optimizer out.");
  }
  type_name_ = codec_->name;
  const auto& params = reducer_.params();
  group_of_.assign(params.size(), -1);
  for (size_t g = 0; g < full_.param_groups().size(); ++g) {
    for (const auto& p : full_.param_groups()[g].params()) {
      for (size_t i = 0; i < params.size(); ++i) {
        if (params[i].is_same(p)) group_of_[i] = static_cast<int>(g);
      }
    }
  }
  std::vector<std::vector<at::Tensor>> per_group(full_.param_groups().size());
  for (size_t k = 0; k < comm_->layout().size(); ++k) {
    const BucketShards& b = comm_->layout()[k];
    views_.emplace_back();
    for (const OwnedSlice& s : b.owned) {
      const at::Tensor& p = params[s.param];
      if (!p.is_contiguous()) {
        throw ConfigError("--shard-optimizer: expected contiguous parameters, found " + reducer_.names()[s.param] +
                              " with strides " + c10::str(p.strides()) + ".",
                          "leave --channels-last off, or --shard-optimizer out.");
      }
      at::Tensor view = p.detach().view({-1}).narrow(0, s.begin, s.length);
      view.mutable_grad() = comm_->grad_chunk(k).narrow(0, s.chunk_offset, s.length);
      views_.back().push_back(view);
      const int g = group_of_[s.param];
      if (g >= 0) {
        per_group[g].push_back(view);
        shard_bytes_ += s.length * p.element_size() * codec_->fields_for(full_.param_groups()[g].options());
      }
    }
    const auto opts = params[reducer_.buckets()[k].params.front()].options().requires_grad(false);
    send_.push_back(at::zeros({b.chunk}, opts));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (group_of_[i] >= 0) {
      full_bytes_ += params[i].numel() * params[i].element_size() *
                     codec_->fields_for(full_.param_groups()[group_of_[i]].options());
    }
  }
  std::vector<OptimizerParamGroup> groups;
  for (size_t g = 0; g < per_group.size(); ++g) {
    groups.emplace_back(per_group[g], full_.param_groups()[g].options().clone());
  }
  shard_ = codec_->build(full_, groups);
  take_state();
}

ShardedOptimizer::~ShardedOptimizer() = default;

// The slices of a resumed run's whole state that this rank keeps; the whole state is dropped.
void ShardedOptimizer::take_state() {
  at::NoGradGuard no_grad;
  const auto& params = reducer_.params();
  auto& whole = full_.state();
  for (size_t k = 0; k < comm_->layout().size(); ++k) {
    const auto& owned = comm_->layout()[k].owned;
    for (size_t j = 0; j < owned.size(); ++j) {
      const auto it = whole.find(params[owned[j].param].unsafeGetTensorImpl());
      if (it == whole.end() || !it->second) continue;
      std::vector<at::Tensor> fields;
      for (int f = 0; f < codec_->fields; ++f) {
        fields.push_back(codec_->field(*it->second, f).reshape({-1}).narrow(0, owned[j].begin, owned[j].length).clone());
      }
      shard_->state()[views_[k][j].unsafeGetTensorImpl()] = codec_->make(std::move(fields), codec_->step(*it->second));
    }
  }
  whole.clear();
}

void ShardedOptimizer::take_options() {
  for (size_t g = 0; g < full_.param_groups().size(); ++g) {
    shard_->param_groups()[g].set_options(full_.param_groups()[g].options().clone());
  }
}

bool ShardedOptimizer::follow_rates() {
  take_options();
  optim::DeviceStateOptimizer* on_device = optim::device_state(*shard_);
  if (on_device == nullptr || !on_device->lr_on_device()) return false;
  on_device->sync_lr();
  return true;
}

void ShardedOptimizer::step() {
  at::NoGradGuard no_grad;
  // The LR schedule (and any callback) sets the run's optimizer's options: the shard follows them.
  take_options();
  shard_->step();
  const auto& params = reducer_.params();
  for (size_t k = 0; k < comm_->layout().size(); ++k) {
    const BucketShards& b = comm_->layout()[k];
    if (at::Tensor flat = comm_->params_in_place(k); flat.defined()) {
      // The update wrote this rank's chunk of the parameters' own buffer: gathered in place.
      comm_->all_gather(k, flat.narrow(0, b.chunk * comm_->rank(), b.chunk), flat);
      continue;
    }
    // One multi-tensor copy each way instead of a copy per parameter (a graph's launches add up).
    std::vector<at::Tensor> to, from;
    for (size_t j = 0; j < b.owned.size(); ++j) {
      to.push_back(send_[k].narrow(0, b.owned[j].chunk_offset, b.owned[j].length));
      from.push_back(views_[k][j]);
    }
    if (!to.empty()) at::_foreach_copy_(to, from);
    at::Tensor gathered = comm_->gather_buffer(k);
    comm_->all_gather(k, send_[k], gathered);
    to.clear();
    from.clear();
    const auto& members = reducer_.buckets()[k].params;
    for (size_t j = 0; j < members.size(); ++j) {
      const at::Tensor& p = params[members[j]];
      to.push_back(p.detach().view({-1}));
      from.push_back(gathered.narrow(0, b.offsets[j], p.numel()));
    }
    at::_foreach_copy_(to, from);
  }
}

at::Tensor ShardedOptimizer::clip_grad_norm(double max_norm) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> chunks;
  for (size_t k = 0; k < comm_->layout().size(); ++k) chunks.push_back(comm_->grad_chunk(k));
  // The padding between parameters is zero in every chunk: it adds nothing to a norm.
  at::Tensor squares = at::linalg_vector_norm(at::stack(at::_foreach_norm(chunks, 2.0)), 2.0).square().reshape({1});
  comm_->all_reduce_sum(squares);
  const at::Tensor total = squares.sqrt().reshape({});
  const at::Tensor coef = at::clamp(at::mul(at::reciprocal(at::add(total, 1e-6)), max_norm), std::nullopt, 1.0);
  at::_foreach_mul_(chunks, coef);
  return total;
}

// Per reducer parameter: 0 when it has no state, else its step count + 1, from the rank that
// owns its first element (every owner has the same). One all-reduce of doubles: exact for counts.
std::vector<int64_t> ShardedOptimizer::gather_scalars() const {
  const auto& params = reducer_.params();
  std::vector<double> counts(params.size(), 0.0);
  for (size_t k = 0; k < comm_->layout().size(); ++k) {
    const auto& owned = comm_->layout()[k].owned;
    for (size_t j = 0; j < owned.size(); ++j) {
      if (owned[j].begin != 0) continue;
      const auto it = shard_->state().find(views_[k][j].unsafeGetTensorImpl());
      if (it != shard_->state().end() && it->second) counts[owned[j].param] = static_cast<double>(codec_->step(*it->second) + 1);
    }
  }
  // On the parameters' device: an NCCL group sums device tensors only.
  at::Tensor v = at::tensor(counts, at::TensorOptions().dtype(at::kDouble)).to(params.front().device());
  comm_->all_reduce_sum(v);
  v = v.cpu().contiguous();
  std::vector<int64_t> out(params.size());
  for (size_t i = 0; i < params.size(); ++i) out[i] = static_cast<int64_t>(v.data_ptr<double>()[i]);
  return out;
}

void ShardedOptimizer::gather_state() {
  at::NoGradGuard no_grad;
  const std::vector<int64_t> steps = gather_scalars();
  const auto& params = reducer_.params();
  bool any = false;
  for (const int64_t s : steps) any = any || s > 0;
  if (!any) return;  // no state yet: every rank saw the same counts
  std::vector<std::vector<at::Tensor>> fields(params.size());
  for (int f = 0; f < codec_->fields; ++f) {
    for (size_t k = 0; k < comm_->layout().size(); ++k) {
      const BucketShards& b = comm_->layout()[k];
      send_[k].zero_();
      for (size_t j = 0; j < b.owned.size(); ++j) {
        const auto it = shard_->state().find(views_[k][j].unsafeGetTensorImpl());
        if (it == shard_->state().end() || !it->second) continue;
        const at::Tensor t = codec_->field(*it->second, f);
        if (t.defined()) send_[k].narrow(0, b.owned[j].chunk_offset, b.owned[j].length).copy_(t);
      }
      at::Tensor gathered = comm_->gather_buffer(k);
      comm_->all_gather(k, send_[k], gathered);
      const auto& members = reducer_.buckets()[k].params;
      for (size_t j = 0; j < members.size(); ++j) {
        const at::Tensor& p = params[members[j]];
        fields[members[j]].push_back(gathered.narrow(0, b.offsets[j], p.numel()).view(p.sizes()).clone());
      }
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (steps[i] == 0 || group_of_[i] < 0) continue;
    full_.state()[params[i].unsafeGetTensorImpl()] = codec_->make(std::move(fields[i]), steps[i] - 1);
  }
}

void ShardedOptimizer::release_state() { full_.state().clear(); }

}  // namespace train::detail
