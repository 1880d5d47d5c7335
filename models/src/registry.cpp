// The model registry, pre-filled with the built-in models.
#include "train/base/error.h"
#include "train/models/cifar_cnn.h"
#include "train/models/mnist_cnn.h"
#include "train/models/model.h"
#include "train/models/resnet18.h"

#include <algorithm>
#include <map>
#include <mutex>

namespace train::models {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, ModelInfo> entries;
};

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry();
    ModelInfo mnist;
    mnist.name = "mnist";
    mnist.description = "the MNIST CNN of PyTorch's examples (1x28x28 input, 10 classes)";
    mnist.channels = 1, mnist.height = 28, mnist.width = 28;
    mnist.make = [](const ModelOptions& o) { return std::make_shared<MnistCnn>(o); };
    reg->entries[mnist.name] = mnist;
    ModelInfo cifar;
    cifar.name = "cifar10";
    cifar.description = "a LeNet for CIFAR-10, as in PyTorch's CIFAR-10 tutorial (3x32x32 input, 10 classes)";
    cifar.channels = 3, cifar.height = 32, cifar.width = 32;
    cifar.make = [](const ModelOptions& o) { return std::make_shared<CifarCnn>(o); };
    reg->entries[cifar.name] = cifar;
    ModelInfo resnet;
    resnet.name = "resnet18";
    resnet.description = "ResNet-18: CIFAR stem (3x3, no max-pool) for 3x32x32 input, torchvision's ImageNet stem from "
                         "64 px (--image-size 224); 10 classes, or the data's";
    resnet.channels = 3, resnet.height = 32, resnet.width = 32;
    resnet.make = [](const ModelOptions& o) { return std::make_shared<ResNet18>(o); };
    reg->entries[resnet.name] = resnet;
    return reg;
  }();
  return *r;
}

}  // namespace

void register_model(ModelInfo info) {
  if (info.name.empty() || !info.make) {
    throw ConfigError("register_model: expected a name and a factory, found name='" + info.name +
                          "' and " + (info.make ? "a factory" : "no factory") + ".",
                      "fill ModelInfo::name and ModelInfo::make.");
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.entries[info.name] = std::move(info);
}

const ModelInfo& model_info(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.entries.find(name);
  if (it == r.entries.end()) {
    std::string known;
    for (const auto& [k, v] : r.entries) known += (known.empty() ? "" : ", ") + k;
    throw ConfigError("--model: unknown model '" + name + "'; known models: " + known + ".",
                      "register your own with train::models::register_model() before training.");
  }
  return it->second;
}

std::vector<std::string> model_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [k, v] : r.entries) names.push_back(k);
  return names;
}

std::shared_ptr<Model> make_model(const std::string& name, const ModelOptions& options) {
  return model_info(name).make(options);
}

}  // namespace train::models
