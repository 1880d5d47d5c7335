// The keyed permutation and its per-rank view (scalable_order.h), whose specification the header
// states and scalable_order_test.cpp re-implements.
#include "data/scalable_order.h"

#include "train/base/error.h"
#include "train/sampler.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace train::detail {
namespace {

// The bits of n - 1, at least 2: [0, 2^bits) holds every position, and both halves of the
// network have at least one bit.
int domain_bits(int64_t n) {
  int bits = 0;
  for (uint64_t v = static_cast<uint64_t>(n - 1); v != 0; v >>= 1) ++bits;
  return bits < 2 ? 2 : bits;
}

uint64_t low_mask(int width) { return width >= 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1; }

}  // namespace

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

ScalableOrder::ScalableOrder(int64_t n, uint64_t seed, int64_t epoch) : n_(n) {
  if (n < 1) {
    throw ConfigError("ScalableOrder dataset size: expected >= 1 sample, found " + std::to_string(n) + ".",
                      "check --data and the --limit-*-samples flags.");
  }
  bits_ = domain_bits(n);
  // splitmix64 twice over (seed, epoch), not seed + epoch: neighbouring seeds don't share orders
  // shifted by one epoch.
  const uint64_t base = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(epoch));
  for (int r = 0; r < kRounds; ++r) keys_[r] = splitmix64(base + static_cast<uint64_t>(r));
}

uint64_t ScalableOrder::network(uint64_t x) const {
  int wl = (bits_ + 1) / 2, wr = bits_ / 2;
  uint64_t left = x >> wr, right = x & low_mask(wr);
  for (int r = 0; r < kRounds; ++r) {
    const uint64_t mixed = left ^ (splitmix64(right ^ keys_[r]) & low_mask(wl));
    left = right;
    right = mixed;
    std::swap(wl, wr);
  }
  return (left << wr) | right;
}

int64_t ScalableOrder::at(int64_t position) const {
  if (position < 0 || position >= n_) {
    throw std::out_of_range("ScalableOrder::at: expected a position in [0, " + std::to_string(n_) +
                            "), found " + std::to_string(position) + ".");
  }
  if (n_ == 1) return 0;
  // Cycle walking: the network permutes [0, 2^bits); following it from a position below n until
  // it lands below n again permutes [0, n). 2^bits < 2n, so a walk takes under 2 steps on average.
  uint64_t x = static_cast<uint64_t>(position);
  do {
    x = network(x);
  } while (x >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(x);
}

ScalableRankOrder::ScalableRankOrder(int64_t dataset_size, int world_size, int rank, uint64_t seed,
                                     int64_t epoch, bool drop_last, bool shuffle)
    // The sampler's own constructor checks the arguments and counts num_samples (it draws nothing).
    : num_samples_(DistributedSampler(dataset_size, world_size, rank, shuffle, seed, drop_last).num_samples()),
      order_(dataset_size, seed, epoch),
      world_size_(world_size),
      rank_(rank),
      shuffle_(shuffle) {}

int64_t ScalableRankOrder::rank_index(int64_t k) const {
  if (k < 0 || k >= num_samples_) {
    throw std::out_of_range("ScalableRankOrder::rank_index: expected k in [0, " + std::to_string(num_samples_) +
                            "), found " + std::to_string(k) + ".");
  }
  // The k-th position of this rank in the padded order; padding repeats the order from its start,
  // as often as needed (more than once when world > n), and drop_last cuts it below n.
  const int64_t position = (rank_ + k * world_size_) % order_.size();
  return shuffle_ ? order_.at(position) : position;
}

}  // namespace train::detail
