// Where the training loop gets each step's batch: the data side of the run behind one narrow
// interface. Over data held in memory (train::Dataset) the feed hands out slices of the epoch's
// order on the device, gathered inside the step (and captured with it in a CUDA graph); a loader
// of sample datasets hands out batches it read, collated and copied. Private.
#pragma once

#include "data/step_batch.h"

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>

namespace train::detail {

class BatchFeed {
 public:
  virtual ~BatchFeed() = default;

  /// Epoch `epoch` (the trainer's, counted from 1) begins; its steps take `step_samples` samples
  /// each, the first from sample `first` of this rank's share (a resumed epoch's batches done x
  /// step_samples). `next_follows`: another epoch comes after this one (its order may be drawn
  /// ahead). Returns this rank's number of samples in the epoch.
  virtual int64_t start_epoch(int epoch, int64_t first, int64_t step_samples, bool next_follows) = 0;

  /// The epoch's samples [start, start + len) on this rank, as the step takes them. Called in order.
  virtual StepBatch batch(int64_t start, int64_t len) = 0;
};

/// The feed of data in memory: DistributedSampler's order of `dataset_size` samples for `rank`
/// of `world_size` (seeded with `seed` + epoch), on `device`, the next epoch's drawn while one trains.
std::unique_ptr<BatchFeed> make_index_feed(int64_t dataset_size, int world_size, int rank, uint64_t seed,
                                           const at::Device& device);

}  // namespace train::detail
