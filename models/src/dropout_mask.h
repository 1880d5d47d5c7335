// The hashed keep-mask behind fast_dropout, shared with the fused pooling kernel so both draw the
// same masks from the same generator state. Private to train::models.
#pragma once

#include <cmath>
#include <cstdint>

namespace train::models::detail {

inline uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// Mask values for one dropout call: element i is kept (value `scale`) when the 16-bit uniform
/// for i is >= `threshold`, else dropped (value 0). Four elements share one hash.
struct DropoutMask {
  uint64_t seed = 0;
  uint32_t threshold = 0;
  float scale = 1.0f;

  static DropoutMask for_p(uint64_t seed, double p) {
    return {seed, static_cast<uint32_t>(std::lround(p * 65536.0)), static_cast<float>(1.0 / (1.0 - p))};
  }

  uint64_t hash(int64_t block) const {
    return splitmix64(seed ^ (static_cast<uint64_t>(block) * 0xd1b54a32d192ed03ULL));
  }
  /// The value for element `i`, given `h = hash(i / 4)`.
  float value(uint64_t h, int64_t i) const {
    const uint32_t u = static_cast<uint32_t>((h >> (16 * (i & 3))) & 0xffff);
    return u >= threshold ? scale : 0.0f;
  }
  float value(int64_t i) const { return value(hash(i >> 2), i); }
};

/// One 64-bit draw from LibTorch's default CPU generator (under its lock): the only generator
/// use per dropout call, so runs replay from torch::manual_seed or a checkpointed state.
uint64_t draw_dropout_seed();

}  // namespace train::models::detail
