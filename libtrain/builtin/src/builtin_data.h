// The `train` program's data read sample by sample by the loader: image folders and WebDataset
// shards (builtin_images.cpp), and the first-N wrapper of --limit-train-samples. Private to train::builtin.
#pragma once

#include "train/builtin.h"
#include "train/catalog/catalog.h"
#include "train/models/model.h"
#include "train/sample_dataset.h"
#include "train/train_spec.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace train::builtin {

/// The first `limit` samples of `data` (--limit-train-samples and --limit-test-samples with data read
/// sample by sample): the same draws, fewer of them.
class FirstSamples : public SampleDataset {
 public:
  FirstSamples(std::shared_ptr<SampleDataset> data, int64_t limit) : data_(std::move(data)), limit_(limit) {}
  int64_t size() const override { return std::min(limit_, data_->size()); }
  Sample get(int64_t index) override { return data_->get(index); }
  Sample draw(int64_t index, const SampleDraw& d) override { return data_->draw(index, d); }
  std::string name() const override { return data_->name(); }
  std::shared_ptr<DeviceStage> device_stage(const at::Device& device) override { return data_->device_stage(device); }

 private:
  std::shared_ptr<SampleDataset> data_;
  int64_t limit_;
};

/// Whether --dataset names images read by the loader: "imagefolder" or "webdataset".
bool is_image_dataset(const std::string& dataset);

/// What an image dataset trains with, decided before the data is read: the recipe (resnet18 at
/// 64 px or more: catalog::imagenet_recipe(), torchvision's ImageNet reference; else the model's)
/// and the model's options (its classes and image size are set by load_images).
const catalog::Recipe& image_recipe(const Recipe& c, const models::ModelInfo& info);

/// --dataset imagefolder (--data DIR holding train/ and val/ or test/, one folder per class) or
/// webdataset (--data 'DIR/train-{000000..000127}.tar' or a folder of shards, --eval-data likewise):
/// fills spec.train_samples and spec.eval_samples (none without an evaluation split) and `model`'s
/// classes and image size. File lists and shard indexes are cached in `cache_dir` (the checkpoint
/// folder; "" = none). Logs what it found.
/// @throws train::ConfigError for a model the images can't feed (its size, channels or classes);
///   train::DataError for missing or bad files (naming them).
void load_images(TrainSpec& spec, const Recipe& c, const models::ModelInfo& info, const std::string& cache_dir,
                 models::ModelOptions& model);

}  // namespace train::builtin
