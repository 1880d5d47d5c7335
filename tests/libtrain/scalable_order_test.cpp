// The keyed permutation for orders too large to hold (libtrain/src/data/scalable_order.h): a
// permutation for every n, different per seed and epoch, cut among ranks as DistributedSampler
// cuts, and stable: checked against this file's own implementation of the header's specification.
#include "data/scalable_order.h"
#include "train/base/error.h"
#include "train/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <vector>

using train::detail::ScalableOrder;
using train::detail::ScalableRankOrder;

namespace {

// The specification of scalable_order.h, written again from its text, as plainly as it reads:
// the halves kept as two numbers with their widths, the domain's bits counted by doubling.
namespace reference {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

struct Order {
  int64_t n;
  int bits = 2;
  std::vector<uint64_t> keys;

  Order(int64_t n_, uint64_t seed, int64_t epoch) : n(n_) {
    while (bits < 63 && (uint64_t{1} << bits) < static_cast<uint64_t>(n)) ++bits;
    const uint64_t base = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(epoch));
    for (uint64_t r = 0; r < 8; ++r) keys.push_back(splitmix64(base + r));
  }

  uint64_t network(uint64_t x) const {
    int left_bits = (bits + 1) / 2;  // the high ceil(b/2) bits
    int right_bits = bits / 2;       // the low floor(b/2) bits
    uint64_t left = x >> right_bits;
    uint64_t right = x % (uint64_t{1} << right_bits);
    for (uint64_t key : keys) {
      const uint64_t new_left = right;
      const uint64_t new_right = left ^ (splitmix64(right ^ key) % (uint64_t{1} << left_bits));
      const int new_left_bits = right_bits, new_right_bits = left_bits;
      left = new_left;
      right = new_right;
      left_bits = new_left_bits;
      right_bits = new_right_bits;
    }
    return left * (uint64_t{1} << right_bits) + right;
  }

  int64_t at(int64_t p) const {
    uint64_t x = network(static_cast<uint64_t>(p));
    while (x >= static_cast<uint64_t>(n)) x = network(x);
    return static_cast<int64_t>(x);
  }
};

}  // namespace reference

// Every index of [0, n) exactly once.
void expect_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  ScalableOrder order(n, seed, epoch);
  std::vector<char> seen(n, 0);
  for (int64_t p = 0; p < n; ++p) {
    const int64_t i = order.at(p);
    ASSERT_GE(i, 0) << "n " << n << " position " << p;
    ASSERT_LT(i, n) << "n " << n << " position " << p;
    ASSERT_EQ(seen[i], 0) << "n " << n << " seed " << seed << " epoch " << epoch << ": index " << i << " twice";
    seen[i] = 1;
  }
}

// Positions of [0, count) where two orders of the same n differ.
int64_t differing(const ScalableOrder& a, const ScalableOrder& b, int64_t count) {
  int64_t d = 0;
  for (int64_t p = 0; p < count; ++p) d += a.at(p) != b.at(p);
  return d;
}

}  // namespace

TEST(ScalableOrder, SplitmixIsVignasGenerator) {
  // splitmix64's published first outputs from state 0 (Vigna's splitmix64.c): the generator adds
  // the golden gamma, then mixes: splitmix64(k * gamma) is its (k+1)-th output.
  EXPECT_EQ(train::detail::splitmix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(train::detail::splitmix64(0x9E3779B97F4A7C15ull), 0x6E789E6AA1B965F4ull);
  for (uint64_t x : {uint64_t{0}, uint64_t{1}, uint64_t{12345}, ~uint64_t{0}}) {
    EXPECT_EQ(train::detail::splitmix64(x), reference::splitmix64(x)) << x;
  }
}

TEST(ScalableOrder, IsAPermutationForEveryN) {
  for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 100, 255, 256, 257, 1000, 4097, 65537}) {
    for (uint64_t seed : {0u, 1u, 42u}) {
      for (int64_t epoch : {0, 1, 7}) expect_permutation(n, seed, epoch);
    }
  }
  expect_permutation((int64_t{1} << 20) + 7, 3, 2);
  expect_permutation(int64_t{1} << 20, 0, 0);
}

TEST(ScalableOrder, DomainIsTheNextPowerOfTwo) {
  EXPECT_EQ(ScalableOrder(1, 0, 0).bits(), 2);
  EXPECT_EQ(ScalableOrder(4, 0, 0).bits(), 2);
  EXPECT_EQ(ScalableOrder(5, 0, 0).bits(), 3);
  EXPECT_EQ(ScalableOrder(1000, 0, 0).bits(), 10);
  EXPECT_EQ(ScalableOrder(1024, 0, 0).bits(), 10);
  EXPECT_EQ(ScalableOrder(1025, 0, 0).bits(), 11);
  EXPECT_EQ(ScalableOrder(int64_t{1000000000}, 0, 0).bits(), 30);
  EXPECT_EQ(ScalableOrder(INT64_MAX, 0, 0).bits(), 63);
}

