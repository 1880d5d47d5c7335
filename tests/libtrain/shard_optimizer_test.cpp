// ZeRO-1 (--shard-optimizer): the shard layout covers every element once on aligned boundaries;
// sharded CPU runs end on unsharded DDP's bits (the MNIST recipe's Adadelta, and FusedAdamW and
// FusedSGD in a user's program); checkpoints go both ways between sharded and unsharded runs and to
// another world size; clipping a sharded gradient agrees with unsharded clipping to rounding; what
// can't be sharded is a usage error. On 2 GPUs: the sharded CUDA graph step gives the eager step's
// and unsharded DDP's bits, and its checkpoints resume unsharded.
#include "comm/shard_comm.h"
#include "gpu_count.h"
#include "param_diff.h"
#include "run_helpers.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <map>
#include <regex>

using train::test::bin;
using train::test::done_json;
using train::test::max_rel_diff;
using train::test::local_command;
using train::test::run_program;

namespace {

std::string program() { return std::string(TRAIN_BINARY_DIR) + "/tests/shard_program"; }

// The MNIST recipe (Adadelta) on 1280 Fashion-MNIST images, 128 a step over the ranks: 10 steps.
// With --accumulate-steps N, `micro` N times smaller batches.
std::vector<std::string> mnist_args(int ranks, std::vector<std::string> extra, int micro = 1) {
  std::vector<std::string> a = {bin("train"), "--data", train::test::fashion_mnist_dir(), "--epochs", "1",
                                "--limit-train-samples", "1280", "--limit-test-samples", "200", "--device", "cpu",
                                "--threads", "1", "--log-interval", "100", "--batch-size", std::to_string(128 / ranks / micro)};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

struct Outcome {
  nlohmann::json done;
  std::string log;
};

Outcome run(int ranks, const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  auto r = run_program(ranks > 1 ? local_command(ranks, args) : args, env, 300);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return {done_json(r), r.err};
}

std::string sha(const Outcome& r) { return r.done.value("params_sha256", std::string("missing")); }

// The shard_program's run (2 epochs of 512 samples, 32 a step over the ranks: 32 steps) with its
// checkpoints in `ck`.
std::vector<std::string> toy_args(int ranks, const std::string& ck, std::vector<std::string> extra) {
  std::vector<std::string> a = {program(), "--device", "cpu", "--threads", "1", "--log-interval", "100",
                                "--batch-size", std::to_string(32 / ranks), "--checkpoint-dir", ck};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Stops a toy run right after step `stop` (a preemption signal raised inside rank 0 at that step).
void stop_at(int ranks, const std::string& ck, const std::vector<std::string>& extra, int stop,
             const std::vector<std::string>& env) {
  std::vector<std::string> e = env;
  e.push_back("TRAIN_FAULT_SIGNAL_AT_STEP=" + std::to_string(stop) + ":USR2" + (ranks > 1 ? ":0" : ""));
  auto r = run_program(ranks > 1 ? local_command(ranks, toy_args(ranks, ck, extra)) : toy_args(ranks, ck, extra), e, 300);
  ASSERT_EQ(r.exit_code, 75) << r.err;
  EXPECT_EQ(done_json(r)["steps"], stop);
}

// (ranks, sharded) of the run that stops, then of the one that resumes its checkpoint.
struct Leg {
  int ranks;
  bool sharded;
};

std::vector<std::string> shard_flag(bool on) { return on ? std::vector<std::string>{"--shard-optimizer"} : std::vector<std::string>{}; }

// The toy run stopped after step 11 under `first` and finished under `second`; its done line.
Outcome stopped_and_resumed(Leg first, Leg second, const std::vector<std::string>& env) {
  train::test::TempDir d("shard-resume");
  const std::string ck = d.file("ck");
  stop_at(first.ranks, ck, shard_flag(first.sharded), 11, env);
  return run(second.ranks, toy_args(second.ranks, ck, shard_flag(second.sharded)), env);
}

Outcome uninterrupted(Leg leg, const std::vector<std::string>& env) {
  train::test::TempDir d("shard-whole");
  return run(leg.ranks, toy_args(leg.ranks, d.file("ck"), shard_flag(leg.sharded)), env);
}

std::map<std::string, torch::Tensor> load_params(const std::string& file) {
  std::map<std::string, torch::Tensor> params;
  torch::serialize::InputArchive archive;
  archive.load_from(file);
  for (const std::string& key : archive.keys()) {
    at::Tensor v;
    archive.read(key, v);
    params[key] = v.to(torch::kDouble);
  }
  return params;
}


}  // namespace

// Every element of every bucket belongs to exactly one rank; shards start and end on kShardAlign
// boundaries of their parameter (or at its end), and the chunks split the bucket evenly.
TEST(ShardLayout, EveryElementOnceOnAlignedBoundaries) {
  using train::detail::kShardAlign;
  const std::vector<std::vector<int64_t>> numels = {{10, 3000, 300, 3000}, {1}, {1179648, 128, 1290, 10}};
  const std::vector<std::vector<size_t>> params = {{0, 1, 2, 3}, {4}, {5, 6, 7, 8}};
  std::map<size_t, int64_t> numel_of;
  for (size_t k = 0; k < params.size(); ++k) {
    for (size_t j = 0; j < params[k].size(); ++j) numel_of[params[k][j]] = numels[k][j];
  }
  for (int world : {1, 2, 3, 4, 7}) {
    std::map<size_t, std::vector<int>> owners;
    for (const auto& [i, n] : numel_of) owners[i].assign(n, 0);
    for (int rank = 0; rank < world; ++rank) {
      const auto layout = train::detail::plan_shards(numels, params, world, rank);
      ASSERT_EQ(layout.size(), numels.size());
      for (const auto& b : layout) {
        EXPECT_EQ(b.chunk % kShardAlign, 0);
        for (const int64_t o : b.offsets) EXPECT_EQ(o % kShardAlign, 0);
        for (const auto& s : b.owned) {
          const int64_t end = s.begin + s.length;
          EXPECT_EQ(s.begin % kShardAlign, 0) << "param " << s.param << ", world " << world;
          EXPECT_TRUE(end % kShardAlign == 0 || end == numel_of[s.param]) << "param " << s.param << ", world " << world;
          EXPECT_GE(s.chunk_offset, 0);
          EXPECT_LE(s.chunk_offset + s.length, b.chunk);
          for (int64_t e = s.begin; e < end; ++e) ++owners[s.param][e];
        }
      }
    }
    for (const auto& [i, own] : owners) {
      for (size_t e = 0; e < own.size(); ++e) ASSERT_EQ(own[e], 1) << "param " << i << " element " << e << ", world " << world;
    }
    // The big bucket's chunks split it evenly but for the alignment's padding.
    const int64_t total = 1179648 + 128 + 1290 + 10;
    EXPECT_LT(train::detail::plan_shards(numels, params, world, 0)[2].chunk * world - total, (world + 4) * kShardAlign);
  }
}

// The MNIST recipe (Adadelta): sharded at 2 ranks gives unsharded DDP's bits, through shared
// memory and through Gloo's reduce-scatter; at 4 ranks through shared memory too (the same
// rank-ordered sums as DDP's). Each rank holds half the state, and says so.
TEST(ShardOptimizer, AdadeltaRecipeEqualsUnshardedDdp) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const Outcome plain = run(2, mnist_args(2, {}));
  const Outcome sharded = run(2, mnist_args(2, {"--shard-optimizer"}));
  EXPECT_EQ(sha(sharded), sha(plain));
  EXPECT_EQ(sharded.done["steps"], 10);
  EXPECT_EQ(sharded.done["train_loss"], plain.done["train_loss"]);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(sharded.log, m, std::regex(R"(optimizer state: ([0-9.]+) MB on this rank of ([0-9.]+) MB unsharded \(sharded 1/2, train::optim::Adadelta\))")))
      << sharded.log;
  const double mine = std::stod(m[1].str()), whole = std::stod(m[2].str());
  std::printf("[shard] Adadelta, MNIST CNN: %.2f MB of optimizer state per rank, %.2f MB unsharded\n", mine, whole);
  EXPECT_NEAR(mine, whole / 2, 0.01 * whole);
  EXPECT_NEAR(whole, 2 * 4 * 1199882 / 1048576.0, 0.01) << "square_avg and acc_delta of the CNN's 1,199,882 floats";

