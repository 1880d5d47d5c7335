// Private: the process groups `train --health-check` measures besides the main one:
// the ranks of one node, and one rank per node. Each is a c10d backend of the run's kind
// (Gloo or NCCL) among some of the run's ranks, over a prefix of the run's rendezvous store; only
// its members create it, and it is shut down when the object goes.
#pragma once

#include "dist/process_group_impl.h"

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

namespace train::detail {

class HealthGroup {
 public:
  /// Collective among `ranks` (ascending, this rank among them; every member passes the same
  /// ranks and `key`). `key` names the group's store prefix, apart from every other group's and
  /// from the other health checks' on this store. Errors are train::CommError / TimeoutError
  /// naming this rank (ProcessGroupImpl::guarded).
  HealthGroup(ProcessGroupImpl& core, const std::vector<int>& ranks, const std::string& key);
  ~HealthGroup();  // shuts the backend down (NCCL: its communicator is destroyed, nothing hangs at exit)
  HealthGroup(const HealthGroup&) = delete;
  HealthGroup& operator=(const HealthGroup&) = delete;

  int size() const { return size_; }
  /// Sums `tensor` over the group's ranks in place (on the rank's device for NCCL).
  void allreduce_sum(at::Tensor& tensor);

 private:
  ProcessGroupImpl& core_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  int size_ = 0;
  std::string what_;  // "all-reduce among ranks 0,1", for errors
};

}  // namespace train::detail
