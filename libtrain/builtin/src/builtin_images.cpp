// --dataset imagefolder and webdataset: JPEG and PNG images read, decoded and augmented on the
// loader's threads (train::datasets' ImageDataset), with the recipe and the model they feed.
#include "builtin_data.h"

#include "train/base/error.h"
#include "train/base/log.h"
#include "train/datasets/image_dataset.h"
#include "train/datasets/image_folder.h"
#include "train/datasets/tar_shards.h"

#include <string>
#include <vector>

namespace train::builtin {
namespace {

// From this size resnet18 takes the ImageNet stem and recipe, and the images their ImageNet
// augmentation (ModelOptions::image_size).
constexpr int64_t kImageNetFrom = 64;

int64_t image_size_of(const Recipe& c, const models::ModelInfo& info) {
  if (c.image_size > 0) return c.image_size;
  return c.model == "resnet18" ? 224 : info.height;
}

bool imagenet_like(const Recipe& c, const models::ModelInfo& info) {
  return c.model == "resnet18" && image_size_of(c, info) >= kImageNetFrom;
}

// How the images become the model's input: ImageNet's augmentation and normalization for resnet18
// at 64 px or more; else each image as it is (it must have the model's size), normalized as the
// recipe's dataset is (Fashion-MNIST or CIFAR-10 written as PNG folders train as their files do).
datasets::ImageOptions image_options(const Recipe& c, const models::ModelInfo& info, bool train) {
  datasets::ImageOptions o;
  o.size = static_cast<int>(image_size_of(c, info));
  o.channels = static_cast<int>(info.channels);
  if (imagenet_like(c, info)) {
    o.mode = train ? datasets::ImageMode::train : datasets::ImageMode::eval;
    o.mean.assign(std::begin(catalog::kImageNetMean), std::end(catalog::kImageNetMean));
    o.std.assign(std::begin(catalog::kImageNetStd), std::end(catalog::kImageNetStd));
    return o;
  }
  if (o.size != info.height || info.height != info.width) {
    throw ConfigError("--image-size " + std::to_string(o.size) + " with --model " + c.model + ": expected " +
                          std::to_string(info.height) + " (the model's input is " + std::to_string(info.channels) + "x" +
                          std::to_string(info.height) + "x" + std::to_string(info.width) + "), found " +
                          std::to_string(o.size) + ".",
                      c.model == "resnet18"
                          ? "use --image-size " + std::to_string(info.height) + " (the CIFAR stem, images as they are) or " +
                                std::to_string(kImageNetFrom) + " and more (the ImageNet stem, crop and flip)."
                          : "leave --image-size out, or use --model resnet18 (the ImageNet recipe from " +
                                std::to_string(kImageNetFrom) + " px).");
  }
  o.mode = datasets::ImageMode::none;
  const catalog::DatasetInfo& d = catalog::dataset_info(catalog::recipe_for(c.model).dataset);
  o.mean = {d.mean};
  o.std = {d.std};
  return o;
}

std::shared_ptr<SampleDataset> limited(std::shared_ptr<SampleDataset> data, const std::optional<int64_t>& limit) {
  return limit ? std::make_shared<FirstSamples>(std::move(data), *limit) : data;
}

std::shared_ptr<datasets::ImageSource> open_folder(const std::string& dir, const std::string& cache_dir) {
  std::shared_ptr<datasets::ImageFolder> folder = datasets::open_image_folder(dir, cache_dir);
  log::info(folder->name() + ": " + std::to_string(folder->size()) + " images in " +
            std::to_string(folder->classes().size()) + " classes" +
            (folder->ignored_files() ? ", " + std::to_string(folder->ignored_files()) + " other files skipped" : "") +
            (folder->cache_note().empty() ? "" : "; file list " + folder->cache_note()));
  return folder;
}

std::shared_ptr<datasets::ImageSource> open_shards(const std::string& spec, const std::string& cache_dir) {
  std::shared_ptr<datasets::TarShards> shards = datasets::open_tar_shards(spec, cache_dir);
  log::info(shards->name() + ": " + std::to_string(shards->size()) + " images in " +
            std::to_string(shards->shards().size()) + " shards, " + std::to_string(shards->classes().size()) +
            " classes" + (shards->cache_note().empty() ? "" : "; " + shards->cache_note()));
  return shards;
}

// The training and evaluation sources --data (and --eval-data) name, and what was found, logged.
std::pair<std::shared_ptr<datasets::ImageSource>, std::shared_ptr<datasets::ImageSource>> open_sources(
    const Recipe& c, const std::string& cache_dir) {
  std::shared_ptr<datasets::ImageSource> train, eval;
  if (c.dataset == "imagefolder") {
    const datasets::SplitFolder t = datasets::find_split_folder(c.data_dir, datasets::ImageSplit::train);
    const std::string e = c.eval_data.empty()
                              ? datasets::find_split_folder(c.data_dir, datasets::ImageSplit::eval, false).path
                              : c.eval_data;
    train = open_folder(t.path, cache_dir);
    if (!e.empty()) eval = open_folder(e, cache_dir);
  } else {
    train = open_shards(c.data_dir, cache_dir);
    if (!c.eval_data.empty()) eval = open_shards(c.eval_data, cache_dir);
  }
  if (!eval) log::info(c.dataset + ": no evaluation split (" +
                       (c.dataset == "imagefolder" ? "no val/ or test/ in --data" : "no --eval-data") + "): no test lines");
  return {train, eval};
}

// The evaluation split numbers its classes as the training split does: a folder's val/ has the same
// class folders (a missing one would shift every label after it); shards' labels are numbers, so
// the evaluation's may only be fewer.
void check_eval_classes(const datasets::ImageSource& train, const datasets::ImageSource* eval, bool folders) {
  if (eval == nullptr) return;
  const std::vector<std::string>& t = train.classes();
  const std::vector<std::string>& e = eval->classes();
  if (folders ? e == t : e.size() <= t.size()) return;
  throw DataError(eval->name() + ": expected the " + std::to_string(t.size()) + " classes of " + train.name() +
                      (folders ? " (the same class folders)" : " or fewer") + ", found " + std::to_string(e.size()) +
                      (folders ? " classes, from '" + e.front() + "' to '" + e.back() + "'" : " classes") + ".",
                  folders ? "give the evaluation folder one folder per class of the training folder (an empty one "
                            "is refused: leave the class out of both, or add its images)."
                          : "check that the evaluation shards belong to this training set.");
}

}  // namespace

bool is_image_dataset(const std::string& dataset) { return dataset == "imagefolder" || dataset == "webdataset"; }

const catalog::Recipe& image_recipe(const Recipe& c, const models::ModelInfo& info) {
  return imagenet_like(c, info) ? catalog::imagenet_recipe() : catalog::recipe_for(c.model);
}

void load_images(TrainSpec& spec, const Recipe& c, const models::ModelInfo& info, const std::string& cache_dir,
                 models::ModelOptions& model) {
  if (c.data_dir.empty()) {
    throw ConfigError("--dataset " + c.dataset + ": expected --data naming the images, found none.",
                      c.dataset == "imagefolder" ? "e.g. --data /scratch/imagenet (holding train/ and val/, one folder per class)"
                                                 : "e.g. --data '/scratch/shards/train-{000000..000127}.tar'");
  }
  if (c.augment.crop || c.augment.flip) {
    throw ConfigError("--augment with --dataset " + c.dataset + ": expected data held in memory, found images the "
                          "loader augments itself (resnet18 at 64 px or more: random-resized crop and flip).",
                      "leave --augment out.");
  }
  auto [train_source, eval_source] = open_sources(c, cache_dir);
  const int64_t classes = static_cast<int64_t>(train_source->classes().size());
  check_eval_classes(*train_source, eval_source.get(), c.dataset == "imagefolder");
  if (c.model == "resnet18") {
    model.num_classes = classes;
  } else if (classes > info.num_classes) {
    throw ConfigError("--model " + c.model + " on " + train_source->name() + ": expected at most " +
                          std::to_string(info.num_classes) + " classes (the model's outputs), found " +
                          std::to_string(classes) + ".",
                      "use --model resnet18, whose head takes the data's classes.");
  }
  model.image_size = image_size_of(c, info);
  datasets::ImageOptions train_options = image_options(c, info, true);
  if (c.decode == DecodeKind::gpu) {
    if (train_options.channels != 3) {
      throw ConfigError("--decode gpu with --model " + c.model + ": expected a model of colour (3-channel) images, found " +
                            std::to_string(train_options.channels) + " channel(s).",
                        "nvJPEG decodes colour JPEGs: use --decode cpu for grey images.");
    }
    train_options.decode = datasets::ImageDecode::gpu;
  }
  auto train = std::make_shared<datasets::ImageDataset>(train_source, train_options);
  log::info(train->describe());
  spec.train_samples = limited(train, c.limit_train_samples);
  if (eval_source) {
    spec.eval_samples = limited(std::make_shared<datasets::ImageDataset>(eval_source, image_options(c, info, false)),
                                c.limit_test_samples);
  }
}

}  // namespace train::builtin
