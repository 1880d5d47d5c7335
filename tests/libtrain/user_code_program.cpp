// A small program on libtrain's public API whose user code goes wrong on request, for
// nonfinite_test.cpp: USER_FAULT=throw:CALL:RANK makes Dataset::get_batch throw on its
// CALL-th call on rank RANK; float-targets gives float targets to the cross-entropy loss;
// short-targets returns one target row fewer than input rows; bad-forward gives the model inputs
// of the wrong width; bad-callback makes a callback throw at step 2.
#include <train/cli.h>
#include <train/trainer.h>
#include <torch/torch.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace {

std::string fault() {
  const char* f = std::getenv("USER_FAULT");
  return f != nullptr ? f : "";
}

class FaultyData : public train::Dataset {
 public:
  FaultyData(int64_t n, int rank, int width) : rank_(rank) {
    torch::manual_seed(0);
    x_ = torch::randn({n, width});
    y_ = x_.narrow(1, 0, 4).argmax(1);
    if (fault() == "float-targets") y_ = y_.to(torch::kFloat);
  }
  int64_t size() const override { return x_.size(0); }
  train::Batch get_batch(const at::Tensor& indices) override {
    ++calls_;
    const std::string f = fault();
    if (f.rfind("throw:", 0) == 0) {
      const int64_t call = std::stoll(f.substr(6, f.find(':', 6) - 6));
      const int rank = std::stoi(f.substr(f.find(':', 6) + 1));
      if (call == calls_ && rank == rank_) throw std::runtime_error("the disk is on fire (injected)");
    }
    train::Batch b{x_.index_select(0, indices), y_.index_select(0, indices)};
    if (f == "short-targets") b.targets = b.targets.narrow(0, 0, b.targets.size(0) - 1);
    return b;
  }

 private:
  at::Tensor x_, y_;
  int rank_ = 0;
  int64_t calls_ = 0;
};

struct ThrowingCallback : train::Callback {
  void on_step_end(const train::StepInfo& s) override {
    if (s.step == 2) throw std::runtime_error("callback refused step 2 (injected)");
  }
};

train::TrainResult train_it(const train::TrainConfig& config, const train::DistEnv& env) {
  train::Trainer trainer(config, env);
  train::TrainSpec spec;
  spec.model = [] { return train::wrap_model(torch::nn::Linear(8, 4)); };
  spec.model_name = "linear";
  spec.train_data = std::make_shared<FaultyData>(256, env.rank, fault() == "bad-forward" ? 7 : 8);
  spec.data_name = "random";
  spec.loss = train::cross_entropy_loss();
  spec.optimizer = [](const std::vector<at::Tensor>& params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1));
  };
  spec.batch_size = 16;
  if (fault() == "bad-callback") spec.callbacks.push_back(std::make_shared<ThrowingCallback>());
  return trainer.fit(spec);
}

}  // namespace

int main(int argc, char** argv) {
  return train::cli::main(argc, argv, "user_code_program: user code that goes wrong on request", train_it);
}