  const Outcome gloo = run(2, mnist_args(2, {"--shard-optimizer", "--shm-allreduce", "off"}));
  EXPECT_EQ(sha(gloo), sha(plain)) << "Gloo's reduce-scatter of 2 ranks adds as DDP does";
  EXPECT_NE(gloo.log.find("gloo reduce-scatters the gradients"), std::string::npos) << gloo.log;

  const Outcome four_plain = run(4, mnist_args(4, {}));
  const Outcome four = run(4, mnist_args(4, {"--shard-optimizer"}));
  EXPECT_EQ(sha(four), sha(four_plain));
  EXPECT_NE(four.log.find("(sharded 1/4"), std::string::npos) << four.log;
}

// The moving average of the weights follows the parameters a sharded run moved into its buckets'
// buffers: its evaluation (the done line's test loss) and the weights equal unsharded DDP's.
TEST(ShardOptimizer, WeightAverageFollowsTheShardedParameters) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const Outcome plain = run(2, mnist_args(2, {"--ema-decay", "0.5"}));
  const Outcome sharded = run(2, mnist_args(2, {"--ema-decay", "0.5", "--shard-optimizer"}));
  EXPECT_NE(sharded.log.find("(sharded 1/2"), std::string::npos) << sharded.log;
  EXPECT_TRUE(sharded.done.value("ema", false)) << sharded.log;
  EXPECT_EQ(sha(sharded), sha(plain));
  EXPECT_EQ(sharded.done["test_loss"], plain.done["test_loss"]) << "the average's evaluation";
  EXPECT_NE(sharded.done["test_loss"], run(2, mnist_args(2, {"--shard-optimizer"})).done["test_loss"])
      << "without the average the evaluation differs";
}