TEST(ScalableOrder, LargeNGivesDistinctIndicesInRange) {
  // Too large to check whole: 200k positions of orders of 10^12 and of 2^62 + 1 samples.
  for (int64_t n : {int64_t{1000000000000}, (int64_t{1} << 62) + 1}) {
    ScalableOrder order(n, 9, 4);
    std::set<int64_t> seen;
    for (int64_t p = 0; p < 200000; ++p) {
      const int64_t i = order.at(p);
      ASSERT_GE(i, 0);
      ASSERT_LT(i, n);
      ASSERT_TRUE(seen.insert(i).second) << "n " << n << ": index " << i << " twice";
    }
    // Drawn across the whole range, not near the start: the first 200k land in every tenth.
    std::vector<int> tenths(10, 0);
    for (int64_t i : seen) ++tenths[static_cast<size_t>(i / (n / 10 + 1))];
    for (int t = 0; t < 10; ++t) EXPECT_GT(tenths[t], 15000) << "n " << n << ", tenth " << t;
  }
}

TEST(ScalableOrder, SameArgumentsSameOrder) {
  ScalableOrder a(123457, 5, 3), b(123457, 5, 3);
  EXPECT_EQ(differing(a, b, 123457), 0);
}

TEST(ScalableOrder, EpochsAndSeedsGiveDifferentOrders) {
  const int64_t n = 1000;
  ScalableOrder base(n, 0, 0), next_epoch(n, 0, 1), next_seed(n, 1, 0), far(n, 12345, 99);
  // Two unrelated permutations of 1000 agree at about one position.
  EXPECT_GT(differing(base, next_epoch, n), 980);
  EXPECT_GT(differing(base, next_seed, n), 980);
  EXPECT_GT(differing(base, far, n), 980);
  // PyTorch seeds its generator with seed + epoch, so (1, 0) and (0, 1) share an order there:
  // not here.
  EXPECT_GT(differing(next_epoch, next_seed, n), 980);
  // Every pair among 20 epochs of 50 samples differs.
  for (int64_t e1 = 0; e1 < 20; ++e1) {
    for (int64_t e2 = e1 + 1; e2 < 20; ++e2) {
      EXPECT_GT(differing(ScalableOrder(50, 7, e1), ScalableOrder(50, 7, e2), 50), 0) << e1 << " " << e2;
    }
  }
}

TEST(ScalableOrder, Shuffles) {
  // Few fixed points (a random permutation has one on average), and each index's place spread
  // over the positions: over 10000 epochs of 10 samples, position 0 holds each index about 1000
  // times (binomial: sd 30).
  ScalableOrder order(100000, 1, 0);
  int64_t fixed = 0;
  for (int64_t p = 0; p < 100000; ++p) fixed += order.at(p) == p;
  EXPECT_LT(fixed, 10);
  std::vector<int> first(10, 0);
  for (int64_t e = 0; e < 10000; ++e) ++first[static_cast<size_t>(ScalableOrder(10, 3, e).at(0))];
  for (int i = 0; i < 10; ++i) {
    EXPECT_GT(first[i], 850) << "index " << i;
    EXPECT_LT(first[i], 1150) << "index " << i;
  }
}

TEST(ScalableOrder, MatchesTheSpecification) {
  // The header's specification, implemented again above: any change to the order (mixing, keys,
  // rounds, halves, cycle walking) changes every run above the threshold and must be deliberate.
  const int64_t n = 1000000000;
  ScalableOrder order(n, 1234, 5);
  reference::Order ref(n, 1234, 5);
  uint64_t checksum = 0, ref_checksum = 0;
  for (int64_t p = 0; p < 1000; ++p) {
    const int64_t got = order.at(p), want = ref.at(p);
    ASSERT_EQ(got, want) << "position " << p;
    checksum = checksum * 1000003 + static_cast<uint64_t>(got);
    ref_checksum = ref_checksum * 1000003 + static_cast<uint64_t>(want);
  }
  EXPECT_EQ(checksum, ref_checksum);
  for (int64_t m : {int64_t{2}, int64_t{3}, int64_t{5}, int64_t{1000}, (int64_t{1} << 20) + 7,
                    (int64_t{1} << 40) + 3, INT64_MAX}) {
    for (uint64_t seed : {uint64_t{0}, ~uint64_t{0}}) {
      for (int64_t epoch : {int64_t{0}, int64_t{-1}, int64_t{1} << 40}) {
        ScalableOrder o(m, seed, epoch);
        reference::Order r(m, seed, epoch);
        for (int64_t p = 0; p < std::min<int64_t>(m, 100); ++p) ASSERT_EQ(o.at(p), r.at(p)) << "n " << m << " p " << p;
        ASSERT_EQ(o.at(m - 1), r.at(m - 1)) << "n " << m;
      }
    }
  }
}

