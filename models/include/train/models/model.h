// The model interface libtrain trains, and the registry that builds models by name.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace train::models {

/// How the trainer turns a model's output into a loss.
enum class OutputKind {
  log_probs,  ///< output is log-softmax: nll_loss (the built-in MNIST net)
  logits,     ///< output is raw scores: cross_entropy (the built-in CIFAR-10 net)
};

/// A module with one tensor in and one tensor out; what `train` and DDP work with.
class Model : public torch::nn::Module {
 public:
  /// @param x float32 [N, C, H, W]. @return [N, num_classes] (see output_kind()).
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  virtual OutputKind output_kind() const = 0;
};

/// Options every registered model accepts.
struct ModelOptions {
  bool dropout = true;  ///< false turns the model's dropout layers into identities (--no-dropout)
  /// Outputs (classes); 0: the model's own (ModelInfo::num_classes). Models of a fixed head
  /// (mnist, cifar10) take only their own count; resnet18 takes any.
  int64_t num_classes = 0;
  /// Input height and width; 0: the model's own (ModelInfo::height). resnet18 takes the ImageNet
  /// stem (7x7 stride-2 conv and a 3x3 max-pool, as torchvision's) from 64 px, its CIFAR stem below.
  int64_t image_size = 0;
};

/// What a registered model expects of its input.
struct ModelInfo {
  std::string name;
  std::string description;
  int64_t channels = 1, height = 28, width = 28;
  int64_t num_classes = 10;
  std::function<std::shared_ptr<Model>(const ModelOptions&)> make;
};

/// Registers `info` under info.name (replacing an earlier entry of that name). User code calls
/// this before running the trainer to add its own models.
void register_model(ModelInfo info);

/// The entry for `name`. Throws train::ConfigError listing the known names if there is none.
const ModelInfo& model_info(const std::string& name);

/// Names of every registered model, sorted.
std::vector<std::string> model_names();

/// Builds the model `name`: model_info(name).make(options).
std::shared_ptr<Model> make_model(const std::string& name, const ModelOptions& options = {});

}  // namespace train::models
