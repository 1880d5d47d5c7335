// EvalBatches: the evaluation's batches, gathered from data in memory or read a batch ahead.
#include "data/eval_batches.h"

#include "data/sample_reads.h"

#include <ATen/ops/arange.h>

#include <vector>

namespace train::detail {

EvalBatches::EvalBatches(const TrainSpec& spec, int rank, int world, at::Device device, int threads, bool skip_bad)
    : spec_(spec), rank_(rank), world_(world), device_(device), threads_(threads), skip_bad_(skip_bad) {
  const int64_t size = spec.eval_data ? spec.eval_data->size() : spec.eval_samples->size();
  count_ = size > rank ? (size - rank + world - 1) / world : 0;
  if (spec.eval_data) idx_ = at::arange(rank, size, world, at::TensorOptions().dtype(at::kLong).device(device));
}

EvalBatches::~EvalBatches() {
  if (ahead_.valid()) ahead_.wait();  // its thread reads the spec's data
}

Batch EvalBatches::get(int64_t start, int64_t len, int64_t next_start, int64_t next_len) {
  if (spec_.eval_data) return spec_.eval_data->get_batch(idx_.narrow(0, start, len));
  Batch b = ahead_.valid() && ahead_start_ == start ? ahead_.get() : read(start, len);
  if (next_len > 0) {
    ahead_start_ = next_start;
    ahead_ = std::async(std::launch::async, [this, next_start, next_len] { return read(next_start, next_len); });
  }
  if (!b.inputs.defined()) return b;
  return {b.inputs.to(device_), b.targets.to(device_)};
}

Batch EvalBatches::read(int64_t start, int64_t len) const {
  std::vector<int64_t> indices;
  for (int64_t k = start; k < start + len; ++k) indices.push_back(rank_ + k * world_);
  return read_samples(*spec_.eval_samples, indices, threads_, SampleDraw{}, skip_bad_);
}

}  // namespace train::detail
