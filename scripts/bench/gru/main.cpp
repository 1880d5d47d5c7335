// gru_bench: the benchmark's small recurrent model as a user's program on libtrain's public
// Trainer API: a one-layer GRU classifier (gru.h), fused AdamW (train::optim::FusedAdamW) with a
// per-step linear warm-up + cosine schedule, on generated sequences with a learnable rule
// (sequences.h). Every `train` flag works (--epochs, --max-steps, --batch-size, --precision,
// --cuda-graph, checkpoints; several ranks under trainctl local or torchrun), plus the model's and
// the data's sizes. Prints the done line and, on rank 0, one more JSON line with sequences/s and
// the parameter count.
#include "gru.h"
#include "sequences.h"

#include <train/cli.h>
#include <train/base/error.h>
#include <train/fused_optim.h>
#include <train/base/log.h>
#include <train/trainer.h>

#include <CLI/CLI.hpp>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cstdio>
#include <memory>

namespace {

constexpr double kDefaultLr = 2e-3;       // AdamW; --lr overrides it
constexpr double kWarmupFraction = 0.05;  // the share of the run's steps that warm up linearly
constexpr int64_t kDefaultBatch = 64;     // sequences per rank; --batch-size overrides it

struct Flags {
  bench::GruOptions model;
  int64_t train_sequences = 262144, eval_sequences = 4096;
};

// The run's per-step rate: linear warm-up from 0 over the first 5% of the run's steps, then a
// cosine to 0 (train::warmup_cosine). The Trainer tells the schedule the run's length.
train::LrSchedule warmup_cosine_schedule() {
  train::LrSchedule s = train::warmup_cosine(0);
  s.rate = [](int64_t step, const train::ScheduleContext& run) {
    const auto steps = static_cast<double>(run.total_steps);
    const auto warmup = std::max<int64_t>(1, static_cast<int64_t>(kWarmupFraction * steps));
    return train::warmup_cosine(warmup).rate(step, run);
  };
  s.description = "warmup_cosine(warmup=5% of the run)";
  return s;
}

train::TrainResult train_gru(const Flags& f, const train::TrainConfig& config, const train::cli::RecipeOptions& recipe,
                             const train::DistEnv& env) {
  const bench::GruOptions o = f.model;
  train::Trainer trainer(config, env);
  train::TrainSpec spec;
  spec.model = [o] { return train::wrap_model(bench::GruClassifier(o)); };
  spec.model_name = "gru-h" + std::to_string(o.hidden) + "-f" + std::to_string(o.features);
  spec.train_data = bench::sign_sequences(f.train_sequences, o, 1, "signs/train");
  spec.eval_data = bench::sign_sequences(f.eval_sequences, o, 2, "signs/test");
  spec.data_name = "signs-f" + std::to_string(o.features) + "-s" + std::to_string(o.seq_len);
  // The defaults: cross-entropy on the head's scores, accuracy of their argmax.
  spec.loss = train::cross_entropy_loss();
  spec.metrics = {train::accuracy()};
  const double base = recipe.lr.value_or(kDefaultLr);  // --lr
  spec.lr_schedule = warmup_cosine_schedule();
  // Fused AdamW: its step counts and rate live on the device, so on a GPU the whole step,
  // per-step rate included, runs in the CUDA graph.
  spec.optimizer = [base](const std::vector<at::Tensor>& params) {
    return std::make_unique<train::optim::FusedAdamW>(params, torch::optim::AdamWOptions(base));
  };
  spec.batch_size = config.run.batch_size.value_or(kDefaultBatch);
  spec.unit = "seq";
  train::log::info("gru: " + std::to_string(o.features) + " features, hidden " + std::to_string(o.hidden) +
                   ", sequence " + std::to_string(o.seq_len) + ", " + std::to_string(bench::kGruClasses) +
                   " classes; " + std::to_string(bench::gru_params(o)) + " parameters");
  train::TrainResult r = trainer.fit(spec);
  if (env.rank == 0) {
    std::printf("{\"event\":\"gru\",\"sequences_per_sec\":%.1f,\"sequences_per_sec_steady\":%.1f,"
                "\"params\":%lld,\"features\":%lld,\"hidden\":%lld,\"seq_len\":%lld}\n",
                r.images_per_sec, r.images_per_sec_steady, static_cast<long long>(bench::gru_params(o)),
                static_cast<long long>(o.features), static_cast<long long>(o.hidden),
                static_cast<long long>(o.seq_len));
    std::fflush(stdout);
  }
  return r;
}

// The model's and the data's flags; CLI11 checks their ranges while parsing.
std::function<int()> add_flags(CLI::App& app, Flags& f) {
  auto positive = CLI::PositiveNumber;
  app.add_option("--features", f.model.features, "features per time step")->capture_default_str()->check(positive);
  app.add_option("--hidden", f.model.hidden, "GRU hidden units")->capture_default_str()->check(positive);
  app.add_option("--seq-len", f.model.seq_len, "time steps per sequence (at least 2: the rule compares two halves)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  app.add_option("--train-sequences", f.train_sequences, "generated training sequences")
      ->capture_default_str()
      ->check(positive);
  app.add_option("--eval-sequences", f.eval_sequences, "generated evaluation sequences")
      ->capture_default_str()
      ->check(positive);
  return [] { return -1; };
}

}  // namespace

int main(int argc, char** argv) {
  auto flags = std::make_shared<Flags>();
  return train::cli::main(
      argc, argv, "gru_bench: a GRU classifier on generated sequences (libtrain benchmark)",
      {train::cli::RecipeFlag::lr},
      [flags](const train::TrainConfig& c, const train::cli::RecipeOptions& recipe, const train::DistEnv& env) {
        return train_gru(*flags, c, recipe, env);
      },
      [flags](CLI::App& app) { return add_flags(app, *flags); });
}
