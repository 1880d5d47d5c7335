// Compiles the examples of docs/api.md and runs them for a few steps on random in-memory data, so
// the document can't drift from the headers: the main() built on train::cli::main and the Trainer,
// and the hand-written loop with ProcessGroup, DDP, DistributedSampler, Preemption and checkpoints.
// Keep the code between the "docs/api.md" markers identical to the document's.
#include "test_util.h"

#include <train/checkpoint.h>
#include <train/base/error.h>
#include <train/cli.h>
#include <train/ddp.h>
#include <train/base/event_file.h>
#include <train/base/files.h>
#include <train/base/log.h>
#include <train/metrics.h>
#include <train/preemption.h>
#include <train/process_group.h>
#include <train/sampler.h>
#include <train/trainer.h>
#include <train/training_state.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

// ---- docs/api.md: "A whole program" (main() is called doc_main here: gtest owns main) ----
struct NetImpl : torch::nn::Module {
  NetImpl() : fc1(register_module("fc1", torch::nn::Linear(16, 32))), fc2(register_module("fc2", torch::nn::Linear(32, 4))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

// Random inputs whose label is the largest of their first four features: learnable, no files.
std::shared_ptr<train::InMemoryDataset> random_data(int64_t n, uint64_t seed, const std::string& name) {
  torch::manual_seed(seed);  // the same samples on every rank
  at::Tensor x = torch::randn({n, 16});
  return std::make_shared<train::InMemoryDataset>(x, x.narrow(1, 0, 4).argmax(1), name);
}

train::TrainResult train_mlp(const train::TrainConfig& config, const train::cli::RecipeOptions& recipe,
                             const train::DistEnv& env) {
  train::Trainer trainer(config, env);  // checks the flags, picks threads and the device
  train::TrainSpec spec;
  spec.model = [] { return train::wrap_model(Net()); };
  spec.model_name = "mlp";
  spec.train_data = random_data(512, /*seed=*/0, "random/train");
  spec.eval_data = random_data(128, /*seed=*/1, "random/test");
  spec.data_name = "random";
  spec.loss = train::cross_entropy_loss();  // the model outputs logits
  const double lr = recipe.lr.value_or(0.1);  // --lr, or this program's default
  spec.optimizer = [lr](const std::vector<at::Tensor>& params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(lr).momentum(0.9));
  };
  spec.lr_schedule = train::step_lr(recipe.gamma.value_or(0.7));  // --gamma
  spec.batch_size = 32;  // per rank; --batch-size wins
  spec.epochs = 10;      // --epochs wins
  return trainer.fit(spec);
}

int doc_main(int argc, char** argv) {
  // The Trainer's flags, plus the two recipe flags this program reads: --lr and --gamma.
  using train::cli::RecipeFlag;
  return train::cli::main(argc, argv, "my_train: an MLP on random data", {RecipeFlag::lr, RecipeFlag::gamma}, train_mlp);
}
// ---- end of docs/api.md ----

// ---- docs/api.md: "A hand-written loop" ----
int train_by_hand(const std::string& checkpoint_dir, int epochs) {
  train::DistEnv env = train::resolve_env(train::current_environment());
  train::log::configure(env.rank, env.world_size, env.host);
  train::ProcessGroupOptions pg_options;  // Gloo on the CPU, 300 s timeout
  auto pg = train::ProcessGroup::create(env, pg_options);  // every rank; also for a world of 1

  torch::manual_seed(1);
  auto model = std::make_shared<NetImpl>();
  train::DistributedDataParallel ddp(model, pg);  // broadcasts rank 0's weights; every rank
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  auto data = random_data(512, /*seed=*/0, "random/train");
  const int64_t batch = 32;
  const train::LossFn loss_fn = train::cross_entropy_loss();

  train::TrainingState state;
  state.model = model.get();
  state.optimizer = &optimizer;
  state.world_size = env.world_size;
  state.batch_size = batch;
  state.shape_json = R"({"model":"mlp"})";
  state.loss_sum = torch::zeros({}, torch::kDouble);
  train::CheckpointDir checkpoints(checkpoint_dir, /*keep=*/2);
  if (auto found = checkpoints.load_latest_valid(torch::kCPU)) state.load(*found->first, torch::kCPU);
  auto save = [&] {  // rank 0 writes; the others wait until the file is durable
    if (env.rank == 0) {
      torch::serialize::OutputArchive archive;
      state.save(archive, torch::kCPU);
      checkpoints.save(archive, state.progress.step);
    }
    pg->barrier();
  };

  train::PreemptionOptions stop_options;
  stop_options.requeue_signals = {SIGUSR2};
  stop_options.stop_signals = {SIGTERM, SIGINT};
  train::Preemption preemption(stop_options, env);

  train::Progress& p = state.progress;
  while (p.epoch <= epochs) {
    train::DistributedSampler sampler(data->size(), env.world_size, env.rank, /*shuffle=*/true, /*seed=*/1);
    sampler.set_epoch(p.epoch - 1);
    at::Tensor order = torch::tensor(sampler.indices(), torch::kLong);
    const int64_t batches = (order.size(0) + batch - 1) / batch;
    for (int64_t b = p.batches_done; b < batches; ++b) {
      train::Batch x = data->get_batch(order.narrow(0, b * batch, std::min(batch, order.size(0) - b * batch)));
      optimizer.zero_grad();
      at::Tensor loss = loss_fn(model->forward(x.inputs), x.targets, train::Reduction::mean);
      loss.backward();  // DDP averages the gradients over the ranks here
      optimizer.step();
      state.loss_sum += loss.detach().to(torch::kDouble);
      ++p.step;
      ++p.epoch_steps;
      p.batches_done = b + 1;
      const train::StopRequest stop = preemption.poll(pg.get(), torch::kCPU);  // every rank, same step
      if (stop.kind != train::StopKind::none) {
        save();
        if (stop.requeue() && env.rank == 0) preemption.requeue_job();
        return stop.requeue() ? train::kExitPreempted : 128 + stop.signal;
      }
    }
    if (env.rank == 0) {
      train::log::info("epoch " + std::to_string(p.epoch) + ": mean loss " +
                       std::to_string(state.loss_sum.item<double>() / static_cast<double>(p.epoch_steps)));
    }
    ++p.epoch;  // the checkpoint resumes at the start of the next epoch
    p.batches_done = 0;
    p.epoch_steps = 0;
    state.loss_sum.zero_();
    save();
  }
  pg->shutdown();
  return 0;
}
// ---- end of docs/api.md ----

// ---- docs/api.md: "The parts you plug in" ----
// A dataset of your own: each sample computed from its index, on the device the indices are on.
class WavesDataset : public train::Dataset {
 public:
  explicit WavesDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  train::Batch get_batch(const at::Tensor& indices) override {
    at::Tensor t = indices.to(torch::kFloat).unsqueeze(1) * 0.01;
    at::Tensor x = torch::sin(t * torch::arange(1, 17, t.options()));  // [B, 16]
    return {x, x.narrow(1, 0, 4).argmax(1)};
  }
  std::string name() const override { return "waves"; }

