// Gradient clipping by total norm (--clip-grad-norm): torch.nn.utils.clip_grad_norm_'s foreach
// arithmetic in device ops only (no host sync), so a CUDA graph captures it with the step. Private.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace train::detail {

/// --clip-grad-norm for a run: the bound, the parameters, and the last step's gradient norms,
/// which the non-finite watch reads instead of computing them again (nonfinite.h).
struct GradClip {
  double max_norm = 0;
  std::vector<at::Tensor> params;  ///< the model's parameters, in its order
  /// The last clipped step's 2-norm of each gradient before clipping, one per parameter that had
  /// a gradient, in parameter order, stacked (a 1-d tensor on the device). A captured step points
  /// it at the graph's own output, which every replay rewrites.
  at::Tensor norms;
};

/// torch.nn.utils.clip_grad_norm_(params, max_norm) with norm 2 and foreach, operation for
/// operation (torch/nn/utils/clip_grad.py): norms = _foreach_norm(grads), total =
/// vector_norm(stack(norms)), coef = clamp(reciprocal(total + 1e-6) * max_norm, max=1) (Python's
/// `max_norm / tensor` is reciprocal-then-multiply), grads *= coef. Parameters without a gradient
/// are left out. No host sync. Returns stack(norms) (empty when no parameter has a gradient).
at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace train::detail
