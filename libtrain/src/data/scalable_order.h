// An epoch's sample order for datasets too large to hold it in memory: a keyed permutation of
// [0, n) computed one position at a time (a Feistel network with cycle walking), and each rank's
// share of it cut as PyTorch's DistributedSampler cuts its permutation. Private.
#pragma once

#include <cstdint>

namespace train::detail {

/// splitmix64's finalizer applied to x + 0x9E3779B97F4A7C15 (Steele, Lea and Flood, 2014): the
/// mixing that derives ScalableOrder's keys and round function.
uint64_t splitmix64(uint64_t x);

/// A pseudo-random permutation of [0, n) drawn from (seed, epoch), of which any position is
/// computed in O(1) time and memory: no index vector is held (PyTorch's randperm needs 8 bytes a
/// sample: 72 GB for 9 billion windows).
///
/// The specification (scalable_order_test.cpp re-implements it independently; changing it
/// changes every run's order above the threshold, so change it only with a version note):
///  - b = max(2, number of bits of n - 1): the network permutes [0, 2^b).
///  - base = splitmix64(splitmix64(seed) ^ uint64(epoch)); round key r = splitmix64(base + r),
///    for r = 0..kRounds-1.
///  - A value x of b bits is split into a left half of the high ceil(b/2) bits and a right half of
///    the low floor(b/2) bits. Round r maps (L of wl bits, R of wr bits) to (L' = R of wr bits,
///    R' = L ^ (splitmix64(R ^ key r) & (2^wl - 1)) of wl bits), and the value is L' << wl | R':
///    the halves' widths swap each round, so every b works, odd ones too.
///  - at(p): x = p; repeat x = network(x) until x < n (cycle walking: a bijection of [0, n), on
///    average fewer than 2 passes, as 2^b < 2n).
/// Unlike PyTorch's generator seeded with seed + epoch, (seed 1, epoch 0) and (seed 0, epoch 1)
/// give different orders.
class ScalableOrder {
 public:
  /// Rounds of the Feistel network (4 make a pseudo-random permutation; more mix small domains).
  static constexpr int kRounds = 8;

  /// @param n the number of samples, >= 1.
  /// @throws train::ConfigError for n < 1.
  ScalableOrder(int64_t n, uint64_t seed, int64_t epoch);

  /// The sample at `position` of the epoch's order, 0 <= position < size().
  /// @throws std::out_of_range for a position outside [0, size()).
  int64_t at(int64_t position) const;

  int64_t size() const { return n_; }
  /// The bits b of the network's domain [0, 2^b).
  int bits() const { return bits_; }

 private:
  uint64_t network(uint64_t x) const;

  int64_t n_;
  int bits_;
  uint64_t keys_[kRounds];
};

/// One rank's share of a ScalableOrder, cut as torch.utils.data.DistributedSampler cuts its
/// permutation (train::DistributedSampler, same rules): num_samples = ceil(n / world), or with
/// drop_last and n not a multiple of world ceil((n - world) / world); the order is padded by
/// repeating its start (or cut, with drop_last) to num_samples * world positions; rank r takes
/// positions r, r + world, r + 2 world, ... . Without shuffle the order is 0..n-1, so the indices
/// are DistributedSampler(shuffle=false)'s exactly.
class ScalableRankOrder {
 public:
  /// @throws train::ConfigError for n < 1, world_size < 1, a rank outside 0..world_size-1, or
  ///         drop_last leaving no sample to a rank (the sampler's own checks and messages).
  ScalableRankOrder(int64_t dataset_size, int world_size, int rank, uint64_t seed, int64_t epoch,
                    bool drop_last = false, bool shuffle = true);

  /// This rank's k-th sample index of the epoch, 0 <= k < num_samples().
  /// @throws std::out_of_range for k outside [0, num_samples()).
  int64_t rank_index(int64_t k) const;

  /// Indices per rank and epoch (the sampler's num_samples()).
  int64_t num_samples() const { return num_samples_; }
  /// num_samples() * world_size: the padded (or cut) order's length.
  int64_t total_size() const { return num_samples_ * world_size_; }
  int64_t dataset_size() const { return order_.size(); }
  int world_size() const { return world_size_; }
  int rank() const { return rank_; }

 private:
  int64_t num_samples_;  // first: DistributedSampler checks the arguments before order_ is built
  ScalableOrder order_;
  int world_size_;
  int rank_;
  bool shuffle_;
};

}  // namespace train::detail
