// libtrain's CUDA step's access to Adadelta's fused kernel (private): a gradient bucket's update
// handed to a kernel of the caller's, so the GPU peer all-reduce averages and updates in one.
#pragma once

#include "cuda/adadelta_fused.h"
#include "train/adadelta.h"

#include <functional>
#include <vector>

namespace train::optim {

struct Adadelta::KernelLaunch {
  std::function<void(const detail::AdadeltaFusedTensor* tensors, int count, const detail::AdadeltaFusedOptions& options)>
      apply;
};

}  // namespace train::optim

namespace train::details {

struct AdadeltaKernel {
  /// `optimizer` as libtrain's Adadelta (subclasses too), or null.
  static optim::Adadelta* of(torch::optim::Optimizer& optimizer) { return dynamic_cast<optim::Adadelta*>(&optimizer); }
  using Launch = std::function<void(const detail::AdadeltaFusedTensor* tensors, int count,
                                    const detail::AdadeltaFusedOptions& options)>;
  /// Adadelta::update_bucket, with the update applied by `launch` (one descriptor per parameter,
  /// in `params` order) instead of queued by the optimizer; all of `params` must share one
  /// parameter group (false otherwise, with nothing changed).
  static bool update_bucket(optim::Adadelta& adadelta, const std::vector<at::Tensor>& params, const Launch& launch) {
    const optim::Adadelta::KernelLaunch kernel{launch};
    return adadelta.bucket_update(params, &kernel);
  }
};

}  // namespace train::details