// A user's FusedAdamW (with a per-step warm-up and cosine) and FusedSGD with momentum: sharded at
// 2 ranks, asked for by the flag or by TrainSpec::shard_optimizer, gives unsharded DDP's bits.
TEST(ShardOptimizer, FusedAdamWAndSgdEqualUnshardedDdp) {
  for (const std::string opt : {"adamw", "sgd"}) {
    const std::vector<std::string> env = {"SHARD_OPTIMIZER=" + opt};
    const Outcome plain = uninterrupted({2, false}, env);
    const Outcome sharded = uninterrupted({2, true}, env);
    EXPECT_EQ(sharded.done["steps"], 32);
    EXPECT_EQ(sha(sharded), sha(plain)) << opt;
    EXPECT_NE(sharded.log.find("(sharded 1/2, train::optim::Fused"), std::string::npos) << sharded.log;
    std::vector<std::string> spec_env = env;
    spec_env.push_back("SHARD_SPEC=1");
    const Outcome by_spec = uninterrupted({2, false}, spec_env);
    EXPECT_EQ(sha(by_spec), sha(plain)) << opt;
    EXPECT_NE(by_spec.log.find("(sharded 1/2"), std::string::npos) << "TrainSpec::shard_optimizer shards: " << by_spec.log;
  }
  // Sharding changes what each rank updates, not the result: a different optimizer does change it.
  EXPECT_NE(sha(uninterrupted({2, true}, {"SHARD_OPTIMIZER=adam"})), sha(uninterrupted({2, true}, {})));
}

