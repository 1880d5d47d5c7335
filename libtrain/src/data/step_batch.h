// What one optimizer step trains on, as the data side hands it to the step: the seam between the
// data (an epoch's order over data in memory, or a loader's batches) and the training step. Private.
#pragma once

#include "train/data.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>

namespace train::detail {

/// What one optimizer step trains on, as the data side hands it over (the seam between the data
/// and the step): either the batch itself, made outside the step (a loader's batch, on the device
/// or on its way there: `ready` makes the current stream wait for its copy), or, for data whose
/// gather a CUDA graph may capture (Dataset::capturable()), the samples' indices on the device,
/// gathered inside the step by StepParts::data.
struct StepBatch {
  at::Tensor indices;  ///< int64 [len] on the device, gathered by the step; undefined: `batch`
  Batch batch;         ///< inputs [len, ...] and targets [len, ...], when `indices` is undefined
  /// Makes the current stream wait until `batch` has landed (a loader's copy event); empty: ready.
  std::function<void()> ready;

  /// The step's number of samples.
  int64_t size() const { return indices.defined() ? indices.size(0) : batch.inputs.size(0); }
};

}  // namespace train::detail
