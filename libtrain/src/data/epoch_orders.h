// The order of each epoch's samples on this rank (DistributedSampler's), the next epoch's drawn on
// a background thread while this one trains. A shuffle of a large data set takes milliseconds on
// the host (randperm: 1 to 7 ms for 77k samples on a busy 4-GPU node), and every rank drew it
// between two epochs, where the fastest rank then waited for the slowest at the next epoch's first
// all-reduce. The orders are the sampler's, bit for bit, whenever they are drawn. Private.
#pragma once

#include <cstdint>
#include <future>
#include <vector>

namespace train::detail {

class EpochOrders {
 public:
  EpochOrders(int64_t dataset_size, int world_size, int rank, uint64_t seed);
  /// Waits for a drawing still running (its result is dropped).
  ~EpochOrders();
  EpochOrders(const EpochOrders&) = delete;
  EpochOrders& operator=(const EpochOrders&) = delete;

  /// This rank's sample indices for sampler epoch `epoch` (the trainer's epoch - 1): the one drawn
  /// ahead when it was `epoch`'s, else drawn now. With `next`, starts drawing epoch + 1's.
  /// @throws what the sampler throws (bad sizes), also from the background drawing.
  std::vector<int64_t> take(int64_t epoch, bool next);

 private:
  std::vector<int64_t> draw(int64_t epoch) const;

  int64_t dataset_size_;
  int world_size_;
  int rank_;
  uint64_t seed_;
  int64_t ahead_epoch_ = -1;  // the epoch `ahead_` draws; -1: none
  std::future<std::vector<int64_t>> ahead_;
};

}  // namespace train::detail