// A weight registered in two modules (tied, as embeddings are) is one parameter, as in PyTorch's
// parameters(): the optimizer gets it once (not two updates a step), DDP averages it once, a
// sharded run updates it once, ending on unsharded DDP's bits, and the moving average keeps it once. Clipped (FusedSGD), its gradient
// counts once in the norm on both sides (the sharded norm comes from DDP's buckets, the unsharded one from
// the model's parameters), so the two agree to rounding.
TEST(ShardOptimizer, ATiedWeightIsOneParameter) {
  const std::vector<std::string> env = {"SHARD_TIED=1"};
  const Outcome plain = uninterrupted({2, false}, env);
  const Outcome sharded = uninterrupted({2, true}, env);
  EXPECT_NE(plain.log.find("the optimizer gets 3 tensors"), std::string::npos)
      << "w (also head.w), b and head.b: " << plain.log;
  EXPECT_EQ(sharded.done["steps"], 32);
  EXPECT_NE(sharded.log.find("(sharded 1/2"), std::string::npos) << sharded.log;
  EXPECT_EQ(sha(sharded), sha(plain));
  // The moving average keeps it once too: evaluating the average swaps it in and back out, and
  // leaves the trained weights as a run without the average ends (kept twice, the second swap
  // left the average in the tied weight).
  {
    train::test::TempDir e("shard-tied-ema");
    const Outcome ema = run(1, toy_args(1, e.file("ck"), {"--ema-decay", "0.5"}), env);
    EXPECT_TRUE(ema.done.value("ema", false)) << ema.log;
    EXPECT_EQ(sha(ema), sha(run(1, toy_args(1, e.file("ck-plain"), {}), env)));
  }
  // FusedSGD for the clipped runs: Adam's update hardly changes when every gradient is scaled.
  const std::vector<std::string> sgd = {"SHARD_TIED=1", "SHARD_OPTIMIZER=sgd"};
  train::test::TempDir d("shard-tied");
  auto saved = [&](const std::string& name, std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--save-model", d.file(name + ".pt")});
    EXPECT_EQ(run(2, toy_args(2, d.file("ck-" + name), extra), sgd).done["steps"], 32) << name;
    return load_params(d.file(name + ".pt"));
  };
  const auto clipped = saved("plain", {"--clip-grad-norm", "0.01"});
  const double diff = max_rel_diff(clipped, saved("sharded", {"--clip-grad-norm", "0.01", "--shard-optimizer"}));
  const double clip_effect = max_rel_diff(clipped, saved("unclipped", {}));
  std::printf("[shard] tied weight, clip 0.01: sharded vs unsharded max rel diff %.3e; unclipped %.3e away\n", diff,
              clip_effect);
  EXPECT_LE(diff, 1e-5);
  EXPECT_GT(clip_effect, 1e-3) << "the bound must clip for this test to mean anything";
}

// Checkpoints hold the whole state: a sharded run's checkpoint resumes unsharded and the other way
// round, each ending on the uninterrupted run's bits; a sharded FusedAdamW checkpoint resumes on
// one rank exactly as an unsharded one does, and a one-rank checkpoint resumes sharded on two
// exactly as unsharded on two.
TEST(ShardOptimizer, CheckpointsResumeShardedOrNotOnAnyWorldSize) {
  const std::vector<std::string> env = {"SHARD_OPTIMIZER=adamw"};
  const std::string want = sha(uninterrupted({2, false}, env));
  EXPECT_EQ(sha(stopped_and_resumed({2, true}, {2, false}, env)), want) << "sharded checkpoint, unsharded resume";
  EXPECT_EQ(sha(stopped_and_resumed({2, false}, {2, true}, env)), want) << "unsharded checkpoint, sharded resume";
  EXPECT_EQ(sha(stopped_and_resumed({2, true}, {2, true}, env)), want) << "sharded both times";

  const Outcome to_one = stopped_and_resumed({2, true}, {1, false}, env);
  EXPECT_EQ(to_one.done["steps"], 32);
  EXPECT_EQ(sha(to_one), sha(stopped_and_resumed({2, false}, {1, false}, env)))
      << "a sharded world-2 checkpoint is an unsharded one";
  const Outcome to_two = stopped_and_resumed({1, false}, {2, true}, env);
  EXPECT_EQ(to_two.done["steps"], 32);
  EXPECT_EQ(sha(to_two), sha(stopped_and_resumed({1, false}, {2, false}, env)))
      << "a world-1 checkpoint resumes sharded on 2 ranks as unsharded";
}