 private:
  int64_t n_;
};

// A loss: cross-entropy with label smoothing, mean or sum as the Trainer asks.
train::LossFn smoothed_cross_entropy(double eps) {
  return [eps](const at::Tensor& output, const at::Tensor& target, train::Reduction reduction) {
    namespace F = torch::nn::functional;
    auto options = F::CrossEntropyFuncOptions().label_smoothing(eps);
    if (reduction == train::Reduction::sum) options.reduction(torch::kSum);
    return F::cross_entropy(output, target, options);
  };
}

// A schedule: linear warm-up over `warmup` steps, then cosine decay to 0 at `total` steps.
train::LrSchedule warmup_cosine(double peak, int64_t warmup, int64_t total) {
  train::LrSchedule s;
  s.every = train::LrSchedule::Every::step;
  s.next = [=](int64_t step, double /*lr*/) {
    if (step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
    const double done = static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
    return 0.5 * peak * (1 + std::cos(M_PI * std::min(1.0, done)));
  };
  s.description = "warmup_cosine(" + std::to_string(peak) + "," + std::to_string(warmup) + "," + std::to_string(total) + ")";
  return s;
}

// A metric: a per-sample sum; the Trainer divides by the number of samples.
train::Metric top2_accuracy() {
  return {"top2_accuracy", [](const at::Tensor& output, const at::Tensor& target) {
            at::Tensor top2 = std::get<1>(output.topk(2, /*dim=*/1));
            return top2.eq(target.unsqueeze(1)).any(1).sum();
          }};
}

// A callback: logs each epoch on rank 0 and keeps a count in every checkpoint.
class EpochCounter : public train::Callback {
 public:
  void on_train_start(train::Trainer& trainer) override { rank_ = trainer.env().rank; }
  void on_epoch_end(const train::EpochInfo& info) override {
    ++epochs_;
    if (rank_ == 0) {
      train::log::info("epoch " + std::to_string(info.epoch) + ": train loss " + std::to_string(info.train_loss) +
                       ", top-2 " + std::to_string(info.eval.metrics.at("top2_accuracy")));
    }
  }
  void on_save_checkpoint(torch::serialize::OutputArchive& archive) override {
    archive.write("epochs", torch::tensor({epochs_}));
  }
  void on_load_checkpoint(torch::serialize::InputArchive& archive) override {
    at::Tensor t;
    archive.read("epochs", t);
    epochs_ = t.item<int64_t>();
  }
  int64_t epochs() const { return epochs_; }

 private:
  int rank_ = 0;
  int64_t epochs_ = 0;
};
// ---- end of docs/api.md ----

// ---- docs/api.md: "Metrics of your own" ----
class GradNorm : public train::Callback {
 public:
  void on_train_start(train::Trainer& t) override { trainer_ = &t; }
  void on_step_end(const train::StepInfo& info) override {
    if (info.step % 10 != 0) return;
    double sum = 0;
    for (const auto& p : trainer_->model()->parameters()) {
      if (p.grad().defined()) sum += p.grad().pow(2).sum().item<double>();
    }
    trainer_->log_metrics("grad", {{"norm", std::sqrt(sum)}});  // grad/norm in TensorBoard
  }

 private:
  train::Trainer* trainer_ = nullptr;
};
// ---- end of docs/api.md ----

// ---- docs/api.md: "To act on the gradients before the optimizer uses them" ----
class ClipGradNorm : public train::OptimizerStepCallback {
 public:
  explicit ClipGradNorm(double max_norm) : max_norm_(max_norm) {}
  void on_before_optimizer_step(train::Trainer& trainer) override {
    torch::nn::utils::clip_grad_norm_(trainer.model()->parameters(), max_norm_);
  }

 private:
  double max_norm_;
};
// ---- end of docs/api.md ----

// A sink of our own: keeps every record it gets.
class RecordingSink : public train::MetricsSink {
 public:
  void open(int64_t start_step) override { start_step_ = start_step; }
  void write(const train::MetricsRecord& r) override { records.push_back(r); }
  std::vector<train::MetricsRecord> records;
  int64_t start_step_ = -1;
};

int run_doc_main(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return doc_main(static_cast<int>(argv.size()), argv.data());
}

TEST(ApiDoc, MainExampleTrainsAndPrintsTheDoneLine) {
  train::test::TempDir dir("api-doc-main");
  testing::internal::CaptureStdout();
  const int rc = run_doc_main({"my_train", "--epochs", "2", "--device", "cpu", "--threads", "1", "--log-interval", "8",
                               "--checkpoint-dir", dir.file("ckpt")});
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 0) << out;
  const auto done = nlohmann::json::parse(train::test::last_line(out));
  EXPECT_EQ(done.value("event", ""), "done");
  EXPECT_EQ(done.value("epochs", 0), 2);
  EXPECT_EQ(done.value("steps", 0), 32);  // 512 samples / 32 per batch, twice
  EXPECT_LT(done.value("train_loss", 9.0), 1.3) << out;  // below ln 4: it learns something
  // The same command again finds the last checkpoint and has nothing left to do.
  testing::internal::CaptureStdout();
  const int again = run_doc_main({"my_train", "--epochs", "2", "--device", "cpu", "--threads", "1",
                                  "--checkpoint-dir", dir.file("ckpt")});
  const std::string out2 = testing::internal::GetCapturedStdout();
  ASSERT_EQ(again, 0) << out2;
  EXPECT_EQ(nlohmann::json::parse(train::test::last_line(out2)).value("steps", 0), 32);
}

TEST(ApiDoc, MainExampleRejectsBadFlagsWithStatus2) {
  EXPECT_EQ(run_doc_main({"my_train", "--batch-size", "0"}), 2);
  EXPECT_EQ(run_doc_main({"my_train", "--lr", "-1"}), 2);
}

// A user's program shows and accepts only the flags it honours. The recipe
// flags it opted in to (--lr, --gamma) are there; `train`'s other recipe flags are unknown (exit 2
// and a hint that names add_recipe_flags), not silently ignored.
TEST(ApiDoc, MainExampleTakesOnlyTheFlagsItHonours) {
  testing::internal::CaptureStdout();
  EXPECT_EQ(run_doc_main({"my_train", "--help"}), 0);
  const std::string help = testing::internal::GetCapturedStdout();
  for (const char* flag : {"--lr", "--gamma", "--epochs", "--batch-size", "--checkpoint-dir", "--device"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag << " missing from --help:\n" << help;
  }
  for (const char* flag : {"--model", "--dataset", "--optimizer", "--momentum", "--weight-decay", "--augment",
                           "--limit-train-samples", "--limit-test-samples", "--no-dropout", "--list-models", "--data "}) {
    EXPECT_EQ(help.find(flag), std::string::npos) << flag << " in --help:\n" << help;
  }
  for (const char* flag : {"--model", "--optimizer", "--momentum", "--limit-train-samples"}) {
    testing::internal::CaptureStderr();
    EXPECT_EQ(run_doc_main({"my_train", flag, "1", "--device", "cpu"}), 2) << flag;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(flag), std::string::npos) << err;
    EXPECT_NE(err.find("add_recipe_flags"), std::string::npos) << err;
  }
}

TEST(ApiDoc, HandWrittenLoopTrainsAndResumes) {
  train::test::TempDir dir("api-doc-loop");
  const std::string port = std::to_string(train::test::free_port());
  setenv("MASTER_PORT", port.c_str(), 1);
  EXPECT_EQ(train_by_hand(dir.file("ckpt"), /*epochs=*/1), 0);
  train::CheckpointDir checkpoints(dir.file("ckpt"), 2);
  ASSERT_EQ(checkpoints.list().size(), 1u);
  EXPECT_EQ(checkpoints.list().back().step, 16);
  // A second run with one more epoch resumes from that checkpoint and adds 16 steps.
  EXPECT_EQ(train_by_hand(dir.file("ckpt"), /*epochs=*/2), 0);
  ASSERT_EQ(checkpoints.list().size(), 2u);
  EXPECT_EQ(checkpoints.list().back().step, 32);
  unsetenv("MASTER_PORT");
}

// The callback's numbers reach the --metrics file, the --tensorboard folder and a sink of our own,
// at the steps it logged them, beside the Trainer's own records.
TEST(ApiDoc, CallbackMetricsReachEverySink) {
  train::test::TempDir dir("api-doc-metrics");
  train::TrainConfig config;
  config.run.epochs = 3;
  config.run.device = train::DeviceKind::cpu;
  config.run.threads = 1;
  config.logging.log_interval = 4;
  config.logging.metrics = dir.file("m.jsonl");
  config.logging.tensorboard = dir.file("tb");
  train::Trainer trainer(config, train::DistEnv{});
  auto sink = std::make_shared<RecordingSink>();
  train::TrainSpec spec;
  spec.model = [] { return train::wrap_model(Net()); };
  spec.train_data = std::make_shared<WavesDataset>(256);
  spec.eval_data = std::make_shared<WavesDataset>(64);
  spec.optimizer = [](const std::vector<at::Tensor>& params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05));
  };
  spec.callbacks = {std::make_shared<GradNorm>(), std::make_shared<ClipGradNorm>(1e-3)};
  spec.metrics_sinks = {sink};
  spec.batch_size = 32;
  ASSERT_EQ(trainer.fit(spec).steps, 24);
  EXPECT_EQ(sink->start_step_, 0);

  std::map<std::string, std::vector<int64_t>> steps;  // event -> steps, as our sink saw them
  std::map<int64_t, double> norms;
  for (const train::MetricsRecord& r : sink->records) {
    steps[r.event].push_back(r.step);
    if (r.event == "grad") {
      ASSERT_EQ(r.values.size(), 1u);
      EXPECT_EQ(r.values[0].first, "norm");
      EXPECT_GT(r.values[0].second, 0) << "the gradients are there after the step";
      EXPECT_LE(r.values[0].second, 1e-3 * (1 + 1e-5)) << "ClipGradNorm clipped them before the step";
      norms[r.step] = r.values[0].second;
    }
  }
  EXPECT_EQ(steps["grad"], (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(steps["epoch"], (std::vector<int64_t>{8, 16, 24}));
  EXPECT_EQ(steps["train"], (std::vector<int64_t>{1, 5, 8, 9, 13, 16, 17, 21, 24})) << "every 4th batch and each epoch's last";

  // The JSONL has the same grad lines.
  std::vector<int64_t> jsonl_grad;
  std::istringstream jsonl(train::test::read_text(dir.file("m.jsonl")));
  for (std::string line; std::getline(jsonl, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["event"] == "grad") {
      jsonl_grad.push_back(j["step"]);
      EXPECT_EQ(j["norm"].get<double>(), norms[j["step"]]);
    }
  }
  EXPECT_EQ(jsonl_grad, (std::vector<int64_t>{10, 20}));
  // And TensorBoard's files hold grad/norm at those steps (as float32).
  std::map<int64_t, double> tb_norms;
  for (const std::string& f : train::tensorboard::event_files(dir.file("tb"))) {
    const auto scan = train::tensorboard::read_records(train::files::read_text(f));
    EXPECT_EQ(scan.error, "") << f;
    for (const auto& record : scan.records) {
      for (const auto& s : train::tensorboard::decode_event(record.payload).scalars) {
        if (s.tag == "grad/norm") tb_norms[train::tensorboard::decode_event(record.payload).step] = s.value;
      }
    }
  }
  ASSERT_EQ(tb_norms.size(), 2u);
  for (const auto& [step, norm] : norms) EXPECT_EQ(tb_norms[step], static_cast<double>(static_cast<float>(norm)));
}

// A checkpoint records the spec's names, the Trainer's own settings and the program's recipe
// (TrainSpec::recipe): resuming another model is refused naming both; another recipe value warns.
TEST(ApiDoc, CheckpointShapeRefusesAnotherModelAndWarnsOfAnotherRecipe) {
  train::test::TempDir dir("api-doc-shape");
  auto run = [&](const std::string& model_name, const std::string& momentum, int epochs) {
    train::TrainConfig config;
    config.run.epochs = epochs;
    config.run.device = train::DeviceKind::cpu;
    config.run.threads = 1;
    config.checkpoint.dir = dir.file("ckpt");
    train::Trainer trainer(config, train::DistEnv{});
    train::TrainSpec spec;
    spec.model = [] { return train::wrap_model(Net()); };
    spec.model_name = model_name;
    spec.train_data = std::make_shared<WavesDataset>(64);
    spec.optimizer = [](const std::vector<at::Tensor>& params) {
      return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05));
    };
    spec.recipe = {{"momentum", momentum}};
    spec.batch_size = 32;
    return trainer.fit(spec);
  };
  EXPECT_EQ(run("net", "0.9", 1).steps, 2);
  std::vector<std::string> warnings;
  train::log::set_sink([&](train::log::Level level, const std::string& line) {
    if (level == train::log::Level::warn) warnings.push_back(line);
  });
  EXPECT_EQ(run("net", "0.5", 2).steps, 4);
  train::log::set_sink(nullptr);
  EXPECT_TRUE(std::any_of(warnings.begin(), warnings.end(), [](const std::string& w) {
    return w.find("with a different momentum (\"0.9\" -> \"0.5\")") != std::string::npos;
  })) << "no warning about the recipe's momentum";
  try {
    run("other", "0.5", 3);
    FAIL() << "resumed another model's checkpoint";
  } catch (const train::CheckpointError& e) {
    EXPECT_NE(e.message().find("written for model \"net\""), std::string::npos) << e.what();
    EXPECT_NE(e.message().find("this run trains \"other\""), std::string::npos) << e.what();
  }
}

