// Private: the set-up of the GPUs' one-shot peer all-reduce (cuda/peer_allreduce.h) for ranks
// that share one machine: every rank allocates its buffer, publishes a CUDA IPC handle through
// the rendezvous store and maps every other rank's; a small all-reduce checks the result before
// the group is used. Only in builds with libtrain's own CUDA kernels.
#pragma once

#include "cuda/peer_allreduce.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace train::detail {

struct ProcessGroupImpl;

class PeerReduce {
 public:
  /// Collective: every rank of `pg` calls it with the same messages (floats each; a message's
  /// index is its slot). Messages up to kPeerLowLatencyMaxFloats go the low-latency way, those
  /// from kPeerTwoShotMinFloats among three or more ranks in two passes (unless the environment
  /// has TRAIN_PEER_ONE_SHOT=1), the others one-shot. Null on every rank, with the reason in
  /// *why_not, unless every rank runs on this machine and each maps every other's GPU memory and
  /// the check all-reduces give the expected numbers everywhere.
  static std::unique_ptr<PeerReduce> create(ProcessGroupImpl& pg, const std::vector<int64_t>& messages,
                                            std::string* why_not);
  ~PeerReduce();
  PeerReduce(const PeerReduce&) = delete;
  PeerReduce& operator=(const PeerReduce&) = delete;

  /// Queues the average of the inputs (concatenated, at most the message's floats) into `out` on
  /// `stream` (a cudaStream_t), with `fused`, the caller's epilogue, in the same kernel. Throws
  /// (c10::Error) if the launch fails.
  void average(int message, const std::vector<PeerInput>& inputs, float* out, void* stream,
               const PeerFusedEpilogue* fused = nullptr) const;

  /// How many of the messages go the low-latency way, and how many in two passes.
  int low_latency_messages() const;
  int two_shot_messages() const;
  int world() const { return maps_.world; }

 private:
  PeerReduce() = default;
  std::string map_peers(ProcessGroupImpl& pg, const std::string& prefix);
  std::string check(int message, const std::string& where);

  struct Message {
    size_t offset = 0;  // floats into the data halves, or words into the low-latency runs
    int64_t floats = 0;
    bool low_latency = false;
    bool two_shot = false;
  };
  std::vector<Message> messages_;
  PeerMaps maps_;
  void* own_ = nullptr;
  std::vector<void*> opened_;
  uint64_t timeout_ns_ = 0;
};

}  // namespace train::detail
