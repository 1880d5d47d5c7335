// The data interface the Trainer reads: a size, and a batch for a set of indices on the device.
// InMemoryDataset (two tensors, gathered with index_select) is the built-in implementation.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace train {

/// One batch: the model's input and the loss's target, both with the batch as dimension 0. The
/// built-in losses (nll_loss, cross_entropy_loss) take class indices: targets int64 [B] for
/// output [B, C], or [B, d1, ...] (e.g. [B, seq_len]) for output [B, C, d1, ...]; a LossFn of
/// your own may take targets of any shape and type.
struct Batch {
  at::Tensor inputs;
  at::Tensor targets;
};

/// What the Trainer needs of a dataset. Implement it for your own format; the Trainer draws
/// index sets with its DistributedSampler and asks for the batch of each.
class Dataset {
 public:
  virtual ~Dataset() = default;

  /// Number of samples.
  virtual int64_t size() const = 0;

  /// The samples at `indices` (int64 [B], on the device given to the last to(), the CPU before),
  /// as tensors on that device. Called for every step, so it should not block on the host.
  virtual Batch get_batch(const at::Tensor& indices) = 0;

  /// Moves the data to `device`; the Trainer calls it once, before training.
  virtual void to(const at::Device& device) { (void)device; }

  /// A name for logs, e.g. "fashion-mnist/train".
  virtual std::string name() const { return "data"; }

  /// Whether a CUDA graph may capture get_batch and replay it for later index sets: true only
  /// when the batch is a pure function of `indices` computed by device ops (no host reads, no
  /// random numbers, no state that changes between calls). When false, as by default, the
  /// graph step calls get_batch eagerly and copies the batch into the graph's fixed inputs.
  virtual bool capturable() const { return false; }
};

/// A dataset held whole in two tensors (inputs [N, ...], targets [N, ...] with the same N, shaped
/// as the loss takes them: see Batch); get_batch gathers rows.
class InMemoryDataset : public Dataset {
 public:
  /// @throws train::ConfigError when the first dimensions differ or either tensor is undefined.
  InMemoryDataset(at::Tensor inputs, at::Tensor targets, std::string name = "data");

  int64_t size() const override { return targets_.size(0); }
  Batch get_batch(const at::Tensor& indices) override;
  void to(const at::Device& device) override;
  std::string name() const override { return name_; }
  bool capturable() const override { return true; }  ///< index_select only

  const at::Tensor& inputs() const { return inputs_; }
  const at::Tensor& targets() const { return targets_; }

 private:
  at::Tensor inputs_, targets_;
  std::string name_;
};

}  // namespace train
