// transformer_bench: the benchmark's transformer as a user's program on libtrain's public Trainer
// API: a causal pre-norm encoder with an LM head (encoder.h), fused AdamW (train::optim::FusedAdamW) with a per-step linear
// warm-up + cosine schedule, on generated sequences with a learnable rule (tokens.h). Every
// `train` flag works (--epochs, --max-steps, --batch-size, --precision, --cuda-graph, checkpoints;
// several ranks under trainctl local or torchrun), plus the model's sizes. Prints the done line
// and, on rank 0, one more JSON line with tokens/s and the FLOPs per sequence.
#include "encoder.h"
#include "tokens.h"

#include <train/datasets/token_file.h>

#include <train/cli.h>
#include <train/base/error.h>
#include <train/fused_optim.h>
#include <train/base/log.h>
#include <train/trainer.h>

#include <ATen/ops/argmax.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/core/Reduction.h>
#include <CLI/CLI.hpp>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

namespace {

constexpr double kDefaultLr = 5e-4;        // AdamW; --lr overrides it
constexpr double kWarmupFraction = 0.05;   // the share of the run's steps that warm up linearly
constexpr int64_t kDefaultBatch = 16;      // sequences per rank; --batch-size overrides it
constexpr int64_t kMaxEvalBatch = 64;      // evaluation batches hold [batch, seq, vocab] logits

struct Flags {
  bench::EncoderOptions model;
  int64_t train_sequences = 16384, eval_sequences = 512;
  std::string tokens;        // --tokens: train on this token file, read by the loader
  std::string write_tokens;  // --write-tokens: write the generated training sequences as one
};

// The run's per-step rate: linear warm-up from 0 over the first 5% of the run's steps, then a
// cosine to 0 (train::warmup_cosine). The Trainer tells the schedule the run's length.
train::LrSchedule warmup_cosine_schedule() {
  train::LrSchedule s = train::warmup_cosine(0);
  s.rate = [](int64_t step, const train::ScheduleContext& run) {
    const auto warmup = std::max<int64_t>(1, static_cast<int64_t>(kWarmupFraction * static_cast<double>(run.total_steps)));
    return train::warmup_cosine(warmup).rate(step, run);
  };
  s.description = "warmup_cosine(warmup=5% of the run)";
  return s;
}

// Mean cross-entropy over every token; Reduction::sum sums each sequence's mean.
train::LossFn lm_loss() {
  return [](const at::Tensor& logits, const at::Tensor& target, train::Reduction r) {
    const int64_t v = logits.size(-1);
    const at::Tensor flat = at::cross_entropy_loss(logits.reshape({-1, v}).to(at::kFloat), target.reshape({-1}),
                                                   /*weight=*/{}, r == train::Reduction::mean ? at::Reduction::Mean
                                                                                             : at::Reduction::None);
    return r == train::Reduction::mean ? flat : flat.view({target.size(0), -1}).mean(1).sum();
  };
}

// Each sequence's share of tokens predicted right.
train::Metric token_accuracy() {
  return {"accuracy", [](const at::Tensor& logits, const at::Tensor& target) {
            return logits.argmax(-1).eq(target).to(at::kFloat).mean(1).sum();
          }};
}

train::TrainResult train_transformer(const Flags& f, const train::TrainConfig& config,
                                     const train::cli::RecipeOptions& recipe, const train::DistEnv& env) {
  train::TrainConfig c = config;
  const int64_t batch = c.run.batch_size.value_or(kDefaultBatch);
  c.run.test_batch_size = std::min(c.run.test_batch_size, kMaxEvalBatch);
  const bench::EncoderOptions o = f.model;
  train::Trainer trainer(c, env);
  train::TrainSpec spec;
  spec.model = [o] { return train::wrap_model(bench::Encoder(o)); };
  spec.model_name = "transformer-" + std::to_string(o.layers) + "x" + std::to_string(o.d_model);
  std::shared_ptr<train::InMemoryDataset> generated =
      bench::stride_sequences(f.train_sequences, o.seq_len, o.vocab, 1, "stride/train");
  if (!f.write_tokens.empty() && env.rank == 0) bench::write_token_file(*generated, o.vocab, f.write_tokens);
  if (f.tokens.empty()) {
    spec.train_data = generated;
  } else {
    // Each sequence's seq_len + 1 tokens one after the other: windows of seq_len + 1 tokens, one a
    // sequence, the same samples as the generated ones.
    train::datasets::TokenFileOptions tf;
    tf.seq_len = o.seq_len;
    tf.stride = o.seq_len + 1;
    tf.vocab_size = o.vocab;
    tf.format = o.vocab <= 65536 ? train::datasets::TokenFormat::uint16 : train::datasets::TokenFormat::uint32;
    spec.train_samples = std::make_shared<train::datasets::TokenFileDataset>(f.tokens, tf);
  }
  spec.eval_data = bench::stride_sequences(f.eval_sequences, o.seq_len, o.vocab, 2, "stride/test");
  spec.data_name = "stride-v" + std::to_string(o.vocab) + "-s" + std::to_string(o.seq_len);
  spec.loss = lm_loss();
  spec.metrics = {token_accuracy()};
  const double base = recipe.lr.value_or(kDefaultLr);  // --lr
  spec.lr_schedule = warmup_cosine_schedule();
  // Fused AdamW: its step counts and rate live on the device, so on a GPU the whole step,
  // per-step rate included, runs in the CUDA graph.
  spec.optimizer = [base](const std::vector<at::Tensor>& params) {
    return std::make_unique<train::optim::FusedAdamW>(params, torch::optim::AdamWOptions(base));
  };
  spec.batch_size = batch;
  spec.unit = "tokens";
  spec.units_per_sample = static_cast<double>(o.seq_len);
  train::log::info("transformer: " + std::to_string(o.layers) + " layers, d_model " + std::to_string(o.d_model) + ", " +
                   std::to_string(o.heads) + " heads, FFN " + std::to_string(o.ffn) + ", sequence " +
                   std::to_string(o.seq_len) + ", vocabulary " + std::to_string(o.vocab) + "; " +
                   std::to_string(bench::matmul_params(o)) + " matmul parameters; " +
                   std::to_string(bench::flops_per_sequence(o) / 1e9) + " GFLOP per sequence (6 N S + 12 L d S^2)");
  train::TrainResult r = trainer.fit(spec);
  if (env.rank == 0) {
    std::printf("{\"event\":\"transformer\",\"sequences_per_sec\":%.1f,\"tokens_per_sec\":%.1f,"
                "\"tokens_per_sec_steady\":%.1f,\"flops_per_seq\":%.0f,\"matmul_params\":%lld,\"seq_len\":%lld}\n",
                r.images_per_sec, r.images_per_sec * static_cast<double>(o.seq_len),
                r.images_per_sec_steady * static_cast<double>(o.seq_len), bench::flops_per_sequence(o),
                static_cast<long long>(bench::matmul_params(o)), static_cast<long long>(o.seq_len));
    std::fflush(stdout);
  }
  return r;
}

// The model's and the data's flags; their checks run after parsing.
std::function<int()> add_flags(CLI::App& app, Flags& f) {
  auto positive = CLI::PositiveNumber;
  app.add_option("--layers", f.model.layers, "encoder layers")->capture_default_str()->check(positive);
  app.add_option("--d-model", f.model.d_model, "model width")->capture_default_str()->check(positive);
  app.add_option("--heads", f.model.heads, "attention heads (must divide --d-model)")->capture_default_str()->check(positive);
  app.add_option("--ffn", f.model.ffn, "feed-forward width")->capture_default_str()->check(positive);
  app.add_option("--seq-len", f.model.seq_len, "tokens per sequence")->capture_default_str()->check(positive);
  app.add_option("--vocab", f.model.vocab, "vocabulary size (at least 2)")->capture_default_str()->check(CLI::Range(2, 1 << 24));
  app.add_option("--train-sequences", f.train_sequences, "generated training sequences")->capture_default_str()->check(positive);
  app.add_option("--eval-sequences", f.eval_sequences, "generated evaluation sequences")->capture_default_str()->check(positive);
  app.add_option("--tokens", f.tokens,
                 "train on this token file (raw uint16 tokens, uint32 above a vocabulary of 65536), read sample by "
                 "sample by the loader: sequences of --seq-len + 1 tokens one after the other, as --write-tokens writes")
      ->check(CLI::ExistingFile);
  app.add_option("--write-tokens", f.write_tokens,
                 "write the generated training sequences to this token file (rank 0), then train as usual");
  return [&f]() {
    if (f.model.d_model % f.model.heads != 0) {
      throw train::ConfigError("--heads: expected a divisor of --d-model " + std::to_string(f.model.d_model) +
                                   ", found " + std::to_string(f.model.heads) + ".",
                               "pick --heads so that --d-model / --heads is a whole head width, e.g. 8 for 512.");
    }
    return -1;
  };
}

}  // namespace

int main(int argc, char** argv) {
  auto flags = std::make_shared<Flags>();
  return train::cli::main(
      argc, argv, "transformer_bench: a causal transformer LM on generated sequences (libtrain benchmark)",
      {train::cli::RecipeFlag::lr},
      [flags](const train::TrainConfig& c, const train::cli::RecipeOptions& recipe, const train::DistEnv& env) {
        return train_transformer(*flags, c, recipe, env);
      },
      [flags](CLI::App& app) { return add_flags(app, *flags); });
}
