// A gradient bucket's epilogue: work that runs on a bucket right after its average, on the stream
// the average ran on (the fused Adadelta's update of the bucket's parameters, for one). The
// communication hooks know only this interface, tensors in and work queued; the optimizer side
// implements it and the step hands it to the hooks (cuda/graph_comm.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace train::detail {

struct PeerFusedEpilogue;  // cuda/peer_allreduce.h: work inside the GPUs' peer all-reduce kernel

class BucketEpilogue {
 public:
  virtual ~BucketEpilogue() = default;

  /// At the start of a step's capture, on the stream the buckets' epilogues will run on (forked
  /// from the capture's): work the whole step's epilogues need first (Adam's step counts). False,
  /// with nothing queued, where the epilogues won't run this step (the step updates after the
  /// averages); true commits every bucket's run() to succeed.
  virtual bool begin() { return true; }

  /// Queues the epilogue of the bucket whose parameters are `params` (their gradients averaged)
  /// on the current stream. False, with nothing queued, where it doesn't apply.
  virtual bool run(const std::vector<at::Tensor>& params) = 0;

  /// Queues the bucket's average and the epilogue as one kernel of the GPUs' peer all-reduce:
  /// calls `average` once with the epilogue's form inside that kernel. False, with `average` not
  /// called and nothing queued, where the epilogue has no such form or it doesn't apply.
  virtual bool run_fused(const std::vector<at::Tensor>& params,
                         const std::function<void(const PeerFusedEpilogue&)>& average) {
    (void)params, (void)average;
    return false;
  }
};

}  // namespace train::detail
