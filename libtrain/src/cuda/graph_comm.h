// The captured step's gradient averaging, as the reducer's hooks (comm/reducer.h): inside the
// CUDA graph, each complete bucket forks a side stream off the capture stream and is averaged
// there by NCCL (ncclAllReduce avg) or by the GPUs' one-shot peer all-reduce, then the bucket's
// epilogue where one was given (comm/bucket_epilogue.h: the optimizer's update of the bucket,
// which the step wires). CUDA builds only.
#pragma once

#include "comm/bucket_epilogue.h"
#include "comm/reducer.h"

#include <c10/cuda/CUDAStream.h>

#include <memory>
#include <optional>
#include <string>

namespace train {
class ProcessGroup;
}  // namespace train

namespace train::detail {

struct GraphCommState;

/// What the captured step averages with: the hooks for each bucket, the side stream they run
/// on, and whether their epilogues updated the parameters too.
class GraphComm {
 public:
  /// `peer` asks for the GPUs' peer all-reduce (the communication plan's choice); `epilogue`
  /// (may be null) runs on each bucket after its average. Null, with the
  /// reason logged, where neither NCCL's communicator and calls nor the peer all-reduce for
  /// every bucket can be had. Collective (the peer set-up): every rank calls it at the same point.
  static std::unique_ptr<GraphComm> create(Reducer& reducer, ProcessGroup& pg, std::shared_ptr<BucketEpilogue> epilogue,
                                           bool peer, const std::string& peer_flag);
  ~GraphComm();

  /// The hooks of a captured backward (manual: the step calls Reducer::finish()).
  Reducer::Hooks capture_hooks() const;
  /// Where every bucket goes through the peer all-reduce: the hooks of an eager backward (the
  /// epoch's last, smaller batch), so that it averages the same way as a replay. Else none (the
  /// process group's eager hook does it).
  std::optional<Reducer::Hooks> eager_hooks() const;

  /// Before the captured forward: the capture stream, and the epilogue armed.
  void begin(const c10::cuda::CUDAStream& capture_stream);
  /// After Reducer::finish(): the side stream joins the capture stream.
  void join();
  /// This capture ran the epilogue on every bucket (the optimizer's update): no optimizer step.
  bool updated_in_buckets() const;

 private:
  explicit GraphComm(std::shared_ptr<GraphCommState> state);
  std::shared_ptr<GraphCommState> state_;
};

}  // namespace train::detail