TEST(ApiDoc, PluggedInPartsTrainAndResume) {
  train::test::TempDir dir("api-doc-parts");
  auto run = [&](int epochs) {
    train::TrainConfig config;
    config.run.epochs = epochs;
    config.run.device = train::DeviceKind::cpu;
    config.run.threads = 1;
    config.checkpoint.dir = dir.file("ckpt");
    train::Trainer trainer(config, train::DistEnv{});
    auto counter = std::make_shared<EpochCounter>();
    train::TrainSpec spec;
    spec.model = [] { return train::wrap_model(Net()); };
    spec.train_data = std::make_shared<WavesDataset>(256);
    spec.eval_data = std::make_shared<WavesDataset>(64);
    spec.loss = smoothed_cross_entropy(0.1);
    spec.optimizer = [](const std::vector<at::Tensor>& params) {
      return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05));
    };
    spec.lr_schedule = warmup_cosine(0.05, /*warmup=*/4, /*total=*/24);
    spec.metrics = {train::accuracy(), top2_accuracy()};
    spec.callbacks = {counter};
    spec.batch_size = 32;
    const train::TrainResult r = trainer.fit(spec);
    return std::make_pair(r, counter->epochs());
  };
  const auto [first, epochs1] = run(2);
  EXPECT_EQ(first.steps, 16);
  EXPECT_EQ(epochs1, 2);
  // One more epoch: resumes from the epoch-end checkpoint with the callback's count restored.
  const auto [second, epochs2] = run(3);
  EXPECT_EQ(second.steps, 24);
  EXPECT_EQ(epochs2, 3);
  EXPECT_FALSE(second.checkpoint_path.empty());
}