TEST(ScalableRankOrder, UnshuffledIsTheSamplersOrder) {
  // Without shuffle the order is 0..n-1, so each rank's indices are DistributedSampler's exactly:
  // the same num_samples, the same padding from the start (several times over when world > n),
  // the same cut with drop_last.
  for (int64_t n : {1, 2, 3, 7, 10, 11, 16, 100, 101}) {
    for (int world : {1, 2, 3, 4, 8, 13}) {
      for (bool drop_last : {false, true}) {
        if (drop_last && n < world) continue;  // nothing left to a rank: the sampler refuses
        for (int rank = 0; rank < world; ++rank) {
          train::DistributedSampler sampler(n, world, rank, /*shuffle=*/false, /*seed=*/5, drop_last);
          ScalableRankOrder view(n, world, rank, /*seed=*/5, /*epoch=*/0, drop_last, /*shuffle=*/false);
          ASSERT_EQ(view.num_samples(), sampler.num_samples()) << n << " " << world << " " << drop_last;
          ASSERT_EQ(view.total_size(), sampler.total_size());
          const std::vector<int64_t> want = sampler.indices();
          for (int64_t k = 0; k < view.num_samples(); ++k) {
            ASSERT_EQ(view.rank_index(k), want[k]) << "n " << n << " world " << world << " rank " << rank
                                                    << " drop_last " << drop_last << " k " << k;
          }
        }
      }
    }
  }
}

TEST(ScalableRankOrder, ShuffledIsTheSamplersCutOfTheOrder) {
  // With shuffle: rank r's k-th index is the order's entry at the sampler's k-th position for r;
  // the ranks together take the order exactly once (padding repeats its start; drop_last cuts).
  for (int64_t n : {1, 5, 10, 11, 1000, 1001}) {
    for (int world : {1, 2, 3, 4, 7}) {
      for (bool drop_last : {false, true}) {
        if (drop_last && n < world) continue;
        ScalableOrder order(n, 17, 3);
        std::vector<int64_t> taken(n, 0);
        int64_t total = 0;
        for (int rank = 0; rank < world; ++rank) {
          train::DistributedSampler positions(n, world, rank, /*shuffle=*/false, /*seed=*/0, drop_last);
          ScalableRankOrder view(n, world, rank, /*seed=*/17, /*epoch=*/3, drop_last);
          const std::vector<int64_t> want = positions.indices();
          for (int64_t k = 0; k < view.num_samples(); ++k) {
            const int64_t i = view.rank_index(k);
            ASSERT_EQ(i, order.at(want[k]));
            ++taken[i];
            ++total;
          }
        }
        const train::DistributedSampler any(n, world, 0, true, 0, drop_last);
        EXPECT_EQ(total, any.total_size());
        int64_t twice = 0, never = 0;
        for (int64_t c : taken) {
          twice += c > 1 ? c - 1 : 0;
          never += c == 0;
        }
        if (drop_last) {
          EXPECT_EQ(twice, 0) << "n " << n << " world " << world;
          EXPECT_EQ(never, n - any.total_size());
        } else {
          EXPECT_EQ(never, 0) << "n " << n << " world " << world;
          EXPECT_EQ(twice, any.total_size() - n);
        }
      }
    }
  }
}

TEST(ScalableRankOrder, LargeNPadsFromTheOrdersStart) {
  // 10^9 + 3 samples on 4 ranks: 10^9 + 4 positions, the last one the order's first again.
  const int64_t n = 1000000003;
  ScalableOrder order(n, 2, 8);
  ScalableRankOrder last_rank(n, 4, 3, 2, 8);
  EXPECT_EQ(last_rank.num_samples(), 250000001);
  EXPECT_EQ(last_rank.rank_index(250000000), order.at(0));
  EXPECT_EQ(last_rank.rank_index(0), order.at(3));
  ScalableRankOrder cut(n, 4, 3, 2, 8, /*drop_last=*/true);
  EXPECT_EQ(cut.num_samples(), 250000000);
  EXPECT_EQ(cut.rank_index(249999999), order.at(999999999));
}

TEST(ScalableRankOrder, BadArgumentsAreRefused) {
  EXPECT_THROW(ScalableOrder(0, 0, 0), train::ConfigError);
  EXPECT_THROW(ScalableRankOrder(0, 1, 0, 0, 0), train::ConfigError);
  EXPECT_THROW(ScalableRankOrder(10, 0, 0, 0, 0), train::ConfigError);
  EXPECT_THROW(ScalableRankOrder(10, 2, 2, 0, 0), train::ConfigError);
  EXPECT_THROW(ScalableRankOrder(10, 2, -1, 0, 0), train::ConfigError);
  EXPECT_THROW(ScalableRankOrder(3, 4, 0, 0, 0, /*drop_last=*/true), train::ConfigError);
  try {
    ScalableRankOrder(10, 2, 5, 0, 0);
    FAIL() << "expected train::ConfigError";
  } catch (const train::ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("expected 0..1, found 5"), std::string::npos) << what;
    EXPECT_NE(what.find("Hint:"), std::string::npos) << what;
  }
  ScalableOrder order(10, 0, 0);
  EXPECT_THROW(order.at(-1), std::out_of_range);
  EXPECT_THROW(order.at(10), std::out_of_range);
  ScalableRankOrder view(10, 3, 0, 0, 0);
  EXPECT_THROW(view.rank_index(view.num_samples()), std::out_of_range);
  EXPECT_THROW(view.rank_index(-1), std::out_of_range);
}
