// The exponential moving average of the weights (TrainSpec::ema_decay, --ema-decay): updated after
// every optimizer step, swapped into the model for evaluation, kept in checkpoints. Private.
#pragma once

#include "train/config.h"
#include "train/train_spec.h"

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <optional>
#include <string>
#include <vector>

namespace train::detail {

/// ema = decay x ema + (1 - decay) x weights over the model's floating-point parameters and
/// buffers (e.g. BatchNorm's running statistics), as torch.optim.swa_utils.AveragedModel with
/// get_ema_multi_avg_fn does; other buffers are the model's own.
class WeightAverage {
 public:
  /// Starts as a copy of `model`'s weights (on their device). `model` outlives it.
  WeightAverage(torch::nn::Module& model, double decay);
  double decay() const { return decay_; }
  /// After an optimizer step: one fused kernel on the device (outside a CUDA graph, after its replay).
  void update();
  /// Exchanges the average and the model's weights in place (the tensors stay the same objects,
  /// so a captured step keeps its pointers); twice restores them.
  void swap();

  /// Swaps the average into the model for the guard's life (an evaluation).
  class InModel {
   public:
    explicit InModel(WeightAverage& average) : average_(average) { average_.swap(); }
    ~InModel() { average_.swap(); }
    InModel(const InModel&) = delete;
    InModel& operator=(const InModel&) = delete;

   private:
    WeightAverage& average_;
  };

  void save(torch::serialize::OutputArchive& archive) const;
  /// `archive` null or without an average (a checkpoint written without --ema-decay): the average
  /// starts again from the model's (resumed) weights, with a warning. Another decay: a warning.
  void load(torch::serialize::InputArchive* archive);

 private:
  std::vector<std::string> names_;
  std::vector<at::Tensor> live_;     // the model's tensors
  std::vector<at::Tensor> average_;  // ours, same order
  double decay_;
};

}  // namespace train::detail
