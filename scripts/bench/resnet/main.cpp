// resnet_bench: ResNet-18 (train::models::ResNet18, the ImageNet stem) on WebDataset JPEG shards, a
// user's program on libtrain's public API, for issue #49's GPU line (scripts/bench/resnet_gpu.sh):
//   - fed: the loader decodes, random-resized-crops and flips every step's images on its threads
//     (--data-workers) into pinned buffers and copies them on a side stream;
//   - --decode gpu: the same, nvJPEG decoding on the card (train --decode gpu);
//   - --resident N: the first N images decoded once the same way (epoch 0's crops) and held on the
//     device: the card's own rate on this model, which the fed run is set against.
// SGD as the ImageNet recipe (momentum 0.9, weight decay 1e-4, 0.1 x batch / 256), constant rate:
// the speed is the point. Every `train` flag works (--precision bf16, --cuda-graph, --max-steps ...).
// Prints the done line and, on rank 0, {"event":"resnet_bench",...}.
#include <train/base/error.h>
#include <train/base/log.h>
#include <train/base/parallel.h>
#include <train/cli.h>
#include <train/data.h>
#include <train/datasets/image_dataset.h>
#include <train/datasets/tar_shards.h>
#include <train/models/resnet18.h>
#include <train/trainer.h>

#include <ATen/ops/empty.h>
#include <CLI/CLI.hpp>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

namespace {

struct Flags {
  std::string shards;    // --shards: 'DIR/train-{000000..000031}.tar' or a folder of shards
  int64_t resident = 0;  // --resident N: N images decoded once, held on the device
  int image_size = 224;
  std::string gpu_decode_name = "cpu";  // --decode: cpu, or gpu (nvJPEG on the card, as train --decode gpu)
};

std::shared_ptr<train::datasets::ImageDataset> open_images(const Flags& f, const std::string& cache_dir) {
  train::datasets::ImageOptions o;
  o.mode = train::datasets::ImageMode::train;
  o.size = f.image_size;
  if (f.gpu_decode_name == "gpu") o.decode = train::datasets::ImageDecode::gpu;
  return std::make_shared<train::datasets::ImageDataset>(train::datasets::open_tar_shards(f.shards, cache_dir), o);
}

// The first n samples as the loader would draw them in epoch 0, decoded on every core, as one
// float32 [n, 3, size, size] tensor and their labels (the Trainer moves them to the device).
std::shared_ptr<train::InMemoryDataset> decode_resident(train::datasets::ImageDataset& images, int64_t n,
                                                        uint64_t seed) {
  n = std::min(n, images.size());
  const int64_t s = images.options().size, c = images.options().channels;
  at::Tensor inputs = at::empty({n, c, s, s}, at::kFloat);
  at::Tensor targets = at::empty({n}, at::kLong);
  float* in = inputs.data_ptr<float>();
  int64_t* t = targets.data_ptr<int64_t>();
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  train::parallel_for(n, threads, [&](int64_t i) {
    t[i] = images.draw_into(i, train::SampleDraw{seed, 0}, in + i * c * s * s);
  });
  return std::make_shared<train::InMemoryDataset>(inputs, targets, "resident:" + images.name());
}

train::TrainResult train_resnet(const Flags& f, const train::TrainConfig& config, const train::cli::RecipeOptions& recipe,
                                const train::DistEnv& env) {
  if (f.shards.empty()) {
    throw train::ConfigError("resnet_bench: expected --shards 'DIR/train-{000000..000031}.tar' (or a folder of shards), "
                                 "found none.",
                             "write shards with scripts/bench/image_peers.py --make DIR, then --shards DIR/shards.");
  }
  train::Trainer trainer(config, env);
  std::shared_ptr<train::datasets::ImageDataset> images = open_images(f, config.checkpoint.dir);
  train::models::ModelOptions mo;
  mo.image_size = f.image_size;
  mo.num_classes = static_cast<int64_t>(images->source().classes().size());
  train::TrainSpec spec;
  spec.model = [mo] { return train::wrap_model(std::make_shared<train::models::ResNet18>(mo)); };
  spec.model_name = "resnet18";
  spec.data_name = "webdataset";
  if (f.resident > 0) {
    spec.train_data = decode_resident(*images, f.resident, config.run.seed);
    train::log::info("resnet_bench: " + std::to_string(spec.train_data->size()) +
                     " images decoded once, held on the device (" + images->describe() + ")");
  } else {
    spec.train_samples = images;
  }
  const int64_t batch = config.run.batch_size.value_or(256);
  const double lr = recipe.lr.value_or(0.1 * static_cast<double>(batch * env.world_size) / 256.0);
  spec.optimizer = [lr](const std::vector<at::Tensor>& params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(lr).momentum(0.9).weight_decay(1e-4));
  };
  spec.batch_size = batch;
  spec.epochs = 1;
  train::TrainResult r = trainer.fit(spec);
  if (env.rank == 0) {
    std::printf("{\"event\":\"resnet_bench\",\"decode\":\"%s\",\"fed\":\"%s\",\"images_per_sec\":%.1f,\"images_per_sec_steady\":%.1f}\n",
                f.gpu_decode_name.c_str(), f.resident > 0 ? "resident" : "loader", r.images_per_sec, r.images_per_sec_steady);
    std::fflush(stdout);
  }
  return r;
}

std::function<int()> add_flags(CLI::App& app, Flags& f) {
  app.add_option("--shards", f.shards, "WebDataset shards of JPEGs: 'DIR/train-{000000..000031}.tar' or a folder");
  app.add_option("--resident", f.resident, "decode this many images once and train on them held on the device; "
                                           "0: the loader decodes every step's images")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--decode", f.gpu_decode_name, "cpu (the loader's threads) or gpu (nvJPEG on the card)")
      ->capture_default_str()->check(CLI::IsMember({"cpu", "gpu"}));
  app.add_option("--image-size", f.image_size, "the crops' height and width")->capture_default_str()->check(CLI::PositiveNumber);
  return [] { return -1; };
}

}  // namespace

int main(int argc, char** argv) {
  auto flags = std::make_shared<Flags>();
  return train::cli::main(
      argc, argv, "resnet_bench: ResNet-18 on JPEG shards, fed by the loader or resident (libtrain benchmark)",
      {train::cli::RecipeFlag::lr},
      [flags](const train::TrainConfig& c, const train::cli::RecipeOptions& recipe, const train::DistEnv& env) {
        return train_resnet(*flags, c, recipe, env);
      },
      [flags](CLI::App& app) { return add_flags(app, *flags); });
}
