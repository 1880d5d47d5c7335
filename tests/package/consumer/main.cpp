// Out-of-tree user code: registers its own model and uses the sampler through find_package(libtrain).
#include <train/models/model.h>
#include <train/sampler.h>
#include <torch/nn/modules/linear.h>
#include <iostream>
struct Lin : train::models::Model {
  Lin() { fc = register_module("fc", torch::nn::Linear(784, 10)); }
  torch::Tensor forward(torch::Tensor x) override { return fc->forward(x.flatten(1)); }
  train::models::OutputKind output_kind() const override { return train::models::OutputKind::logits; }
  torch::nn::Linear fc{nullptr};
};
int main() {
  train::models::ModelInfo info; info.name = "lin";
  info.make = [](const train::models::ModelOptions&) { return std::make_shared<Lin>(); };
  train::models::register_model(info);
  train::DistributedSampler s(10, 2, 1, true, 3);
  std::cout << train::models::make_model("lin")->forward(torch::zeros({2, 1, 28, 28})).sizes() << " " << s.indices().size() << "\n";
}
