// A CUDA build without a CUDA compiler: libtrain's own kernels (adadelta_fused.cu,
// peer_allreduce.cu, adadelta_peer.cu, adam_peer.cu, nonfinite_fused.cu, graph_memsets.cu,
// step_inputs.cu) aren't compiled, and these say so. The fused Adadelta falls back to torch's
// foreach ops; the GPUs average through NCCL instead of each other's memory; the non-finite watch
// notes with ATen ops; a captured step's inputs are copied and filled by ATen.
#include "cuda/adadelta_fused.h"
#include "cuda/adadelta_peer.h"
#include "cuda/adam_peer.h"
#include "cuda/graph_memsets.h"
#include "cuda/nonfinite_fused.h"
#include "cuda/peer_allreduce.h"
#include "cuda/step_inputs.h"

namespace train::detail {

bool adadelta_fused_available() { return false; }
int adadelta_fused_launch(const AdadeltaFusedTensor*, int, const AdadeltaFusedOptions&, void*) { return -1; }
bool peer_allreduce_available() { return false; }
size_t peer_buffer_bytes(int, size_t, size_t, int) { return 0; }
int peer_allreduce_launch(const PeerMaps&, const PeerCall&, void*) { return -1; }
int adadelta_peer_launch(const PeerMaps&, const PeerCall&, const void*, void*) { return -1; }
int adam_peer_launch(const PeerMaps&, const PeerCall&, const void*, void*) { return -1; }
bool graph_memsets_available() { return false; }
int graph_memsets_to_kernels(void*, int* replaced) {
  if (replaced != nullptr) *replaced = 0;
  return 0;
}
bool nonfinite_fused_available() { return false; }
size_t nonfinite_fused_scratch_bytes(int) { return 0; }
int nonfinite_fused_launch(const NonFiniteFusedCall&, void*) { return -1; }
bool step_inputs_available() { return false; }
int step_inputs_launch(const StepInputs&, void*) { return -1; }

}  // namespace train::detail
