// The fused optimizers' updates as a gradient bucket's epilogue (optimizer_epilogues.h).
#include "cuda/optimizer_epilogues.h"

#include "cuda/adadelta_peer.h"
#include "cuda/adam_peer.h"
#include "optim/adadelta_kernel.h"
#include "optim/fused_adam_buckets.h"
#include "train/base/log.h"

#include <c10/util/Exception.h>

namespace train::detail {
namespace {

class AdadeltaEpilogue : public BucketEpilogue {
 public:
  AdadeltaEpilogue(optim::Adadelta& adadelta, std::vector<at::Tensor> params)
      : adadelta_(adadelta), params_(std::move(params)) {}

  // A tensor the optimizer trains outside the averaged parameters keeps the step after them.
  bool begin() override { return details::updates_only(adadelta_, params_); }

  bool run(const std::vector<at::Tensor>& params) override { return adadelta_.update_bucket(params); }

  // The update's descriptors handed to the peer all-reduce's kernel (adadelta_peer.cu).
  bool run_fused(const std::vector<at::Tensor>& params,
                 const std::function<void(const PeerFusedEpilogue&)>& average) override {
    return details::AdadeltaKernel::update_bucket(
        adadelta_, params, [&](const AdadeltaFusedTensor* t, int n, const AdadeltaFusedOptions& o) {
          TORCH_CHECK(static_cast<size_t>(n) == params.size() && n <= kPeerMaxInputs, "the fused update covers ", n,
                      " of ", params.size(), " gradients of a bucket");
          AdadeltaPeerArgs args;
          for (int k = 0; k < n; ++k) args.tensors[k] = t[k];
          args.count = n;
          args.options = o;
          const PeerFusedEpilogue fused{&adadelta_peer_launch, &args};
          average(fused);
        });
  }

 private:
  optim::Adadelta& adadelta_;
  std::vector<at::Tensor> params_;
};

// FusedAdam's and FusedAdamW's: the step counts of every averaged parameter advanced at the
// capture's start, beside the forward (begin), then each bucket's update after its average: ATen's
// kernel, or the same arithmetic inside the peer all-reduce's kernel (adam_peer.cu).
class AdamEpilogue : public BucketEpilogue {
 public:
  AdamEpilogue(torch::optim::Optimizer& optimizer, std::vector<at::Tensor> params)
      : optimizer_(optimizer), params_(std::move(params)) {}

  bool begin() override {
    std::string why;
    armed_ = details::FusedAdamBuckets::applies(optimizer_, params_, &why);
    if (!armed_) {
      log::debug("the Adam update runs after every bucket's average: " + why);
      return false;
    }
    details::FusedAdamBuckets::advance_steps(optimizer_, params_);
    return true;
  }

  // Once the counts are advanced the update must follow: a bucket that can't take it fails the
  // capture (nothing of it ran), never the optimizer's step after it (the counts twice).
  bool run(const std::vector<at::Tensor>& params) override {
    TORCH_CHECK(armed_, "a bucket's Adam update before the step counts were advanced");
    details::FusedAdamBuckets::update(optimizer_, params);
    return true;
  }

  bool run_fused(const std::vector<at::Tensor>& params,
                 const std::function<void(const PeerFusedEpilogue&)>& average) override {
    if (!armed_ || params.size() > static_cast<size_t>(kPeerMaxInputs)) return false;
    // The kernel walks each gradient and its parameter's tensors in storage order: alike only.
    for (const auto& p : params) {
      if (!p.grad().defined() || p.grad().strides() != p.strides()) return false;
    }
    std::vector<details::FusedAdamBuckets::Tensors> tensors;
    const auto hyper = details::FusedAdamBuckets::describe(optimizer_, params, &tensors);
    if (!hyper) return false;
    AdamPeerArgs args;
    for (size_t k = 0; k < tensors.size(); ++k) {
      const auto& t = tensors[k];
      args.tensors[k] = {t.param.data_ptr<float>(), t.exp_avg.data_ptr<float>(), t.exp_avg_sq.data_ptr<float>(),
                         t.step.data_ptr<float>(), t.param.numel()};
    }
    args.count = static_cast<int>(tensors.size());
    // Each double rounded to float, as ATen's kernel takes them.
    args.options.beta1 = static_cast<float>(hyper->beta1);
    args.options.beta2 = static_cast<float>(hyper->beta2);
    args.options.weight_decay = static_cast<float>(hyper->weight_decay);
    args.options.eps = static_cast<float>(hyper->eps);
    args.options.lr_device = hyper->lr.data_ptr<float>();
    args.options.decoupled = hyper->decoupled;
    const PeerFusedEpilogue fused{&adam_peer_launch, &args};
    average(fused);
    // Updated in place as ATen's kernel would: autograd refuses a backward that needs an old value.
    for (const auto& p : params) p.unsafeGetTensorImpl()->bump_version();
    return true;
  }

 private:
  torch::optim::Optimizer& optimizer_;
  std::vector<at::Tensor> params_;
  bool armed_ = false;
};

}  // namespace

std::shared_ptr<BucketEpilogue> bucket_epilogue_of(torch::optim::Optimizer& optimizer,
                                                   const std::vector<at::Tensor>& params) {
  if (optim::Adadelta* adadelta = details::AdadeltaKernel::of(optimizer)) {
    return std::make_shared<AdadeltaEpilogue>(*adadelta, params);
  }
  if (details::FusedAdamBuckets::is_fused_adam(optimizer)) return std::make_shared<AdamEpilogue>(optimizer, params);
  return nullptr;
}

}  // namespace train::detail