// A callback sees the optimizer and the rate each step ran with (a per-step schedule moves it),
// the epoch's last rate, and the progress lines count the spec's unit, so that a user's program
// needs no raw pointer kept from inside its optimizer builder.
class RateRecorder : public train::Callback {
 public:
  std::vector<double> step_lrs, epoch_lrs;
  std::vector<torch::optim::Optimizer*> optimizers;
  void on_step_end(const train::StepInfo& info) override {
    step_lrs.push_back(info.lr);
    optimizers.push_back(info.optimizer);
  }
  void on_epoch_end(const train::EpochInfo& info) override {
    epoch_lrs.push_back(info.lr);
    optimizers.push_back(info.optimizer);
  }
};

TEST(ApiDoc, CallbacksSeeTheOptimizerAndRateAndTheSpecsUnit) {
  std::vector<std::string> lines;
  train::log::set_sink([&](train::log::Level, const std::string& line) { lines.push_back(line); });
  train::TrainConfig config;
  config.run.epochs = 2;
  config.run.device = train::DeviceKind::cpu;
  config.run.threads = 1;
  config.logging.log_interval = 1;
  train::Trainer trainer(config, train::DistEnv{});
  auto rec = std::make_shared<RateRecorder>();
  train::TrainSpec spec;
  spec.model = [] { return train::wrap_model(Net()); };
  spec.train_data = std::make_shared<WavesDataset>(128);
  spec.optimizer = [](const std::vector<at::Tensor>& params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05));
  };
  spec.lr_schedule = warmup_cosine(0.05, /*warmup=*/2, /*total=*/8);
  spec.callbacks = {rec};
  spec.batch_size = 32;
  spec.unit = "tokens";
  spec.units_per_sample = 16;
  const train::TrainResult r = trainer.fit(spec);
  train::log::set_sink(nullptr);
  ASSERT_EQ(r.steps, 8);
  ASSERT_EQ(rec->step_lrs.size(), 8u);
  // The schedule's rates, step by step: what the optimizer's group held when each step ran.
  const train::LrSchedule sched = warmup_cosine(0.05, 2, 8);
  double want = 0.05;
  for (int64_t s = 0; s < 8; ++s) {
    EXPECT_DOUBLE_EQ(rec->step_lrs[static_cast<size_t>(s)], want) << "step " << s + 1;
    want = sched.next(s + 1, want);
  }
  EXPECT_NE(rec->step_lrs[0], rec->step_lrs[3]);
  ASSERT_EQ(rec->epoch_lrs.size(), 2u);
  EXPECT_DOUBLE_EQ(rec->epoch_lrs[0], rec->step_lrs[3]);
  EXPECT_DOUBLE_EQ(rec->epoch_lrs[1], rec->step_lrs[7]);
  for (auto* o : rec->optimizers) EXPECT_EQ(o, rec->optimizers.front());
  EXPECT_NE(rec->optimizers.front(), nullptr);
  bool tokens = false, images = false;
  for (const auto& l : lines) {
    tokens = tokens || l.find(" tokens/s") != std::string::npos;
    images = images || l.find(" img/s") != std::string::npos;
  }
  EXPECT_TRUE(tokens);
  EXPECT_FALSE(images);

  // A unit without a positive count is refused, naming the fields.
  train::Trainer again(config, train::DistEnv{});
  spec.units_per_sample = 0;
  try {
    again.fit(spec);
    FAIL() << "expected a ConfigError";
  } catch (const train::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("TrainSpec::unit/units_per_sample"), std::string::npos) << e.what();
  }
}

}  // namespace
