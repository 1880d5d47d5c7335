// DistributedDataParallel on c10d's Backend: libtrain's one gradient reducer (comm/reducer.h) with
// the eager hook (comm/eager_hooks.h); docs/design.md says why we don't use c10d::Reducer.
#include "train/ddp.h"

#include "comm/eager_hooks.h"
#include "comm/reducer.h"
#include "train/base/error.h"
#include "train/base/log.h"

#include <ATen/ops/cat.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <map>

namespace train {

void broadcast_module(torch::nn::Module& module, ProcessGroup& process_group, int root) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> tensors;
  for (auto& p : module.parameters()) tensors.push_back(p);
  for (auto& b : module.buffers()) tensors.push_back(b);
  if (tensors.empty()) return;
  // One flat broadcast per dtype instead of one per tensor.
  std::map<at::ScalarType, std::vector<at::Tensor>> by_type;
  for (auto& t : tensors) by_type[t.scalar_type()].push_back(t);
  for (auto& [type, group] : by_type) {
    std::vector<at::Tensor> flat_parts;
    for (auto& t : group) flat_parts.push_back(t.reshape({-1}));
    at::Tensor flat = at::cat(flat_parts);
    process_group.broadcast(flat, root);
    int64_t off = 0;
    for (auto& t : group) {
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  }
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> process_group,
                                                 DdpOptions options)
    : module_(std::move(module)), pg_(std::move(process_group)) {
  if (!module_ || !pg_) {
    throw ConfigError("DistributedDataParallel: expected a module and a process group, found null.",
                      "create the model and the ProcessGroup first.");
  }
  BucketOptions bo;
  bo.cap_mb = options.bucket_cap_mb;
  bo.first_cap_mb = options.first_bucket_cap_mb;
  bo.split_first_module = options.split_first_module;
  reducer_ = std::make_unique<Reducer>(*module_, bo);
  if (options.broadcast_at_start) broadcast_module(*module_, *pg_, 0);
  std::string why;
  reducer_->set_hooks(reducer_->all_buckets(make_eager_hook(*reducer_, *pg_, options.shared_memory, &why)));
  log::debug("DDP: " + why);
}

DistributedDataParallel::~DistributedDataParallel() = default;

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp) {
  previous_ = ddp_.reducer_->enabled();
  ddp_.reducer_->set_enabled(false);
}

DistributedDataParallel::NoSync::~NoSync() { ddp_.reducer_->set_enabled(previous_); }

std::vector<size_t> DistributedDataParallel::bucket_param_counts() const {
  std::vector<size_t> out;
  for (const auto& b : reducer_->buckets()) out.push_back(b.params.size());
  return out;
}

std::vector<size_t> DistributedDataParallel::bucket_bytes() const {
  std::vector<size_t> out;
  for (const auto& b : reducer_->buckets()) out.push_back(b.bytes());
  return out;
}

}  // namespace train
