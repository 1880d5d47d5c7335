// Dataset lookup by name, shared by the train program and user code: loaded whole or streamed.
#include "train/datasets/dataset.h"

#include "train/catalog/catalog.h"
#include "train/datasets/cifar10.h"
#include "train/datasets/idx.h"
#include "train/base/error.h"
#include "train/base/files.h"

#include <unistd.h>

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

std::shared_ptr<SampleDataset> open_stream(const std::string& name, const std::string& dir, Split split,
                                           const StreamOptions& options) {
  const catalog::DatasetInfo& info = catalog::dataset_info(name);  // throws for an unknown name
  if (info.layouts.front().format == catalog::Format::idx) return std::make_shared<IdxDataset>(dir, split, options, name);
  return std::make_shared<Cifar10Dataset>(dir, split, options);
}

std::string default_unpack_dir(const std::string& checkpoint_dir) {
  if (!checkpoint_dir.empty()) return files::join(checkpoint_dir, "unpacked");
  for (const char* var : {"SLURM_TMPDIR", "TMPDIR"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return files::join(v, "libtrain-unpacked");
  }
  return "/tmp/libtrain-unpacked-" + std::to_string(::getuid());
}

std::string default_fashion_mnist_dir() {
  if (const char* env = std::getenv("TRAIN_FASHION_MNIST_DIR")) {
    if (*env != '\0') return env;
  }
  return files::is_directory(catalog::kDebianFashionMnistDir) ? catalog::kDebianFashionMnistDir : "";
}

}  // namespace train::datasets
