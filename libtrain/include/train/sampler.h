// DistributedSampler with torch.utils.data.DistributedSampler's exact index lists.
#pragma once

#include <cstdint>
#include <vector>

namespace train {

/// Splits [0, dataset_size) among `world_size` ranks, as PyTorch's DistributedSampler does:
/// a permutation drawn from a generator seeded with seed + epoch (or 0..n-1 without shuffle),
/// padded by repeating its start (or cut, with drop_last) to a multiple of the world size;
/// rank r takes perm[r], perm[r + world], ... . Throws train::ConfigError for bad arguments.
class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int world_size, int rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  /// Selects the permutation of `epoch` (call before every epoch, as in PyTorch).
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  /// This rank's indices for the current epoch, num_samples() of them.
  std::vector<int64_t> indices() const;

  /// Indices per rank and epoch: ceil(n / world), or ceil((n - world) / world) with drop_last
  /// when n is not a multiple of world.
  int64_t num_samples() const { return num_samples_; }
  /// num_samples() of a sampler over `dataset_size` samples and `world_size` ranks, without one
  /// (the arguments unchecked: the constructor checks them).
  static int64_t samples_per_rank(int64_t dataset_size, int world_size, bool drop_last = false);
  int64_t total_size() const { return num_samples_ * world_size_; }
  int64_t dataset_size() const { return dataset_size_; }
  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  uint64_t seed() const { return seed_; }
  bool shuffle() const { return shuffle_; }
  bool drop_last() const { return drop_last_; }

 private:
  int64_t dataset_size_;
  int world_size_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_ = 0;
};

}  // namespace train
