// Dataset lookup by name, shared by the train program and user code.
#include "train/datasets/dataset.h"

#include "train/catalog/catalog.h"
#include "train/datasets/cifar10.h"
#include "train/datasets/idx.h"
#include "train/base/error.h"
#include "train/base/files.h"

#include <cstdlib>


namespace train::datasets {

TensorDataset load_dataset(const std::string& name, const std::string& dir, Split split,
                           const LoadOptions& options) {
  if (options.limit < 0) {
    throw ConfigError("sample limit: expected 0 (all) or a positive count, found " +
                          std::to_string(options.limit) + ".",
                      "pass --limit-train-samples/--limit-test-samples N with N >= 1.");
  }
  const catalog::DatasetInfo& info = catalog::dataset_info(name);  // throws for an unknown name
  if (info.layouts.front().format == catalog::Format::idx) return load_idx(dir, split, options, name);
  return load_cifar10(dir, split, options);
}

std::string default_fashion_mnist_dir() {
  if (const char* env = std::getenv("TRAIN_FASHION_MNIST_DIR")) {
    if (*env != '\0') return env;
  }
  return files::is_directory(catalog::kDebianFashionMnistDir) ? catalog::kDebianFashionMnistDir : "";
}

}  // namespace train::datasets
