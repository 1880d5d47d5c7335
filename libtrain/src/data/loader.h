// The loader of sample datasets (train/sample_dataset.h) as a batch feed (batch_feed.h): background
// threads read each step's samples in the sampler's order, collate them into a ring of host buffers
// a bounded number of batches ahead, and (for a GPU) copy them to the device on a side stream. Private.
#pragma once

#include "data/batch_feed.h"
#include "data/epoch_orders.h"
#include "data/scalable_order.h"
#include "train/sample_dataset.h"

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace train::detail {

/// Datasets of up to this many samples take DistributedSampler's PyTorch-exact order (8 bytes a
/// sample, drawn whole each epoch: 128 MiB at this size); larger ones take ScalableRankOrder's,
/// computed one position at a time.
inline constexpr int64_t kExactOrderMaxSamples = int64_t{1} << 24;

/// Consecutive unreadable samples after which --bad-samples skip stops looking for a replacement
/// and fails: the data is unreadable as a whole (a file gone, a mount lost), not a few bad records.
inline constexpr int kMaxSkippedInARow = 100;

/// What to do with a sample whose get() throws (or whose shapes differ from the dataset's).
enum class BadSamples {
  fail,  ///< batch() throws train::DataError naming the dataset and the sample, before that batch trains
  skip,  ///< the sample is replaced (see make_loader_feed) and counted (LoaderFeed::skipped())
};

/// How the loader reads and hands over batches.
struct LoaderOptions {
  int workers = 2;           ///< background threads reading samples (--data-workers), >= 1
  int prefetch = 2;          ///< batches read ahead of the one the step trains on (--prefetch), >= 1
  bool pin_memory = true;    ///< page-locked host buffers (for a CUDA device only: faster, asynchronous copies)
  at::Device device = at::kCPU;  ///< where batches are handed over: the CPU, or a CUDA GPU
  BadSamples bad_samples = BadSamples::fail;
  int64_t order_threshold = kExactOrderMaxSamples;  ///< above it, the scalable order (kExactOrderMaxSamples)
};

/// One rank's order of an epoch's samples, the same whether it is held or computed: for datasets
/// of up to `order_threshold` samples DistributedSampler(n, world, rank, shuffle=true, seed) at
/// set_epoch(epoch)'s indices (bit for bit the in-memory feed's, the next epoch's drawn ahead on a
/// background thread), above it ScalableRankOrder(n, world, rank, seed, epoch), never materialized.
class EpochSampleOrder {
 public:
  /// @throws train::ConfigError for sizes DistributedSampler refuses (n < 1, a bad rank or world).
  EpochSampleOrder(int64_t dataset_size, int world_size, int rank, uint64_t seed, int64_t order_threshold);

  /// Selects sampler epoch `epoch` (the trainer's epoch - 1). `next_follows`: draw epoch + 1's
  /// exact order ahead. Not thread-safe against sample_at(): call it while nothing reads the order.
  void select(int64_t epoch, bool next_follows);

  /// This rank's k-th sample of the selected epoch, 0 <= k < num_samples() (not checked).
  int64_t sample_at(int64_t k) const { return exact_ ? local_[static_cast<size_t>(k)] : scalable_->rank_index(k); }

  /// This rank's samples per epoch (DistributedSampler's num_samples(), padded by repetition).
  int64_t num_samples() const { return num_samples_; }
  /// The dataset is small enough for the PyTorch-exact order.
  bool exact() const { return exact_; }

 private:
  int64_t dataset_size_;
  int world_size_;
  int rank_;
  uint64_t seed_;
  bool exact_;
  int64_t num_samples_;
  std::unique_ptr<EpochOrders> orders_;            // exact: the sampler's orders, one drawn ahead
  std::vector<int64_t> local_;                     // exact: the selected epoch's indices
  std::optional<ScalableRankOrder> scalable_;      // scalable: the selected epoch's order
};

/// The loader as a batch feed, with what the run reports of it.
///
/// Contract of batch(start, len): the loop asks for the spans start_epoch() implies, in order
/// (step i of the epoch: [first + i * step_samples, ...), the last one possibly shorter); anything
/// else throws std::logic_error. The batch is rank-local batch number start / step_samples, the
/// same tensors whatever the worker count, the prefetch depth or the timing: it depends only on
/// (seed, epoch, batch number), and on which samples fail to read. On the CPU the batch's tensors
/// are the ring's host buffer itself: its slot is handed back to the workers at the next batch()
/// or start_epoch() call (a step consumes one batch at a time), and a buffer still referenced
/// then is replaced rather than overwritten. On a GPU the batch is on the device, its copy queued
/// on a side stream: StepBatch::ready makes the current stream wait for it (no host sync).
class LoaderFeed : public BatchFeed {
 public:
  /// Samples replaced under BadSamples::skip, over the batches handed out so far (all epochs).
  virtual int64_t skipped() const = 0;
  /// Seconds batch() spent waiting for batches since the last take_wait_seconds().
  virtual double wait_seconds() const = 0;
  /// wait_seconds(), and starts counting again from 0 (the trainer's data-wait per log interval).
  virtual double take_wait_seconds() = 0;
  /// One line for the log: threads, prefetch, the host buffers' shapes and bytes for steps of
  /// `step_samples`, pinned or not, and which order, e.g. "4 loader threads, 2 batches ahead; 3
  /// buffers of 32 x (float32 [3, 64, 64] + int64 []) = 1.5 MiB, pinned; DistributedSampler's order".
  virtual std::string summary(int64_t step_samples) const = 0;
};

/// The loader of `data` for `rank` of `world_size` (seeded with `seed`): the orders of
/// EpochSampleOrder; options.workers threads, worker w reading the batches b with b % workers == w;
/// a ring of prefetch + 1 host buffers (prefetch batches ahead plus the one the step trains on), so
/// that at most prefetch * step_samples samples are read ahead of the step's. Each buffer is
/// [step_samples, shape...] of the shapes and dtypes of the dataset's first readable sample (index
/// 0, read here); every sample is checked against them.
///
/// Bad samples: under BadSamples::fail, an exception from get() (or a sample of other shapes) is
/// thrown from batch() for the batch it belongs to, as train::DataError naming the dataset, the
/// sample index and the original message. Under BadSamples::skip, the sample at position k of the
/// rank's epoch order is replaced by the sample at the first of positions k+1, k+2, ... (modulo the
/// epoch's length) that reads fine: the replacement depends on the order alone, so it is the same
/// for every worker count and on resume. After kMaxSkippedInARow failures in a row batch() throws
/// a DataError. `data` must outlive the feed; its get() runs on the workers, concurrently.
///
/// The destructor (and start_epoch(), for a previous epoch's prefetch) stops the workers: those
/// waiting for room in the ring leave at once, those inside get() when it returns.
/// @throws train::ConfigError for workers or prefetch < 1, a device neither CPU nor CUDA, a CUDA
///   device in a build without CUDA, or sizes DistributedSampler refuses; train::DataError when
///   sample 0 can't be read (under skip: none of the first kMaxSkippedInARow).
std::unique_ptr<LoaderFeed> make_loader_feed(SampleDataset& data, int world_size, int rank, uint64_t seed,
                                             const LoaderOptions& options);

}  // namespace train::detail
