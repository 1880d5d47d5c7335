// A small program on libtrain's public API for controls_test.cpp: a linear model on separable
// random data (10 classes) that takes the training controls' flags and --lr, and goes wrong on
// request: CONTROLS_OUTPUTS=N gives the model N outputs; CONTROLS_CASE=short-rows makes the dataset
// return one row fewer than asked at its 3rd call; hooks records every callback's hook on stderr
// ("hook: NAME") and zeroes the gradients in on_before_optimizer_step; warmup trains under
// warmup_cosine(5); frozen trains with a rate of 0 (the test loss never moves).
#include <train/cli.h>
#include <train/trainer.h>
#include <torch/torch.h>

#include <cstdlib>
#include <iostream>
#include <string>

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

const std::string kCase = env_or("CONTROLS_CASE", "");

class ToyData : public train::Dataset {
 public:
  ToyData(int64_t n, uint64_t seed) {
    torch::manual_seed(seed);
    x_ = torch::randn({n, 10});
    y_ = x_.argmax(1);
    x_ += 0.5 * torch::randn({n, 10});  // not quite separable: the test loss keeps moving
  }
  int64_t size() const override { return x_.size(0); }
  std::string name() const override { return "toy"; }
  void to(const at::Device& d) override {
    x_ = x_.to(d);
    y_ = y_.to(d);
  }
  train::Batch get_batch(const at::Tensor& indices) override {
    train::Batch b{x_.index_select(0, indices), y_.index_select(0, indices)};
    if (kCase == "short-rows" && ++calls_ == 3) {
      b.inputs = b.inputs.narrow(0, 0, b.inputs.size(0) - 1);
      b.targets = b.targets.narrow(0, 0, b.targets.size(0) - 1);
    }
    return b;
  }

 private:
  at::Tensor x_, y_;
  int64_t calls_ = 0;
};

// Says each hook as it runs; on_train_start checks that the Trainer's model is there. Zeroes the
// gradients before every optimizer step: plain SGD then leaves the weights as built.
class HookRecorder : public train::OptimizerStepCallback {
 public:
  void on_train_start(train::Trainer& t) override {
    trainer_ = &t;
    std::cerr << "hook: on_train_start model=" << (t.model() != nullptr ? "yes" : "no")
              << " sha=" << train::params_sha256(*t.model()) << std::endl;
  }
  void on_load_checkpoint(torch::serialize::InputArchive&) override {
    std::cerr << "hook: on_load_checkpoint trainer=" << (trainer_ != nullptr ? "yes" : "no") << std::endl;
  }
  void on_before_optimizer_step(train::Trainer& t) override {
    if (!said_) std::cerr << "hook: on_before_optimizer_step" << std::endl;
    said_ = true;
    for (auto& p : t.model()->parameters()) {
      if (p.grad().defined()) p.grad().zero_();
    }
  }
  void on_step_end(const train::StepInfo& s) override {
    if (s.step == 1) std::cerr << "hook: on_step_end" << std::endl;
  }
  void on_evaluation(const train::EvalResult&) override { std::cerr << "hook: on_evaluation" << std::endl; }
  void on_epoch_end(const train::EpochInfo&) override { std::cerr << "hook: on_epoch_end" << std::endl; }
  void on_save_checkpoint(torch::serialize::OutputArchive&) override {
    std::cerr << "hook: on_save_checkpoint" << std::endl;
  }
  void on_train_end(const train::TrainResult&) override { std::cerr << "hook: on_train_end" << std::endl; }

 private:
  train::Trainer* trainer_ = nullptr;
  bool said_ = false;
};

train::TrainResult train_it(const train::TrainConfig& config, const train::cli::RecipeOptions& recipe,
                            const train::DistEnv& env) {
  train::Trainer trainer(config, env);
  train::TrainSpec spec;
  const int64_t outputs = std::stoll(env_or("CONTROLS_OUTPUTS", "10"));
  spec.model = [outputs] { return train::wrap_model(torch::nn::Linear(10, outputs)); };
  spec.model_name = "linear";
  spec.train_data = std::make_shared<ToyData>(512, 1);
  spec.eval_data = std::make_shared<ToyData>(256, 2);
  spec.data_name = "toy";
  const double lr = kCase == "frozen" ? 0.0 : recipe.lr.value_or(0.05);
  spec.optimizer = [lr](const std::vector<at::Tensor>& params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(lr));
  };
  spec.batch_size = 16;
  spec.epochs = 3;
  if (kCase == "warmup") spec.lr_schedule = train::warmup_cosine(5);
  if (kCase == "hooks") spec.callbacks.push_back(std::make_shared<HookRecorder>());
  return trainer.fit(spec);
}

}  // namespace

int main(int argc, char** argv) {
  return train::cli::main(argc, argv, "controls_program: a toy program for the training controls' tests",
                          {train::cli::RecipeFlag::lr}, train_it);
}
