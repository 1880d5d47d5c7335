// The run's plan (run_plan.h): every setting that both a flag and the spec can set, resolved once.
#include "trainer/run_plan.h"

#include "train/base/error.h"
#include "train/base/text.h"
#include "train/sampler.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace train::detail {
namespace {

// The spec's early stopping with the flags over it (--early-stop-metric turns it on).
EarlyStopping resolve_early_stopping(const TrainSpec& spec, const RunConfig& run) {
  EarlyStopping e = spec.early_stopping;
  if (!run.early_stop_metric.empty()) e.metric = run.early_stop_metric;
  if (run.early_stop_patience) e.patience = *run.early_stop_patience;
  if (run.early_stop_min_delta) e.min_delta = *run.early_stop_min_delta;
  if (e.metric.empty()) return e;
  std::vector<std::string> names = {"test_loss"};
  for (const Metric& m : spec.metrics) names.push_back("test_" + m.name);
  if (std::find(names.begin(), names.end(), e.metric) == names.end()) {
    throw ConfigError("--early-stop-metric: expected " + text::or_list(names) + " (test_loss or a metric this program "
                          "evaluates), found '" + e.metric + "'.",
                      "e.g. --early-stop-metric test_loss --early-stop-patience 3");
  }
  if (!spec.eval_data && !spec.eval_samples) {
    throw ConfigError("--early-stop-metric " + e.metric + ": expected evaluation data to measure it on, found "
                          "TrainSpec::eval_data and eval_samples unset.",
                      "set TrainSpec::eval_data (or eval_samples), or leave --early-stop-metric out.");
  }
  if (e.patience < 1) {
    throw ConfigError("--early-stop-patience: expected at least 1 epoch, found " + std::to_string(e.patience) + ".",
                      "e.g. --early-stop-patience 3");
  }
  if (!(e.min_delta >= 0)) {
    throw ConfigError("--early-stop-min-delta: expected 0 or more, found " + text::format("%g", e.min_delta) + ".",
                      "e.g. --early-stop-min-delta 0.001");
  }
  return e;
}

// --ema-decay or the spec's.
std::optional<double> resolve_ema_decay(const TrainSpec& spec, const RunConfig& run) {
  const std::optional<double> d = run.ema_decay ? run.ema_decay : spec.ema_decay;
  if (d && !(*d >= 0 && *d < 1)) {
    throw ConfigError("--ema-decay: expected a decay in [0, 1), found " + text::format("%g", *d) + ".",
                      "e.g. --ema-decay 0.999 (an average over about 1000 steps).");
  }
  return d;
}

}  // namespace

std::string RunPlan::shard_source() const {
  return config.distributed.shard_optimizer ? "--shard-optimizer" : "TrainSpec::shard_optimizer";
}

void resolve_plan(RunPlan& p, const TrainSpec& s) {
  const TrainConfig& c = p.config;
  p.spec = &s;
  const bool data = s.train_data || s.train_samples;
  if (!s.model || !data || !s.optimizer || !s.loss) {
    throw ConfigError("TrainSpec: expected a model builder, training data, a loss and an optimizer builder, found " +
                          std::string(!s.model ? "no model" : !data ? "no training data"
                                      : !s.loss ? "no loss" : "no optimizer") + ".",
                      "fill TrainSpec::model, train_data (or train_samples), loss and optimizer (docs/api.md).");
  }
  if (s.train_data && s.train_samples) {
    throw ConfigError("TrainSpec: expected one kind of training data, found both train_data ('" + s.train_data->name() +
                          "', in memory) and train_samples ('" + s.train_samples->name() + "', read sample by sample).",
                      "set train_data for data held in memory, or train_samples for data the loader reads.");
  }
  if (s.eval_data && s.eval_samples) {
    throw ConfigError("TrainSpec: expected one kind of evaluation data, found both eval_data ('" + s.eval_data->name() +
                          "', in memory) and eval_samples ('" + s.eval_samples->name() + "', read sample by sample).",
                      "set eval_data for data held in memory, or eval_samples for data read sample by sample.");
  }
  p.loader = s.train_samples != nullptr;
  p.evaluates = s.eval_data || s.eval_samples;
  p.train_size = p.loader ? s.train_samples->size() : s.train_data->size();
  p.train_name = p.loader ? s.train_samples->name() : s.train_data->name();
  if (p.train_size < 1) {
    throw ConfigError("TrainSpec: expected training data with at least one sample, found '" + p.train_name + "' empty.",
                      "check the files the data is read from.");
  }
  // The loader's threads share the rank's cores with the intra-op threads.
  p.data_workers = c.data.workers.value_or(std::max(1, std::min(8, p.threads / 2)));
  if (!(s.units_per_sample > 0) || s.unit.empty()) {
    throw ConfigError("TrainSpec::unit/units_per_sample: expected a unit's name and a positive count per sample, found '" +
                          s.unit + "' and " + text::format("%g", s.units_per_sample) + ".",
                      "e.g. unit = \"tokens\", units_per_sample = 256 for sequences of 256 tokens.");
  }
  p.batch = c.run.batch_size.value_or(s.batch_size);
  p.epochs = c.run.epochs.value_or(s.epochs);
  if (p.batch < 1) {
    throw ConfigError("--batch-size: expected a positive per-rank batch size, found " + std::to_string(p.batch) + ".",
                      "e.g. --batch-size 64");
  }
  if (c.run.eval_only && !s.eval_data && !s.eval_samples) {
    throw ConfigError("--eval-only: expected evaluation data (TrainSpec::eval_data or eval_samples), found none.",
                      "set TrainSpec::eval_data in your program, or leave --eval-only out.");
  }
  if (p.epochs < 1) {
    throw ConfigError("TrainSpec::epochs: expected at least 1, found " + std::to_string(p.epochs) + ".", "e.g. --epochs 14");
  }
  p.accumulate = c.run.accumulate_steps.value_or(s.accumulate_steps);
  if (p.accumulate < 1) {
    throw ConfigError("TrainSpec::accumulate_steps: expected at least 1 micro-batch per optimizer step, found " +
                          std::to_string(p.accumulate) + ".", "1 means no accumulation; e.g. 4 with --batch-size 16 steps on 64 samples per rank.");
  }
  const std::optional<double> max_norm = c.run.clip_grad_norm ? c.run.clip_grad_norm : s.clip_grad_norm;
  if (max_norm && !(*max_norm > 0 && std::isfinite(*max_norm))) {
    throw ConfigError("TrainSpec::clip_grad_norm: expected a positive, finite total gradient norm, found " +
                          text::format("%g", *max_norm) + ".", "e.g. 1.0; leave it unset for no clipping.");
  }
  p.clip_norm = max_norm;
  p.samples_per_rank = DistributedSampler::samples_per_rank(p.train_size, p.env.world_size);
  p.steps_per_epoch = (p.samples_per_rank + p.step_samples() - 1) / p.step_samples();
  p.shard_optimizer = c.distributed.shard_optimizer || s.shard_optimizer;
  p.early_stopping = resolve_early_stopping(s, c.run);
  p.ema_decay = resolve_ema_decay(s, c.run);
}

}  // namespace train::detail
