// Losses as the Trainer and the training step see them: a function of the model's output, the
// targets and the reduction, and the two the built-in models use.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace train {

/// How a loss reduces over the batch: the Trainer trains on the mean and evaluates with the sum.
enum class Reduction { mean, sum };

/// A loss: (model output, targets, reduction) -> scalar tensor.
using LossFn = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target, Reduction)>;

/// Negative log-likelihood for models that output log-probabilities (log_softmax).
LossFn nll_loss();
/// Cross-entropy for models that output raw scores (logits).
LossFn cross_entropy_loss();

/// `loss`, marked as one whose targets are integer class indices (as nll_loss() and
/// cross_entropy_loss() are): the Trainer checks the first batch's targets for it.
LossFn class_index_loss(LossFn loss);
/// Whether `loss` is nll_loss(), cross_entropy_loss() or a class_index_loss().
bool expects_class_indices(const LossFn& loss);

}  // namespace train
