// The fused Adam and AdamW update as an epilogue of the GPUs' peer all-reduce (peer_allreduce.h):
// a small bucket's average and its parameters' update in one kernel, with the arithmetic of ATen's
// `_fused_adam_`/`_fused_adamw_` (what the eager step runs), so a replay lands on the eager step's
// bits. The optimizer's side: the peer all-reduce only launches it. Plain C++ interface: no torch
// or CUDA headers.
#pragma once

#include "peer_allreduce.h"

#include <cstdint>

namespace train::detail {

/// One parameter's tensors (float32, dense, laid out alike) and its step count (already advanced
/// for this step, as the fused kernels read it).
struct AdamFusedTensor {
  float* param = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  const float* step = nullptr;
  int64_t numel = 0;
};

/// The group's options as ATen's kernel takes them (each double rounded to float, as it does).
struct AdamFusedOptions {
  float beta1 = 0, beta2 = 0, weight_decay = 0, eps = 0;
  const float* lr_device = nullptr;  ///< the rate, read from device memory on every call
  bool decoupled = true;             ///< AdamW (decay on the parameter) or Adam (L2 on the gradient)
};

/// The update of the parameter behind each input of a call, with the input's average as its
/// gradient.
using AdamPeerArgs = PeerUpdateArgs<AdamFusedTensor, AdamFusedOptions>;

/// A PeerFusedEpilogue's launch: `args` is an AdamPeerArgs. Returns the CUDA error code
/// (cudaErrorInvalidValue where the tensors don't match the call's inputs one for one).
int adam_peer_launch(const PeerMaps& maps, const PeerCall& call, const void* args, void* stream);

}  // namespace train::detail
