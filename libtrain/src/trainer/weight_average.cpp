// The moving average of the weights (weight_average.h).
#include "trainer/weight_average.h"

#include "train/base/error.h"
#include "train/base/log.h"
#include "train/base/text.h"
#include "optim/unique_params.h"

#include <ATen/ops/_foreach_lerp.h>
#include <ATen/ops/tensor.h>
#include <torch/csrc/autograd/grad_mode.h>

namespace train::detail {

WeightAverage::WeightAverage(torch::nn::Module& model, double decay) : decay_(decay) {
  at::NoGradGuard no_grad;
  auto add = [this](const std::string& name, const at::Tensor& t) {
    if (!t.is_floating_point()) return;
    names_.push_back(name);
    live_.push_back(t);  // the tensor itself, not an alias: it follows the parameter if it moves (set_data)
    average_.push_back(t.detach().clone());
  };
  // A tied weight once: kept twice, the second swap() would leave the average in it.
  for (const auto& [name, p] : unique_named_parameters(model)) add(name, p);
  for (const auto& kv : model.named_buffers()) add(kv.key(), kv.value());
}

void WeightAverage::update() {
  at::NoGradGuard no_grad;
  // lerp: ema + (1 - decay) x (weights - ema), AveragedModel's EMA update.
  at::_foreach_lerp_(average_, live_, at::Scalar(1.0 - decay_));
}

void WeightAverage::swap() {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < live_.size(); ++i) {
    at::Tensor kept = live_[i].clone();
    live_[i].copy_(average_[i]);
    average_[i].copy_(kept);
  }
}

void WeightAverage::save(torch::serialize::OutputArchive& a) const {
  a.write("ema/decay", at::tensor({decay_}, at::TensorOptions().dtype(at::kDouble)));
  for (size_t i = 0; i < names_.size(); ++i) a.write("ema/" + names_[i], average_[i].cpu());
}

void WeightAverage::load(torch::serialize::InputArchive* a) {
  at::NoGradGuard no_grad;
  at::Tensor decay;
  if (a == nullptr || !a->try_read("ema/decay", decay)) {
    log::warn("--ema-decay: the checkpoint holds no moving average of the weights (written without --ema-decay); "
              "the average starts again from the resumed weights");
    for (size_t i = 0; i < live_.size(); ++i) average_[i].copy_(live_[i]);
    return;
  }
  if (const double saved = decay.cpu().item<double>(); saved != decay_) {
    log::warn("--ema-decay: the checkpoint's average was kept with decay " + text::format("%g", saved) +
              ", this run goes on with " + text::format("%g", decay_) + "; the results will differ from an "
              "uninterrupted run");
  }
  for (size_t i = 0; i < names_.size(); ++i) {
    at::Tensor t;
    if (!a->try_read("ema/" + names_[i], t) || t.sizes() != average_[i].sizes()) {
      throw CheckpointError("checkpoint: expected the moving average's controls/ema/" + names_[i] + " of shape " +
                                c10::str(average_[i].sizes()) + ", found " + (t.defined() ? c10::str(t.sizes()) : "none") + ".",
                            "resume with the same model, or point --checkpoint-dir at a fresh folder.");
    }
    average_[i].copy_(t);
  }
}

}  // namespace train::detail
