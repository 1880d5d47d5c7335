// The Trainer's ready-made parts (train/trainer.h, train/loss.h): losses, LR schedules, the
// accuracy metric, the parameters' fingerprint and the done line.
#include "train/trainer.h"

#include "train/text.h"
#include "train/error.h"
#include "train/sha256.h"

#include <nlohmann/json.hpp>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>

#include <cstdio>

namespace train {
namespace {

std::string fmt(const char* f, double v) { return text::format(f, v); }

// A loss whose targets are class indices; its type marks it (expects_class_indices).
struct ClassIndexLoss {
  LossFn inner;
  at::Tensor operator()(const at::Tensor& out, const at::Tensor& target, Reduction r) const {
    return inner(out, target, r);
  }
};

}  // namespace

LossFn class_index_loss(LossFn loss) { return ClassIndexLoss{std::move(loss)}; }

bool expects_class_indices(const LossFn& loss) { return loss.target<ClassIndexLoss>() != nullptr; }

LossFn nll_loss() {
  return ClassIndexLoss{[](const at::Tensor& out, const at::Tensor& target, Reduction r) {
    namespace F = torch::nn::functional;
    auto options = F::NLLLossFuncOptions();
    if (r == Reduction::sum) {
      options.reduction(torch::kSum);
    } else {
      options.reduction(torch::kMean);
    }
    return F::nll_loss(out, target, options);
  }};
}

LossFn cross_entropy_loss() {
  // nll_loss(log_softmax(x)): what cross_entropy computes, spelled out so the numbers match it.
  return ClassIndexLoss{[nll = nll_loss()](const at::Tensor& out, const at::Tensor& target, Reduction r) {
    return nll(torch::log_softmax(out, 1), target, r);
  }};
}

LrSchedule constant_lr() {
  return {LrSchedule::Every::epoch, [](int64_t, double lr) { return lr; }, "constant"};
}

LrSchedule step_lr(double gamma, int64_t step_size) {
  if (!(gamma > 0) || step_size < 1) {
    throw ConfigError("step_lr: expected gamma > 0 and step_size >= 1, found gamma " + fmt("%g", gamma) +
                          " and step_size " + std::to_string(step_size) + ".",
                      "StepLR multiplies the rate by gamma every step_size epochs, e.g. step_lr(0.7).");
  }
  return {LrSchedule::Every::epoch,
          [gamma, step_size](int64_t epoch, double lr) { return epoch % step_size == 0 ? lr * gamma : lr; },
          "step_lr(gamma=" + fmt("%g", gamma) + ", step_size=" + std::to_string(step_size) + ")"};
}

Metric accuracy() {
  return {"accuracy", [](const at::Tensor& out, const at::Tensor& target) { return out.argmax(1).eq(target).sum(); }};
}

double EvalResult::accuracy() const {
  const auto it = metrics.find("accuracy");
  return it == metrics.end() ? 0.0 : it->second;
}

std::string params_sha256(const torch::nn::Module& module) {
  Sha256 hash;
  for (const auto& p : module.parameters()) {
    at::Tensor t = p.detach().to(at::kCPU, at::kFloat).contiguous();
    hash.update(t.const_data_ptr(), t.numel() * sizeof(float));
  }
  return hash.hex();
}

std::string to_json(const TrainResult& r) {
  nlohmann::ordered_json j;
  j["event"] = r.nonfinite ? "nonfinite" : r.cancelled ? "cancelled" : r.preempted ? "preempted" : "done";
  j["epochs"] = r.epochs;
  j["steps"] = r.steps;
  j["train_loss"] = r.train_loss;
  j["test_loss"] = r.test_loss;
  j["test_accuracy"] = r.test_accuracy;
  j["images_per_sec"] = r.images_per_sec;
  j["images_per_sec_steady"] = r.images_per_sec_steady;
  if (r.peak_gpu_mb > 0) j["peak_gpu_mb"] = r.peak_gpu_mb;
  j["train_seconds"] = r.train_seconds;
  j["eval_seconds"] = r.eval_seconds;
  j["checkpoint_seconds"] = r.checkpoint_seconds;
  j["world_size"] = r.world_size;
  if (!r.precision.empty()) j["precision"] = r.precision;
  j["params_sha256"] = r.params_sha256;
  if (r.skipped_steps > 0 || r.nonfinite) j["skipped_steps"] = r.skipped_steps;
  if (r.nonfinite) {
    j["reason"] = r.nonfinite_reason;
    j["checkpoint"] = r.checkpoint_path;  // the last good one ("" if none)
  }
  if (r.preempted || r.cancelled) {
    j["reason"] = r.preempt_reason;
    j["checkpoint"] = r.checkpoint_path;
    j["requeued"] = r.requeued;
  }
  return j.dump();
}

}  // namespace train
