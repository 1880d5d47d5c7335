// The ready-made learning-rate schedules (train/train_spec.h): constant, step, and the per-step
// warm-up schedules (cosine, linear decay, one-cycle).
#include "train/train_spec.h"

#include "train/base/error.h"
#include "train/base/text.h"

#include <algorithm>
#include <cmath>

namespace train {

LrSchedule constant_lr() {
  return {LrSchedule::Every::epoch, [](int64_t, double lr) { return lr; }, "constant"};
}

LrSchedule step_lr(double gamma, int64_t step_size) {
  if (!(gamma > 0) || step_size < 1) {
    throw ConfigError("step_lr: expected gamma > 0 and step_size >= 1, found gamma " + text::format("%g", gamma) +
                          " and step_size " + std::to_string(step_size) + ".",
                      "StepLR multiplies the rate by gamma every step_size epochs, e.g. step_lr(0.7).");
  }
  return {LrSchedule::Every::epoch,
          [gamma, step_size](int64_t epoch, double lr) { return epoch % step_size == 0 ? lr * gamma : lr; },
          "step_lr(gamma=" + text::format("%g", gamma) + ", step_size=" + std::to_string(step_size) + ")"};
}

namespace {

void check_warmup(const char* name, int64_t warmup_steps, double final_ratio) {
  if (warmup_steps < 0 || !(final_ratio >= 0 && final_ratio <= 1)) {
    throw ConfigError(std::string(name) + ": expected warmup_steps >= 0 and 0 <= final_ratio <= 1, found " +
                          std::to_string(warmup_steps) + " and " + text::format("%g", final_ratio) + ".",
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
                  text::format("%g", final_ratio) + ")";
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
                          text::format("%g", pct_start) + ", div_factor " + text::format("%g", div_factor) + ", final_div_factor " +
                          text::format("%g", final_div_factor) + ".",
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
  s.description = "one_cycle(pct_start=" + text::format("%g", pct_start) + ", div_factor=" + text::format("%g", div_factor) +
                  ", final_div_factor=" + text::format("%g", final_div_factor) + ")";
  return s;
}

}  // namespace train
