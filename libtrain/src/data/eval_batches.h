// The evaluation's batches of one rank: samples rank, rank + world, ... of TrainSpec::eval_data
// (gathered on the device) or eval_samples (read on a few threads, a batch ahead). Private.
#pragma once

#include "train/data.h"
#include "train/train_spec.h"

#include <c10/core/Device.h>

#include <cstdint>
#include <future>

namespace train::detail {

/// This rank's evaluation samples in batches: no padding, so the ranks' all-reduced totals equal a
/// single process's evaluation.
class EvalBatches {
 public:
  /// `threads` read eval_samples; `skip_bad` (--bad-samples skip) leaves an unreadable sample out
  /// (read_samples).
  EvalBatches(const TrainSpec& spec, int rank, int world, at::Device device, int threads, bool skip_bad);
  ~EvalBatches();

  /// This rank's samples.
  int64_t count() const { return count_; }

  /// The batch of positions [start, start + len) on the device; `next_start`, `next_len`: the span
  /// asked for after it, read meanwhile (len 0: none). Under skip_bad a sample dataset's batch may
  /// be short, or empty (undefined tensors).
  /// @throws train::DataError for a sample that can't be read (without skip_bad).
  Batch get(int64_t start, int64_t len, int64_t next_start, int64_t next_len);

 private:
  Batch read(int64_t start, int64_t len) const;

  const TrainSpec& spec_;
  int rank_, world_;
  at::Device device_;
  int threads_;
  bool skip_bad_;
  int64_t count_ = 0;
  at::Tensor idx_;
  std::future<Batch> ahead_;
  int64_t ahead_start_ = -1;
};

}  // namespace train::detail