// The MNIST recipe's Adadelta: a sharded checkpoint resumes unsharded on the uninterrupted bits.
TEST(ShardOptimizer, AdadeltaCheckpointResumesUnsharded) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  train::test::TempDir d("shard-mnist");
  std::vector<std::string> ck = {"--checkpoint-dir", d.file("ck")};
  const std::string want = sha(run(2, mnist_args(2, {})));
  std::vector<std::string> first = ck;
  first.push_back("--shard-optimizer");
  auto r = run_program(local_command(2, mnist_args(2, first)), {"TRAIN_FAULT_SIGNAL_AT_STEP=4:USR2:1"}, 300);
  ASSERT_EQ(r.exit_code, 75) << r.err;
  EXPECT_EQ(sha(run(2, mnist_args(2, ck))), want);
}

// What is not built, or can't be sharded, is a usage error (exit 2) naming the input, what was
// expected and what was found, with a hint.
TEST(ShardOptimizer, UnsupportedCombinationsAreUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> env;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{bin("train"), "--shard-optimizer", "--device", "cuda", "--backend", "gloo"}, {},
       "--shard-optimizer: expected the NCCL backend on --device cuda, found --backend gloo. Hint: leave --backend out"},
      {{program(), "--shard-optimizer", "--device", "cpu"}, {"SHARD_OPTIMIZER=torch-adamw"},
       "--shard-optimizer: torch::optim::AdamW is not one libtrain shards (expected train::optim::FusedSGD, FusedAdam, "
       "FusedAdamW or Adadelta"},
      {{program(), "--device", "cpu"}, {"SHARD_OPTIMIZER=torch-adamw", "SHARD_SPEC=1"},
       "TrainSpec::shard_optimizer: torch::optim::AdamW is not one libtrain shards"},
      {{program(), "--device", "cpu", "--shard-optimizer"}, {"SHARD_HOOK=1"},
       "--shard-optimizer: expected no callback with on_before_optimizer_step, found 1 (OptimizerStepCallback)."},
  };
  for (const Case& c : cases) {
    auto r = run_program(c.args, c.env, 120);
    EXPECT_EQ(r.exit_code, 2) << c.says << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("Hint:"), std::string::npos) << r.err;
  }
}

// Through Gloo at 4 ranks the reduce-scatter adds in its own order, not the all-reduce's: the
// sharded run lands within float rounding of unsharded DDP over Gloo. With --accumulate-steps the
// last micro-batch's backward reduce-scatters the accumulated sum: unsharded DDP's bits at 2 ranks.
TEST(ShardOptimizer, GlooAtFourRanksWithinRoundingAndAccumulation) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  train::test::TempDir d("shard-gloo4");
  const std::vector<std::string> gloo = {"--shm-allreduce", "off", "--save-model"};
  auto with = [&](std::vector<std::string> a, const std::string& file, bool shard) {
    a.push_back(d.file(file));
    if (shard) a.push_back("--shard-optimizer");
    return a;
  };
  const Outcome plain = run(4, mnist_args(4, with(gloo, "plain.pt", false)));
  const Outcome sharded = run(4, mnist_args(4, with(gloo, "sharded.pt", true)));
  const double diff = max_rel_diff(load_params(d.file("plain.pt")), load_params(d.file("sharded.pt")));
  std::printf("[shard] Gloo, 4 ranks, 10 Adadelta steps: max rel diff %.3e (sha %s)\n", diff,
              sha(sharded) == sha(plain) ? "equal" : "differs");
  EXPECT_LE(diff, 1e-5);

  const Outcome accumulated = run(2, mnist_args(2, {"--accumulate-steps", "2"}, 2));
  const Outcome accumulated_sharded = run(2, mnist_args(2, {"--accumulate-steps", "2", "--shard-optimizer"}, 2));
  EXPECT_EQ(accumulated_sharded.done["steps"], 10);
  EXPECT_EQ(sha(accumulated_sharded), sha(accumulated));
}

