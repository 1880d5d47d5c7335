// The Trainer's ready-made parts (train/trainer.h, train/loss.h): losses, LR schedules, the
// accuracy metric, the parameters' fingerprint and the done line.
#include "train/trainer.h"

#include "train/text.h"
#include "train/error.h"
#include "train/sha256.h"
#include "train/version.h"

#include <nlohmann/json.hpp>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>

#include <algorithm>
#include <cmath>
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

namespace {

void check_warmup(const char* name, int64_t warmup_steps, double final_ratio) {
  if (warmup_steps < 0 || !(final_ratio >= 0 && final_ratio <= 1)) {
    throw ConfigError(std::string(name) + ": expected warmup_steps >= 0 and 0 <= final_ratio <= 1, found " +
                          std::to_string(warmup_steps) + " and " + fmt("%g", final_ratio) + ".",
                      "e.g. warmup_cosine(500) warms up over 500 steps, then decays to 0 at the run's end.");
  }
}

// The fraction of the way from the warm-up's end to the run's last step, in [0, 1].
double progress_after_warmup(int64_t step, int64_t warmup, int64_t total) {
  const double span = static_cast<double>(std::max<int64_t>(1, total - warmup));
  return std::clamp(static_cast<double>(step - warmup) / span, 0.0, 1.0);
}


// A per-step schedule: linear warm-up from 0 over `warmup_steps`, then base * decay(progress) down
// to the run's last step (progress in [0, 1] after the warm-up).
LrSchedule warmup_then(const char* name, int64_t warmup_steps, double final_ratio,
                       double (*decay)(double progress, double final_ratio)) {
  check_warmup(name, warmup_steps, final_ratio);
  LrSchedule s;
  s.every = LrSchedule::Every::step;
  s.rate = [warmup_steps, final_ratio, decay](int64_t step, const ScheduleContext& run) {
    if (step < warmup_steps) return run.base_lr * (static_cast<double>(step) / static_cast<double>(warmup_steps));
    return run.base_lr * decay(progress_after_warmup(step, warmup_steps, run.total_steps), final_ratio);
  };
  s.description = std::string(name) + "(warmup_steps=" + std::to_string(warmup_steps) + ", final_ratio=" +
                  fmt("%g", final_ratio) + ")";
  return s;
}

}  // namespace

LrSchedule warmup_cosine(int64_t warmup_steps, double final_ratio) {
  return warmup_then("warmup_cosine", warmup_steps, final_ratio, [](double p, double f) {
    return f + (1 - f) * 0.5 * (1.0 + std::cos(M_PI * p));
  });
}

LrSchedule linear_decay(int64_t warmup_steps, double final_ratio) {
  return warmup_then("linear_decay", warmup_steps, final_ratio, [](double p, double f) { return 1 - (1 - f) * p; });
}

LrSchedule one_cycle(double pct_start, double div_factor, double final_div_factor) {
  if (!(pct_start > 0 && pct_start < 1) || !(div_factor > 0) || !(final_div_factor > 0)) {
    throw ConfigError("one_cycle: expected 0 < pct_start < 1 and positive div factors, found pct_start " +
                          fmt("%g", pct_start) + ", div_factor " + fmt("%g", div_factor) + ", final_div_factor " +
                          fmt("%g", final_div_factor) + ".",
                      "OneCycleLR's defaults are one_cycle(0.3, 25, 1e4).");
  }
  LrSchedule s;
  s.every = LrSchedule::Every::step;
  s.rate = [pct_start, div_factor, final_div_factor](int64_t step, const ScheduleContext& run) {
    // torch.optim.lr_scheduler.OneCycleLR, two phases, cosine annealing.
    const double max_lr = run.base_lr, initial = max_lr / div_factor, min_lr = initial / final_div_factor;
    const double up_end = pct_start * static_cast<double>(run.total_steps) - 1;
    const double down_end = static_cast<double>(run.total_steps) - 1;
    const double n = static_cast<double>(step);
    auto anneal = [](double from, double to, double pct) { return to + (from - to) / 2.0 * (std::cos(M_PI * pct) + 1); };
    if (up_end > 0 && n <= up_end) return anneal(initial, max_lr, n / up_end);
    return anneal(max_lr, min_lr, (n - up_end) / (down_end - up_end));
  };
  s.description = "one_cycle(pct_start=" + fmt("%g", pct_start) + ", div_factor=" + fmt("%g", div_factor) +
                  ", final_div_factor=" + fmt("%g", final_div_factor) + ")";
  return s;
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
  if (r.snapshots > 0) {
    j["snapshots"] = r.snapshots;
    j["snapshot_seconds"] = r.snapshot_seconds;
    j["snapshot_write_seconds"] = r.snapshot_write_seconds;
  }
  j["world_size"] = r.world_size;
  if (!r.precision.empty()) j["precision"] = r.precision;
  j["params_sha256"] = r.params_sha256;
  j["version"] = TRAIN_VERSION_STRING;  // the libtrain that trained it (train/version.h)
  if (r.skipped_steps > 0 || r.nonfinite) j["skipped_steps"] = r.skipped_steps;
  if (r.early_stopping) j["stopped_early"] = r.stopped_early;
  if (r.eval_only) {
    j["eval_only"] = true;
    j["checkpoint"] = r.checkpoint_path;  // the one evaluated
  }
  if (r.ema) j["ema"] = true;  // the test loss and accuracy are the moving average's
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
