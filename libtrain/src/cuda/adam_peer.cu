// The fused Adam/AdamW update inside the GPUs' peer all-reduce kernel (adam_peer.h): the kernel of
// peer_allreduce.cuh compiled with an epilogue that is ATen's element update
// (ATen/native/cuda/fused_adam_utils.cuh, `adam_math`, no amsgrad, no grad scale, no maximize),
// written as the same expressions in the same float types so that the compiler makes the same
// choices (its explicit fmas, the bias corrections from the step count in device memory).
// DistTrainGpu.FusedOptimizersWithPerStepScheduleGraphEqualsEagerOnTwoGpus holds it to the eager
// step's bits.
#include "adam_peer.h"

#include "peer_allreduce.cuh"

#include <cmath>

namespace train::detail {
namespace {

struct AdamPeerEpilogue {
  static constexpr bool kActive = true;
  AdamPeerArgs a;

  struct Block {
    float lr;
  };
  __device__ Block begin_block() const { return {*a.options.lr_device}; }
  __device__ bool aligned16(int k, int64_t j0) const {
    const AdamFusedTensor& u = a.tensors[k];
    return peer_kernel::aligned16(u.param + j0) && peer_kernel::aligned16(u.exp_avg + j0) &&
           peer_kernel::aligned16(u.exp_avg_sq + j0);
  }

  struct Corrections {
    float bias_correction1, bias_correction2_sqrt;
  };
  // From the parameter's step count, as ATen's functor computes them per tensor.
  __device__ Corrections corrections(int k) const {
    const float step_count = *a.tensors[k].step;
    const float bias_correction1 = 1 - ::pow(a.options.beta1, step_count);
    const float bias_correction2 = 1 - ::pow(a.options.beta2, step_count);
    return {bias_correction1, std::sqrt(bias_correction2)};
  }

  // ATen's adam_math for one element.
  __device__ void element(float& param, float grad, float& exp_avg, float& exp_avg_sq, float lr,
                          const Corrections& c) const {
    const AdamFusedOptions& o = a.options;
    const float beta1 = o.beta1, beta2 = o.beta2, weight_decay = o.weight_decay, eps = o.eps;
    if (weight_decay != 0) {
      if (o.decoupled) {
        param -= lr * weight_decay * param;
      } else {
        grad += param * weight_decay;
      }
    }
    exp_avg = std::fma(beta1, exp_avg, std::fma(-beta1, grad, grad));
    exp_avg_sq = std::fma(beta2, exp_avg_sq, std::fma(-beta2, grad * grad, grad * grad));
    const float step_size = lr / c.bias_correction1;
    const float denom = (std::sqrt(exp_avg_sq) / c.bias_correction2_sqrt) + eps;
    param -= step_size * exp_avg / denom;
  }

  __device__ void apply4(const Block& b, int k, int64_t j0, int64_t jq, float4 g) const {
    const AdamFusedTensor& u = a.tensors[k];
    const Corrections c = corrections(k);
    auto* p4 = reinterpret_cast<float4*>(u.param + j0) + jq;
    auto* m4 = reinterpret_cast<float4*>(u.exp_avg + j0) + jq;
    auto* v4 = reinterpret_cast<float4*>(u.exp_avg_sq + j0) + jq;
    float4 p = *p4, m = *m4, v = *v4;
    element(p.x, g.x, m.x, v.x, b.lr, c);
    element(p.y, g.y, m.y, v.y, b.lr, c);
    element(p.z, g.z, m.z, v.z, b.lr, c);
    element(p.w, g.w, m.w, v.w, b.lr, c);
    *p4 = p, *m4 = m, *v4 = v;
  }
  __device__ void apply1(const Block& b, int k, int64_t j, float g) const {
    const AdamFusedTensor& u = a.tensors[k];
    float p = u.param[j], m = u.exp_avg[j], v = u.exp_avg_sq[j];
    element(p, g, m, v, b.lr, corrections(k));
    u.param[j] = p, u.exp_avg[j] = m, u.exp_avg_sq[j] = v;
  }
  __host__ bool fits(const PeerCall& call) const {
    if (!a.fits(call) || a.options.lr_device == nullptr) return false;
    for (int k = 0; k < a.count; ++k) {
      if (a.tensors[k].step == nullptr) return false;
    }
    return true;
  }
};

}  // namespace

int adam_peer_launch(const PeerMaps& maps, const PeerCall& call, const void* args, void* stream) {
  AdamPeerEpilogue e{*static_cast<const AdamPeerArgs*>(args)};
  return peer_kernel::peer_allreduce_launch_with(maps, call, e, stream);
}

}  // namespace train::detail
