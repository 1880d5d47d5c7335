// A small program on libtrain's public API for shard_optimizer_test.cpp: a two-layer perceptron on
// random data (10 classes) whose optimizer SHARD_OPTIMIZER picks: adamw (train::optim::FusedAdamW,
// the default), adam (FusedAdam), sgd (FusedSGD with momentum) or torch-adamw (torch::optim::AdamW,
// which --shard-optimizer refuses). SHARD_SPEC=1 asks for sharding through TrainSpec::shard_optimizer;
// SHARD_HOOK=1 adds a callback with on_before_optimizer_step (refused with sharding); SHARD_TIED=1
// trains a model with a tied weight instead.
#include <train/cli.h>
#include <train/fused_optim.h>
#include <train/trainer.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

class ToyData : public train::Dataset {
 public:
  ToyData(int64_t n, uint64_t seed) {
    torch::manual_seed(seed);
    x_ = torch::randn({n, 10});
    y_ = x_.argmax(1);
    x_ += 0.5 * torch::randn({n, 10});
  }
  int64_t size() const override { return x_.size(0); }
  std::string name() const override { return "toy"; }
  void to(const at::Device& d) override {
    x_ = x_.to(d);
    y_ = y_.to(d);
  }
  train::Batch get_batch(const at::Tensor& indices) override {
    return {x_.index_select(0, indices), y_.index_select(0, indices)};
  }

 private:
  at::Tensor x_, y_;
};

// SHARD_TIED=1: the output layer's weight is the hidden layer's, registered in both modules (as
// "w" and "head.w"), as tied embeddings are.
struct TiedHead : torch::nn::Module {
  explicit TiedHead(const torch::Tensor& shared) {
    w = register_parameter("w", shared);
    b = register_parameter("b", torch::zeros({10}));
  }
  torch::Tensor forward(const torch::Tensor& h) { return h.mm(w) + b; }
  torch::Tensor w, b;
};

struct TiedMlp : torch::nn::Module {
  TiedMlp() {
    w = register_parameter("w", torch::randn({10, 10}) * 0.3);
    b = register_parameter("b", torch::zeros({10}));
    head = register_module("head", std::make_shared<TiedHead>(w));
  }
  torch::Tensor forward(const torch::Tensor& x) { return head->forward(torch::relu(x.mm(w.t()) + b)); }
  torch::Tensor w, b;
  std::shared_ptr<TiedHead> head;
};

class GradientReader : public train::OptimizerStepCallback {
 public:
  void on_before_optimizer_step(train::Trainer&) override {}
};

train::OptimizerBuilder optimizer(const std::string& kind, double lr) {
  return [kind, lr](const std::vector<at::Tensor>& params) -> std::unique_ptr<torch::optim::Optimizer> {
    std::fprintf(stderr, "shard_program: the optimizer gets %zu tensors\n", params.size());
    if (kind == "adam") return std::make_unique<train::optim::FusedAdam>(params, torch::optim::AdamOptions(lr));
    if (kind == "sgd") {
      return std::make_unique<train::optim::FusedSGD>(params, torch::optim::SGDOptions(lr).momentum(0.9).weight_decay(1e-4));
    }
    if (kind == "torch-adamw") return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(lr));
    return std::make_unique<train::optim::FusedAdamW>(params, torch::optim::AdamWOptions(lr));
  };
}

train::TrainResult train_it(const train::TrainConfig& config, const train::cli::RecipeOptions& recipe,
                            const train::DistEnv& env) {
  train::Trainer trainer(config, env);
  train::TrainSpec spec;
  spec.model = []() -> train::ModelHandle {
    if (env_or("SHARD_TIED", "") == "1") return train::wrap_model(std::make_shared<TiedMlp>());
    return train::wrap_model(torch::nn::Sequential(torch::nn::Linear(10, 300), torch::nn::ReLU(), torch::nn::Linear(300, 10)));
  };
  spec.model_name = "mlp";
  spec.train_data = std::make_shared<ToyData>(512, 1);
  spec.eval_data = std::make_shared<ToyData>(256, 2);
  spec.data_name = "toy";
  spec.optimizer = optimizer(env_or("SHARD_OPTIMIZER", "adamw"), recipe.lr.value_or(1e-3));
  spec.lr_schedule = train::warmup_cosine(4);  // the rate changes every step: the shards must follow it
  spec.batch_size = 32;
  spec.epochs = 2;
  spec.shard_optimizer = env_or("SHARD_SPEC", "") == "1";
  if (env_or("SHARD_HOOK", "") == "1") spec.callbacks.push_back(std::make_shared<GradientReader>());
  return trainer.fit(spec);
}

}  // namespace

int main(int argc, char** argv) {
  return train::cli::main(argc, argv, "shard_program: a toy program for --shard-optimizer's tests",
                          {train::cli::RecipeFlag::lr}, train_it);
}
