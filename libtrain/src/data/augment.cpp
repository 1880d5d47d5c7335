// Crop and flip as a handful of tensor ops on the batch's device: pad, then gather the window
// at random offsets (two gathers), then a masked flip. No host work per sample, no copies back.
#include "train/augment.h"

#include "train/base/error.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/flip.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/where.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/scalar_tensor.h>

#include <sstream>

namespace train {
namespace {

constexpr const char* kKeyBatches = "augment_batches_drawn";
constexpr const char* kKeyOps = "augment_ops";

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class AugmentCheckpoint : public Callback {
 public:
  explicit AugmentCheckpoint(std::shared_ptr<AugmentedDataset> data) : data_(std::move(data)) {}

  void on_save_checkpoint(torch::serialize::OutputArchive& archive) override {
    archive.write(kKeyBatches, c10::IValue(data_->batches_drawn()));
    archive.write(kKeyOps, c10::IValue(data_->options().describe()));
  }

  void on_load_checkpoint(torch::serialize::InputArchive& archive) override {
    c10::IValue batches, ops;
    if (!archive.try_read(kKeyBatches, batches) || !archive.try_read(kKeyOps, ops) || !batches.isInt() ||
        !ops.isString()) {
      throw CheckpointError("checkpoint: expected the augmentation state of --augment " + data_->options().describe() +
                                ", found none (it was written by a run without --augment).",
                            "resume with the flags of the run that wrote it, or start afresh with --resume never.");
    }
    if (ops.toStringRef() != data_->options().describe()) {
      throw CheckpointError("checkpoint: expected the augmentation --augment " + data_->options().describe() +
                                ", found one written with --augment " + ops.toStringRef() + ".",
                            "resume with the flags of the run that wrote it, or start afresh with --resume never.");
    }
    data_->set_batches_drawn(batches.toInt());
  }

 private:
  std::shared_ptr<AugmentedDataset> data_;
};

}  // namespace

std::string AugmentOptions::describe() const {
  if (crop && flip) return "crop,flip";
  if (crop) return "crop";
  if (flip) return "flip";
  return "";
}

AugmentOptions parse_augment(const std::string& text) {
  AugmentOptions o;
  if (text.empty() || text == "none") return o;
  std::stringstream in(text);
  std::string word;
  while (std::getline(in, word, ',')) {
    if (word == "crop") {
      o.crop = true;
    } else if (word == "flip") {
      o.flip = true;
    } else {
      throw ConfigError("--augment '" + text + "': expected a comma-separated list of crop and flip, found '" + word + "'.",
                        "e.g. --augment crop,flip (random 32x32 crop after 4 pixels of padding, horizontal flip).");
    }
  }
  return o;
}

AugmentedDataset::AugmentedDataset(std::shared_ptr<Dataset> inner, AugmentOptions options, uint64_t seed, int rank)
    : inner_(std::move(inner)), options_(options), seed_(seed), rank_(rank),
      generator_(at::detail::createCPUGenerator(seed)) {
  if (!inner_) throw ConfigError("AugmentedDataset: expected a dataset to wrap, found none.", "pass the training data.");
  if (options_.padding < 0) {
    throw ConfigError("AugmentedDataset: expected padding of 0 or more pixels, found " + std::to_string(options_.padding) + ".",
                      "the CIFAR-10 recipe pads 4 pixels.");
  }
}

void AugmentedDataset::to(const at::Device& device) {
  inner_->to(device);
  generator_ = device.is_cuda() ? at::detail::getCUDAHooks().getNewGenerator(device.index())
                                : at::detail::createCPUGenerator(seed_);
}

Batch AugmentedDataset::get_batch(const at::Tensor& indices) {
  Batch b = inner_->get_batch(indices);
  const int64_t drawn = batches_++;
  if (!options_.crop && !options_.flip) return b;
  const at::Tensor& x = b.inputs;
  if (x.dim() != 4) {
    throw ConfigError("--augment " + options_.describe() + " on " + inner_->name() +
                          ": expected images [N, C, H, W], found a tensor of " + std::to_string(x.dim()) + " dimensions.",
                      "augment image datasets only.");
  }
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  // The numbers of a batch depend on (seed, rank, batch) only, never on what ran before. (The
  // sampling ops lock the generator themselves; get_batch is called from one thread.)
  generator_.set_current_seed(splitmix64(splitmix64(seed_) ^ splitmix64(uint64_t(rank_) + 1) ^ uint64_t(drawn)));
  const auto long_opts = x.options().dtype(at::kLong);
  at::Tensor out = x;
  if (options_.crop && options_.padding > 0) {
    const int64_t p = options_.padding;
    at::Tensor padded = at::constant_pad_nd(x, {p, p, p, p}, options_.pad_value);
    at::Tensor dy = at::randint(0, 2 * p + 1, {n}, generator_, long_opts);
    at::Tensor dx = at::randint(0, 2 * p + 1, {n}, generator_, long_opts);
    at::Tensor rows = (dy.view({n, 1}) + at::arange(h, long_opts).view({1, h})).view({n, 1, h, 1}).expand({n, c, h, w + 2 * p});
    at::Tensor cols = (dx.view({n, 1}) + at::arange(w, long_opts).view({1, w})).view({n, 1, 1, w}).expand({n, c, h, w});
    out = padded.gather(2, rows).gather(3, cols);
  }
  if (options_.flip) {
    at::Tensor flip = at::randint(0, 2, {n}, generator_, long_opts).to(at::kBool).view({n, 1, 1, 1});
    out = at::where(flip, out.flip({3}), out);
  }
  b.inputs = out.contiguous();
  return b;
}

std::shared_ptr<Callback> augment_checkpoint_callback(std::shared_ptr<AugmentedDataset> data) {
  if (!data) throw ConfigError("augment_checkpoint_callback: expected an AugmentedDataset, found none.", "pass the wrapped training data.");
  return std::make_shared<AugmentCheckpoint>(std::move(data));
}

}  // namespace train
