// The fused Adadelta update as a gradient bucket's epilogue (adadelta_epilogue.h).
#include "cuda/adadelta_epilogue.h"

#include "adadelta_kernel.h"
#include "cuda/adadelta_peer.h"

#include <c10/util/Exception.h>

namespace train::detail {
namespace {

class AdadeltaEpilogue : public BucketEpilogue {
 public:
  explicit AdadeltaEpilogue(optim::Adadelta& adadelta) : adadelta_(adadelta) {}

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
};

}  // namespace

std::shared_ptr<BucketEpilogue> bucket_epilogue_of(torch::optim::Optimizer& optimizer) {
  auto* adadelta = dynamic_cast<optim::Adadelta*>(&optimizer);
  return adadelta != nullptr ? std::make_shared<AdadeltaEpilogue>(*adadelta) : nullptr;
}

}  // namespace train::detail
