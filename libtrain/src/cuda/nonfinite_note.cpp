// The non-finite watch's note as one CUDA kernel launch (nonfinite.h, cuda/nonfinite_fused.h)
// where libtrain's kernels are built and the tensors qualify; otherwise the ATen ops run.
// CUDA builds only; cpu/nonfinite_no_kernel.cpp stands in elsewhere.
#include "stops/nonfinite.h"

#include "cuda/nonfinite_fused.h"
#include "step/grad_clip.h"

#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAStream.h>

namespace train::detail {
namespace {

// `t` as the kernel reads it, or false where it can't: another device, a layout or dtype it
// doesn't read. Any dense layout will do (a sum of squares doesn't mind the order).
bool as_kernel_tensor(const at::Tensor& t, const at::Device& device, NonFiniteFusedTensor* out) {
  if (!t.defined() || t.device() != device || t.layout() != at::kStrided || !t.is_non_overlapping_and_dense()) {
    return false;
  }
  switch (t.scalar_type()) {
    case at::kFloat: out->dtype = NonFiniteDtype::f32; break;
    case at::kHalf: out->dtype = NonFiniteDtype::f16; break;
    case at::kBFloat16: out->dtype = NonFiniteDtype::bf16; break;
    case at::kDouble: out->dtype = NonFiniteDtype::f64; break;
    default: return false;
  }
  out->data = t.const_data_ptr();
  out->numel = t.numel();
  return true;
}

}  // namespace

void NonFiniteWatch::init_kernel() {
  if (!device_.is_cuda() || !nonfinite_fused_available()) return;
  const int64_t bytes = static_cast<int64_t>(nonfinite_fused_scratch_bytes(static_cast<int>(params_.size())));
  kernel_scratch_ = at::zeros({bytes}, at::TensorOptions().dtype(at::kByte).device(device_));
}

bool NonFiniteWatch::note_kernel(const at::Tensor& loss, const int64_t* step) {
  last_fused_ = false;
  if (!kernel_allowed_ || !kernel_scratch_.defined()) return false;
  NonFiniteFusedCall call;
  if (loss.numel() != 1 || !as_kernel_tensor(loss, device_, &call.loss)) return false;
  std::vector<int> with_grad;
  std::vector<at::Tensor> grads;
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& g = params_[i].second.grad();
    if (!g.defined()) continue;
    with_grad.push_back(static_cast<int>(i));
    grads.push_back(g);
  }
  // The clipping's norms where they fit, as the ATen path reads them (bad_values).
  std::vector<NonFiniteFusedTensor> tensors(grads.size());
  if (clip_norms_fit(grads.size())) {
    if (!as_kernel_tensor(clip_->norms, device_, &call.norms)) return false;
  } else {
    for (size_t k = 0; k < grads.size(); ++k) {
      if (!as_kernel_tensor(grads[k], device_, &tensors[k])) return false;
    }
    call.grads = tensors.data();
  }
  call.count = static_cast<int>(grads.size());
  call.scratch = kernel_scratch_.mutable_data_ptr();
  call.max_tensors = static_cast<int>(params_.size());
  call.first = first_.mutable_data_ptr<int64_t>();
  call.step = step != nullptr ? nullptr : step_dev_.mutable_data_ptr<int64_t>();
  call.host_step = step != nullptr ? *step : 0;
  call.stride = stride_;
  const auto stream = c10::cuda::getCurrentCUDAStream(device_.index());
  const int rc = nonfinite_fused_launch(call, stream.stream());
  TORCH_CHECK(rc == 0, "the non-finite watch's kernel failed to launch (CUDA error ", rc, ")");
  with_grad_ = std::move(with_grad);  // describe() names the gradients by it
  last_fused_ = true;
  return true;
}

}  // namespace train::detail
