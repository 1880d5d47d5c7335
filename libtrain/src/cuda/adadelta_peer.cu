// The fused Adadelta update inside the GPUs' peer all-reduce kernel (adadelta_peer.h): the kernel
// of peer_allreduce.cuh compiled with Adadelta's element update (adadelta_fused_math.cuh) as its
// epilogue, the same arithmetic as the fused kernel's.
#include "adadelta_peer.h"

#include "adadelta_fused_math.cuh"
#include "peer_allreduce.cuh"

namespace train::detail {
namespace {

struct AdadeltaPeerEpilogue {
  static constexpr bool kActive = true;
  AdadeltaPeerArgs a;

  struct Block {
    float lr;
  };
  // The rate from the device where the optimizer keeps it there (a captured step follows it).
  __device__ Block begin_block() const { return {a.options.lr_device != nullptr ? *a.options.lr_device : a.options.lr}; }
  __device__ bool aligned16(int k, int64_t j0) const {
    const AdadeltaFusedTensor& u = a.tensors[k];
    return peer_kernel::aligned16(u.param + j0) && peer_kernel::aligned16(u.square_avg + j0) &&
           peer_kernel::aligned16(u.acc_delta + j0);
  }
  __device__ void apply4(const Block& b, int k, int64_t j0, int64_t jq, float4 g) const {
    const AdadeltaFusedTensor& u = a.tensors[k];
    const AdadeltaFusedOptions& o = a.options;
    auto* p4 = reinterpret_cast<float4*>(u.param + j0) + jq;
    auto* sq4 = reinterpret_cast<float4*>(u.square_avg + j0) + jq;
    auto* acc4 = reinterpret_cast<float4*>(u.acc_delta + j0) + jq;
    float4 p = *p4, sq = *sq4, acc = *acc4;
    adadelta_element(p.x, g.x, sq.x, acc.x, o, b.lr);
    adadelta_element(p.y, g.y, sq.y, acc.y, o, b.lr);
    adadelta_element(p.z, g.z, sq.z, acc.z, o, b.lr);
    adadelta_element(p.w, g.w, sq.w, acc.w, o, b.lr);
    *p4 = p, *sq4 = sq, *acc4 = acc;
  }
  __device__ void apply1(const Block& b, int k, int64_t j, float g) const {
    const AdadeltaFusedTensor& u = a.tensors[k];
    float p = u.param[j], sq = u.square_avg[j], acc = u.acc_delta[j];
    adadelta_element(p, g, sq, acc, a.options, b.lr);
    u.param[j] = p, u.square_avg[j] = sq, u.acc_delta[j] = acc;
  }
  __host__ bool fits(const PeerCall& call) const { return a.fits(call); }
};

}  // namespace

int adadelta_peer_launch(const PeerMaps& maps, const PeerCall& call, const void* args, void* stream) {
  AdadeltaPeerEpilogue e{*static_cast<const AdadeltaPeerArgs*>(args)};
  return peer_kernel::peer_allreduce_launch_with(maps, call, e, stream);
}

}  // namespace train::detail
