// A one-shot all-reduce (average) between the GPUs of one machine, through memory every rank
// maps from every other (CUDA IPC over NVLink or PCIe peer access). One kernel per message: each
// block copies its chunk of the inputs into this rank's buffer, tells the same block on every
// other rank that the chunk is there, waits for theirs, and sums every rank's chunk in rank
// order (so every rank gets the same bits). For the small messages of a small model's step this
// is a few microseconds where NCCL's protocol costs ten or more. A small message can go the
// low-latency way instead (PeerCall::low_latency): each element travels to every other rank as one
// 8-byte word of its bits and the call's epoch, written straight into that rank's buffer, and a
// reader waits for the words that carry the epoch: no copy, no flag, no fence, no read across the
// link, the same sums. A large message among three or more ranks goes in two passes instead
// (PeerCall::two_shot): each rank sums its part of every chunk and the others copy it, half the
// reads across the links of W - 1 whole copies, the same sums. Captured in CUDA graphs like any
// kernel: the epoch that pairs the ranks' calls lives in device memory. A caller may fuse its own
// element-wise work on the averages into the same kernel (PeerFusedEpilogue, peer_allreduce.cuh).
// Plain C++ interface: no torch or CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace train::detail {

constexpr int kPeerMaxRanks = 8;
constexpr int kPeerMaxInputs = 24;
constexpr int kPeerMaxBlocks = 256;
/// The largest message that may go the low-latency way: its words take 2 x 8 bytes a float and rank.
constexpr int64_t kPeerLowLatencyMaxFloats = 32768;
/// Where an NCCL communicator is there for the rest, a bucket goes through the peer all-reduce while
/// each rank's reads of the others' messages ((ranks - 1) x 4 bytes a float) stay under this; larger
/// ones are NCCL's (its ring moves each byte fewer times). comm_plan.cpp takes a Gloo group (no
/// NCCL at all) for a machine's GPUs whose whole model fits it.
constexpr int64_t kPeerMaxReadBytes = int64_t{16} << 20;
/// The smallest message that goes in two passes where three or more ranks average (PeerCall::two_shot).
constexpr int64_t kPeerTwoShotMinFloats = 262144;

/// Each rank's buffer, as this process maps it: a flag area for `slots` messages, two data halves
/// of `capacity` floats, then the low-latency words: two halves, each one run of `ll_capacity`
/// words per sending rank. Calls alternate between the halves by epoch, so a rank never
/// overwrites what a slower peer may still be reading.
struct PeerMaps {
  unsigned char* base[kPeerMaxRanks] = {};
  int rank = 0;
  int world = 0;
  int slots = 0;
  size_t capacity = 0;     ///< floats per data half
  size_t ll_capacity = 0;  ///< low-latency words per half and sending rank
};

/// Bytes one rank's buffer needs (all zero before the first call).
size_t peer_buffer_bytes(int slots, size_t capacity, size_t ll_capacity, int world);

/// One input's memory (dense, read in storage order).
struct PeerInput {
  const float* data = nullptr;
  int64_t numel = 0;
};

struct PeerCall;

/// Work fused into the kernel on each element's average as it is written (a caller's epilogue,
/// peer_allreduce.cuh says what one provides): the caller compiled the kernel with it, and the
/// launch is its. The average is the same as without.
struct PeerFusedEpilogue {
  /// Queues `call` with the epilogue whose arguments are `args`; returns the CUDA error code.
  int (*launch)(const PeerMaps& maps, const PeerCall& call, const void* args, void* stream) = nullptr;
  const void* args = nullptr;
};

struct PeerCall {
  int slot = 0;             ///< this message's flags: the same on every rank, one per message
  size_t offset = 0;        ///< floats (words) into each data half (low-latency run) where the message starts (a multiple of 64)
  bool low_latency = false; ///< the message goes as words straight into the other ranks' buffers
  bool two_shot = false;    ///< (three or more ranks, not low-latency) each rank sums a part, then copies the others'
  const PeerInput* inputs = nullptr;
  int input_count = 0;      ///< concatenated in order into the message
  float* out = nullptr;     ///< the average, one dense message (may be an input's own memory)
  uint64_t timeout_ns = 0;  ///< how long a block waits for the other ranks before it aborts the kernel
  /// Optional: an epilogue in the same kernel (launched through it instead of the plain kernel).
  const PeerFusedEpilogue* fused = nullptr;
};

/// The arguments of an optimizer's update fused into the kernel: one descriptor per input of the
/// call, in order (a `Tensor` has `numel`), and the options they share.
template <class Tensor, class Options>
struct PeerUpdateArgs {
  Tensor tensors[kPeerMaxInputs];
  int count = 0;
  Options options;

  /// One descriptor per input of `call`, each with the input's element count.
  bool fits(const PeerCall& call) const {
    if (count != call.input_count) return false;
    for (int k = 0; k < count; ++k) {
      if (tensors[k].numel != call.inputs[k].numel) return false;
    }
    return true;
  }
};

/// Whether this build compiled the kernel.
bool peer_allreduce_available();

/// Queues the call on `stream` (a cudaStream_t). Every rank must make the same calls in the same
/// order. Returns the CUDA error code of the launch (0 on success).
int peer_allreduce_launch(const PeerMaps& maps, const PeerCall& call, void* stream);

}  // namespace train::detail
