// Adadelta's fused CUDA update (train/adadelta.h): one kernel for a whole group (or one gradient
// bucket), reading the learning rate from device memory so a captured step follows a new rate.
// CUDA builds only; without libtrain's kernels (no CUDA compiler) it never applies.
#include "optim/adadelta_kernel.h"

#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAStream.h>

namespace train::optim {

bool Adadelta::kernel_update(size_t group_index, const std::vector<torch::Tensor>& params, const AdadeltaOptions& o,
                             bool launch, const KernelLaunch* launcher) {
  if (!detail::adadelta_fused_available()) return false;
  for (const auto& p : params) {
    const torch::Tensor& g = p.grad();
    if (!p.is_cuda() || g.is_sparse() || p.scalar_type() != at::kFloat || g.scalar_type() != at::kFloat ||
        !p.is_non_overlapping_and_dense() || g.strides() != p.strides() || g.device() != p.device() ||
        p.device() != params.front().device()) {
      return false;
    }
  }
  // The rate lives on the device: eager steps refresh it, a captured step reads whatever
  // sync_lr() last wrote. (A first update inside a capture keeps the foreach path,
  // whose rate the graph bakes in.)
  const bool capturing = c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
  const c10::Device device = params.front().device();
  if (capturing && !details::rates_of(*this).has(group_index, device)) return false;
  std::vector<detail::AdadeltaFusedTensor> tensors;
  std::vector<AdadeltaParamState*> states;
  for (const auto& p : params) {
    auto& st = state_for(p);
    states.push_back(&st);
    if (st.square_avg().strides() != p.strides() || st.acc_delta().strides() != p.strides() ||
        st.square_avg().scalar_type() != at::kFloat || st.acc_delta().scalar_type() != at::kFloat ||
        st.square_avg().device() != p.device() || st.acc_delta().device() != p.device()) {
      return false;  // e.g. state loaded in another layout or place: the foreach path copes (or says why)
    }
    tensors.push_back({p.data_ptr<float>(), p.grad().const_data_ptr<float>(), st.square_avg().data_ptr<float>(),
                       st.acc_delta().data_ptr<float>(), p.numel()});
  }
  if (!launch) return true;
  for (AdadeltaParamState* st : states) st->step(st->step() + 1);  // bookkeeping only: unused by the update
  detail::AdadeltaFusedOptions fo;
  fo.lr = static_cast<float>(o.lr());
  fo.rho = static_cast<float>(o.rho());
  fo.eps = static_cast<float>(o.eps());
  fo.weight_decay = static_cast<float>(o.weight_decay());
  fo.maximize = o.maximize();
  // An eager step with a new rate writes it (one small fill); a captured one reads what sync_lr() wrote.
  fo.lr_device = device_lr(group_index, device, /*refresh=*/!capturing).const_data_ptr<float>();
  if (launcher != nullptr) {
    launcher->apply(tensors.data(), static_cast<int>(tensors.size()), fo);
    return true;
  }
  const auto stream = c10::cuda::getCurrentCUDAStream(params.front().device().index());
  const int rc = detail::adadelta_fused_launch(tensors.data(), static_cast<int>(tensors.size()), fo, stream.stream());
  TORCH_CHECK(rc == 0, "the fused Adadelta kernel failed to launch (CUDA error ", rc, ")");
  return true;
}

}  // namespace train::optim
