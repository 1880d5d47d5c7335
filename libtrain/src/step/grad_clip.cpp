// Gradient clipping by total norm (step/grad_clip.h).
#include "step/grad_clip.h"

#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/add.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/reciprocal.h>
#include <ATen/ops/stack.h>
#include <c10/core/GradMode.h>

namespace train::detail {

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return at::Tensor();
  const at::Tensor norms = at::stack(at::_foreach_norm(grads, 2.0));
  const at::Tensor total = at::linalg_vector_norm(norms, 2.0);
  const at::Tensor coef = at::clamp(at::mul(at::reciprocal(at::add(total, 1e-6)), max_norm), /*min=*/std::nullopt, /*max=*/1.0);
  at::_foreach_mul_(grads, coef);
  return norms;
}

}  // namespace train::detail
