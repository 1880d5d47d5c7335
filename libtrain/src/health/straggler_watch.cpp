// The straggler report gathered over the ranks (straggler_watch.h).
#include "health/straggler_watch.h"

#include "health/rank_record.h"
#include "train/base/log.h"
#include "train/process_group.h"

#include <ATen/ops/zeros.h>

#include <algorithm>
#include <vector>

namespace train::detail {

void StragglerWatch::start_epoch(int64_t step, const RollCallRecord* where) {
  wait_ns_ = where ? where->wait_ns.load(std::memory_order_relaxed) : 0;
  step_ = step;
}

// Every rank fills its own slot; rank 0 names a rank slow again and again.
std::string StragglerWatch::report(ProcessGroup* pg, const RollCallRecord* where, int64_t step, double epoch_seconds,
                                   const at::Device& device) {
  const int64_t steps = step - step_;
  if (!pg || pg->size() < 2 || !where) return "";
  const int world_size = pg->size(), rank = pg->rank();
  const double waited = static_cast<double>(where->wait_ns.load(std::memory_order_relaxed) - wait_ns_) / 1e9;
  at::Tensor times = at::zeros({world_size}, at::TensorOptions().dtype(at::kDouble).device(device));
  times[rank] = steps > 0 ? std::max(0.0, epoch_seconds - waited) / static_cast<double>(steps) : 0.0;
  pg->allreduce_sum(times);
  if (rank != 0) return "";
  const at::Tensor host = times.cpu();
  std::vector<double> per_rank(host.data_ptr<double>(), host.data_ptr<double>() + world_size);
  std::string warning;
  const std::string line = report_.report(per_rank, &warning);
  if (!warning.empty()) log::warn(warning);
  return line;
}

}  // namespace train::detail
