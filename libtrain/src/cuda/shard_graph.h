// ZeRO-1 inside the captured step (comm/shard_comm.h's ShardCollectives): each bucket's
// reduce-scatter forks a side stream off the capture stream while the backward goes on, join()
// brings it back before the clipping and the update, and the parameters' all-gather (and the
// clipping's one-number all-reduce) run on the capture stream. NCCL's own calls on the process
// group's communicator. CUDA builds only. Private.
#pragma once

#include "comm/shard_comm.h"

#include <c10/cuda/CUDAStream.h>

#include <memory>
#include <string>

namespace train {
class ProcessGroup;
}  // namespace train

namespace train::detail {

class ShardGraph : public ShardCollectives {
 public:
  /// Null, with `why_not` set, where the group has no NCCL communicator or NCCL's calls aren't
  /// loaded.
  static std::shared_ptr<ShardGraph> create(ProcessGroup& pg, c10::DeviceIndex device, std::string* why_not);
  ~ShardGraph() override;

  /// Before the captured backward: the stream being captured.
  void begin(const c10::cuda::CUDAStream& capture_stream);
  /// After Reducer::finish(): the capture stream waits for every reduce-scatter.
  void join();

  void reduce_scatter_average(size_t k, const at::Tensor& flat, at::Tensor& chunk) override;
  void all_gather(size_t k, const at::Tensor& mine, at::Tensor& full) override;
  void all_reduce_sum(at::Tensor& t) override;

  struct State;

 private:
  explicit ShardGraph(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace train::detail
