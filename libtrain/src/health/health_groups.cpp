// The health check's subgroups (health_groups.h).
#include "health/health_groups.h"

#include "train/base/error.h"
#include "train/base/log.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>

namespace train::detail {

HealthGroup::HealthGroup(ProcessGroupImpl& core, const std::vector<int>& ranks, const std::string& key)
    : core_(core), size_(static_cast<int>(ranks.size())) {
  const auto me = std::find(ranks.begin(), ranks.end(), core.env.rank);
  if (me == ranks.end() || !core.store) {
    throw Error("health check: rank " + std::to_string(core.env.rank) + " was asked to build group " + key +
                " that it is not part of (or without a store)", "this is a bug in libtrain; please report it.");
  }
  const int rank = static_cast<int>(me - ranks.begin());
  std::string list;
  for (const int r : ranks) list += (list.empty() ? "" : ",") + std::to_string(r);
  what_ = "health check all-reduce among ranks " + list;
  auto store = c10::make_intrusive<c10d::PrefixStore>(key, core.store);
  std::string name = key;  // NCCL's name for the group: "health.1.group.node0"
  std::replace(name.begin(), name.end(), '/', '.');
  if (!name.empty() && name.back() == '.') name.pop_back();
  core.guarded("creating the " + what_, [&] {
    backend_ = core.backend == Backend::nccl ? make_nccl_backend(store, rank, size_, core.timeout, core.device_index, name)
                                             : make_gloo_backend(store, rank, size_, core.timeout, core.interface);
  });
}

HealthGroup::~HealthGroup() {
  if (!backend_) return;
  try {
    backend_->shutdown();
  } catch (const std::exception& e) {
    log::warn("health check: shutting down the " + what_ + ": " + e.what());
  }
  backend_.reset();
}

void HealthGroup::allreduce_sum(at::Tensor& tensor) {
  std::vector<at::Tensor> v{tensor};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  o.timeout = core_.timeout;
  c10::intrusive_ptr<c10d::Work> work;
  core_.guarded(what_, [&] { work = backend_->allreduce(v, o); });
  core_.wait(work, what_);
}

}  // namespace train::detail
