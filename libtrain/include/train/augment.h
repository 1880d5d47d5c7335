// Data augmentation on the device the data lives on: random crop with padding and horizontal flip
// (the CIFAR-10 recipe's `--augment crop,flip`), as a Dataset wrapper with its own generator, and
// the Callback that puts its position into checkpoints so a resumed run draws the same numbers.
#pragma once

#include "train/callback.h"
#include "train/data.h"

#include <ATen/core/Generator.h>

#include <cstdint>
#include <memory>
#include <string>

namespace train {

/// What to apply to each training image.
struct AugmentOptions {
  bool crop = false;      ///< random crop back to the image size after padding each side
  int64_t padding = 4;    ///< pixels of padding for the crop (torchvision's RandomCrop(32, padding=4))
  bool flip = false;      ///< horizontal flip with probability 1/2
  /// The value padding pixels get, in the normalized data's units (black: (0 - mean) / std).
  double pad_value = 0;

  /// "crop,flip", "crop", "flip" or "" (none).
  std::string describe() const;
};

/// Parses --augment: a comma-separated list of `crop` and `flip` ("" or "none": nothing).
/// @throws train::ConfigError naming the flag and the unknown word.
AugmentOptions parse_augment(const std::string& text);

/// A Dataset whose get_batch returns the wrapped dataset's batch, randomly cropped and flipped on
/// the batch's device. The random numbers come from its own generator (CPU or CUDA, matching the
/// device), reseeded for every batch from (seed, rank, batches drawn so far): a run is
/// deterministic given --seed, ranks draw different numbers, and the only state to checkpoint is
/// the count of batches drawn, the same on every rank (augment_checkpoint_callback() saves it).
class AugmentedDataset : public Dataset {
 public:
  /// @param inner the data, images [N, C, H, W] (H, W > padding when cropping).
  /// @param rank this process's rank (different ranks draw different numbers).
  AugmentedDataset(std::shared_ptr<Dataset> inner, AugmentOptions options, uint64_t seed, int rank);

  int64_t size() const override { return inner_->size(); }
  Batch get_batch(const at::Tensor& indices) override;
  void to(const at::Device& device) override;
  std::string name() const override { return inner_->name(); }
  /// Random crops and flips draw new numbers for every batch from the host: never captured.
  bool capturable() const override { return !options_.crop && !options_.flip && inner_->capturable(); }

  /// Batches drawn so far (the generator's position).
  int64_t batches_drawn() const { return batches_; }
  /// Moves the generator to a position (what resume does).
  void set_batches_drawn(int64_t batches) { batches_ = batches; }
  const AugmentOptions& options() const { return options_; }

 private:
  std::shared_ptr<Dataset> inner_;
  AugmentOptions options_;
  uint64_t seed_;
  int rank_;
  int64_t batches_ = 0;
  at::Generator generator_;
};

/// A callback (add it to TrainSpec::callbacks) that saves the dataset's position into every
/// checkpoint and restores it on resume, so a resumed run crops and flips as an unbroken one.
/// Resuming a checkpoint without that state, or written with other augmentations, is a
/// train::CheckpointError.
std::shared_ptr<Callback> augment_checkpoint_callback(std::shared_ptr<AugmentedDataset> data);

}  // namespace train