// --clip-grad-norm with a sharded optimizer: the total norm from the ranks' chunks (their squares
// summed over the ranks) lands within rounding of unsharded clipping (clip_grad_norm_'s arithmetic
// over whole gradients), through shared memory and through Gloo; the bound is tight enough that
// every step clips, so an unclipped run ends far away.
TEST(ShardOptimizer, ClippingAgreesWithUnshardedClipping) {
  train::test::TempDir d("shard-clip");
  const std::vector<std::string> env = {"SHARD_OPTIMIZER=adamw"};
  auto saved = [&](const std::string& name, std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--save-model", d.file(name + ".pt")});
    const Outcome r = run(2, toy_args(2, d.file("ck-" + name), extra), env);
    EXPECT_EQ(r.done["steps"], 32) << name;
    return load_params(d.file(name + ".pt"));
  };
  const auto plain = saved("plain", {"--clip-grad-norm", "0.05"});
  const auto sharded = saved("sharded", {"--clip-grad-norm", "0.05", "--shard-optimizer"});
  const auto gloo = saved("gloo", {"--clip-grad-norm", "0.05", "--shard-optimizer", "--shm-allreduce", "off"});
  const auto unclipped = saved("unclipped", {"--shard-optimizer"});
  const double diff = max_rel_diff(plain, sharded), diff_gloo = max_rel_diff(plain, gloo);
  const double clip_effect = max_rel_diff(plain, unclipped);
  std::printf("[shard] clip 0.05, 32 FusedAdamW steps at 2 ranks: sharded vs unsharded max rel diff %.3e "
              "(shared memory), %.3e (Gloo); unclipped %.3e away\n", diff, diff_gloo, clip_effect);
  EXPECT_LE(diff, 1e-5);
  EXPECT_LE(diff_gloo, 1e-5);
  EXPECT_GT(clip_effect, 1e-3) << "the bound must clip for this test to mean anything";
}

// A NaN loss on rank 1 of a sharded run stops it at that step with exit 65 and names it (the
// check reads this rank's own gradients: rank 0's stay finite, its loss too).
TEST(ShardOptimizer, NonFiniteLossStopsAShardedRun) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  auto r = run_program(local_command(2, mnist_args(2, {"--shard-optimizer"})), {"TRAIN_FAULT_NAN_AT_STEP=4:1"}, 300);
  EXPECT_EQ(r.exit_code, 65) << r.err;
  EXPECT_NE(r.err.find("rank 1: the loss at step 4"), std::string::npos) << r.err;
}

