// The one-shot peer all-reduce (peer_allreduce.h): the kernel (peer_allreduce.cuh) with no
// epilogue, or the one a call's PeerFusedEpilogue launches.
#include "peer_allreduce.h"

#include "peer_allreduce.cuh"

namespace train::detail {

size_t peer_buffer_bytes(int slots, size_t capacity, size_t ll_capacity, int world) {
  return peer_kernel::flag_area_bytes(slots) + 2 * peer_kernel::half_floats(capacity) * sizeof(float) +
         2 * static_cast<size_t>(world) * ll_capacity * sizeof(uint64_t);
}

bool peer_allreduce_available() { return true; }

int peer_allreduce_launch(const PeerMaps& maps, const PeerCall& call, void* stream) {
  if (call.fused != nullptr) return call.fused->launch(maps, call, call.fused->args, stream);
  return peer_kernel::peer_allreduce_launch_with(maps, call, peer_kernel::NoEpilogue{}, stream);
}

}  // namespace train::detail
