// The fused Adadelta update as an epilogue of the GPUs' peer all-reduce (peer_allreduce.h): a small
// bucket's average and its parameters' update in one kernel. The optimizer's side: the peer
// all-reduce only launches it. Plain C++ interface: no torch or CUDA headers.
#pragma once

#include "adadelta_fused.h"
#include "peer_allreduce.h"

namespace train::detail {

/// The update of the parameter behind each input of a call, with the input's average as its
/// gradient (the `grad` fields are not read).
using AdadeltaPeerArgs = PeerUpdateArgs<AdadeltaFusedTensor, AdadeltaFusedOptions>;

/// A PeerFusedEpilogue's launch: `args` is an AdadeltaPeerArgs. Returns the CUDA error code
/// (cudaErrorInvalidValue where the tensors don't match the call's inputs one for one).
int adadelta_peer_launch(const PeerMaps& maps, const PeerCall& call, const void* args, void* stream);

}  // namespace train::detail
