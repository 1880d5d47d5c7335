// The example's loss: cross-entropy with label smoothing, written out (what
// torch.nn.CrossEntropyLoss(label_smoothing=eps) computes), in the Trainer's LossFn shape.
#pragma once

#include <train/trainer.h>

#include <ATen/ops/gather.h>
#include <ATen/ops/log_softmax.h>

namespace example {

/// Label-smoothing cross-entropy over logits [N, C] and class indices [N]: the target class gets
/// probability 1 - eps + eps / C, every other class eps / C.
inline train::LossFn label_smoothing_loss(double eps = 0.1) {
  return [eps](const at::Tensor& logits, const at::Tensor& target, train::Reduction reduction) {
    const at::Tensor log_p = at::log_softmax(logits, /*dim=*/1);
    const at::Tensor nll = -log_p.gather(1, target.unsqueeze(1)).squeeze(1);
    const at::Tensor uniform = -log_p.mean(/*dim=*/1);
    const at::Tensor per_sample = (1.0 - eps) * nll + eps * uniform;
    return reduction == train::Reduction::mean ? per_sample.mean() : per_sample.sum();
  };
}

}  // namespace example
