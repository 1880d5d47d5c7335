// The ready-made losses (train/loss.h): negative log-likelihood and cross-entropy over class
// indices, and the mark that tells the Trainer a loss expects class indices as targets.
#include "train/loss.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>

namespace train {
namespace {
// A loss whose targets are class indices; its type marks it (expects_class_indices).
struct ClassIndexLoss {
  LossFn inner;
  at::Tensor operator()(const at::Tensor& out, const at::Tensor& target, Reduction r) const {
    return inner(out, target, r);
  }
};

}  // namespace

LossFn class_index_loss(LossFn loss) { return ClassIndexLoss{std::move(loss)}; }

bool expects_class_indices(const LossFn& loss) { return loss.target<ClassIndexLoss>() != nullptr; }

LossFn nll_loss() {
  return ClassIndexLoss{[](const at::Tensor& out, const at::Tensor& target, Reduction r) {
    namespace F = torch::nn::functional;
    auto options = F::NLLLossFuncOptions();
    if (r == Reduction::sum) {
      options.reduction(torch::kSum);
    } else {
      options.reduction(torch::kMean);
    }
    return F::nll_loss(out, target, options);
  }};
}

LossFn cross_entropy_loss() {
  // nll_loss(log_softmax(x)): what cross_entropy computes, spelled out so the numbers match it.
  return ClassIndexLoss{[nll = nll_loss()](const at::Tensor& out, const at::Tensor& target, Reduction r) {
    return nll(torch::log_softmax(out, 1), target, r);
  }};
}

}  // namespace train