// On 2 GPUs, the MNIST CNN with FusedAdamW or the recipe's Adadelta: the sharded CUDA graph step
// (reduce-scatter on a side stream while the backward runs, the shard's update, the all-gather,
// all captured) lands on the sharded eager step's bits and on unsharded DDP's (default: the peer
// all-reduce; two ranks' sums are exact in any order). With --accumulate-steps and
// --clip-grad-norm the sharded graph equals the sharded eager step. A sharded checkpoint resumes
// unsharded on the uninterrupted run's bits. On 4 GPUs the reduce-scatter sums in NCCL's order:
// within rounding of unsharded DDP.
TEST(ShardOptimizerGpu, GraphEqualsEagerAndUnshardedOnTwoGpus) {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 2) GTEST_SKIP() << "needs 2 NVIDIA GPUs, found " << gpus << ": run scripts/gpu-check.sh on a node with 2 GPUs (docs/gpu.md)";
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  train::test::TempDir d("shard-gpu");
  auto args = [&](int ranks, const std::string& opt, std::vector<std::string> extra, int micro = 1) {
    std::vector<std::string> a = {bin("train"), "--data", train::test::fashion_mnist_dir(), "--epochs", "2",
                                  "--limit-train-samples", "3200", "--limit-test-samples", "500", "--batch-size",
                                  std::to_string(64 / ranks / micro), "--device", "cuda", "--deterministic", "--tf32", "off",
                                  "--precision", "fp32", "--no-dropout", "--log-interval", "1000", "--optimizer", opt};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto go = [&](int ranks, const std::vector<std::string>& a, const std::vector<std::string>& env = {}, int rc = 0) {
    auto r = run_program(local_command(ranks, a), env, 300);
    EXPECT_EQ(r.exit_code, rc) << r.err;
    EXPECT_EQ(r.err.find("capturing the step failed"), std::string::npos) << r.err;
    return Outcome{done_json(r), r.err};
  };
  const std::string zero1 = "gradients reduce-scattered and parameters all-gathered inside the graph (ZeRO-1)";
  for (const std::string opt : {"adamw", "adadelta"}) {
    const Outcome plain = go(2, args(2, opt, {}));
    const Outcome graph = go(2, args(2, opt, {"--shard-optimizer"}));
    const Outcome eager = go(2, args(2, opt, {"--shard-optimizer", "--cuda-graph", "off"}));
    std::printf("[2 GPUs, %s] sharded graph %s, sharded eager %s, unsharded %s\n", opt.c_str(), sha(graph).c_str(),
                sha(eager).c_str(), sha(plain).c_str());
    EXPECT_NE(graph.log.find(zero1), std::string::npos) << graph.log;
    EXPECT_NE(graph.log.find(zero1 + ", into the parameters in place"), std::string::npos) << graph.log;
    EXPECT_NE(graph.log.find("(sharded 1/2"), std::string::npos) << graph.log;
    EXPECT_EQ(graph.done["steps"], plain.done["steps"]);
    EXPECT_EQ(sha(graph), sha(eager)) << opt;
    EXPECT_EQ(sha(graph), sha(plain)) << opt;
  }
  // Accumulation and clipping, captured.
  const std::vector<std::string> acc = {"--shard-optimizer", "--accumulate-steps", "2", "--clip-grad-norm", "0.5"};
  const Outcome acc_graph = go(2, args(2, "adamw", acc, 2));
  std::vector<std::string> acc_eager = acc;
  acc_eager.insert(acc_eager.end(), {"--cuda-graph", "off"});
  const Outcome acc_eager_run = go(2, args(2, "adamw", acc_eager, 2));
  EXPECT_NE(acc_graph.log.find(zero1), std::string::npos) << acc_graph.log;
  EXPECT_NE(acc_graph.log.find("gradients clipped in the graph"), std::string::npos) << acc_graph.log;
  EXPECT_EQ(sha(acc_graph), sha(acc_eager_run));
  // A sharded checkpoint, resumed unsharded.
  const std::vector<std::string> ck = {"--checkpoint-dir", d.file("ck")};
  std::vector<std::string> first = ck;
  first.push_back("--shard-optimizer");
  const Outcome stopped = go(2, args(2, "adamw", first), {"TRAIN_FAULT_SIGNAL_AT_STEP=30:USR2:0"}, 75);
  // The GPU ranks agree on a stop every few steps (the flags travel in device memory).
  EXPECT_GE(stopped.done["steps"].get<int>(), 30);
  EXPECT_LT(stopped.done["steps"].get<int>(), 100) << "the stop came before the end";
  const Outcome resumed = go(2, args(2, "adamw", ck));
  EXPECT_EQ(sha(resumed), sha(go(2, args(2, "adamw", {})))) << "sharded checkpoint, unsharded resume";
  // A NaN loss on rank 1 at step 20: the check inside the graph (before the update and the
  // all-gather) stops the run there and names it.
  auto nan = run_program(local_command(2, args(2, "adamw", {"--shard-optimizer"})), {"TRAIN_FAULT_NAN_AT_STEP=20:1"}, 300);
  EXPECT_EQ(nan.exit_code, 65) << nan.err;
  EXPECT_NE(nan.err.find("rank 1: the loss at step 20"), std::string::npos) << nan.err;
  if (gpus < 4) {
    std::printf("[4 GPUs] not run: this node has %d GPUs\n", gpus);
    return;
  }
  // Five steps: AdamW's normalised update turns rounding into lr-sized moves over a long run.
  const Outcome four_plain = go(4, args(4, "adamw", {"--max-steps", "5", "--save-model", d.file("plain4.pt")}));
  const Outcome four =
      go(4, args(4, "adamw", {"--max-steps", "5", "--shard-optimizer", "--save-model", d.file("sharded4.pt")}));
  EXPECT_NE(four.log.find(zero1), std::string::npos) << four.log;
  const double diff = max_rel_diff(load_params(d.file("plain4.pt")), load_params(d.file("sharded4.pt")));
  std::printf("[4 GPUs, adamw, 5 steps] sharded vs unsharded: max rel diff %.3e (sha %s)\n", diff,
              sha(four) == sha(four_plain) ? "equal" : "differs");
  EXPECT_LE(diff, 1e-4);
}
