// DistributedSampler against torch.utils.data.DistributedSampler, fixtures made by the venv's Python;
// the trainer's epoch orders (drawn ahead) against it.
#include "data/epoch_orders.h"
#include "test_util.h"
#include "train/base/error.h"
#include "train/sampler.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <set>

namespace {
struct Case {
  int64_t n;
  int world;
  uint64_t seed;
  int64_t epoch;
  bool drop_last;
  bool shuffle;
};
}  // namespace

TEST(DistributedSampler, MatchesPyTorch) {
  const std::string py = train::test::venv_python();
  ASSERT_FALSE(py.empty()) << "the venv's python with torch is needed for this test; run scripts/setup.sh";
  std::vector<Case> cases = {
      {10, 1, 0, 0, false, true},   {10, 2, 0, 0, false, true},   {10, 3, 0, 0, false, true},
      {10, 3, 0, 0, true, true},    {10, 4, 1, 5, false, true},   {10, 4, 1, 5, true, true},
      {7, 8, 3, 2, false, true},    {1000, 3, 42, 1, false, true}, {1000, 3, 42, 1, true, true},
      {60000, 2, 1, 0, false, true}, {60000, 4, 1, 13, false, true}, {5000, 2, 1, 1, false, false},
      {11, 4, 0, 0, false, false},  {11, 4, 0, 0, true, false},   {3, 7, 9, 0, false, true},
  };
  train::test::TempDir d("sampler");
  std::string input;
  for (const auto& c : cases) {
    input += std::to_string(c.n) + " " + std::to_string(c.world) + " " + std::to_string(c.seed) + " " +
             std::to_string(c.epoch) + " " + (c.drop_last ? "1" : "0") + " " + (c.shuffle ? "1" : "0") + "\n";
  }
  std::ofstream(d.file("cases.txt")) << input;
  auto r = train::test::run_program(
      {"sh", "-c", py + " " + TRAIN_SOURCE_DIR + "/tests/libtrain/py/sampler_reference.py < " + d.file("cases.txt")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto want = nlohmann::json::parse(r.out);
  ASSERT_EQ(want.size(), cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    for (int rank = 0; rank < c.world; ++rank) {
      train::DistributedSampler s(c.n, c.world, rank, c.shuffle, c.seed, c.drop_last);
      s.set_epoch(c.epoch);
      auto got = s.indices();
      auto expected = want[k][rank].get<std::vector<int64_t>>();
      EXPECT_EQ(got, expected) << "n=" << c.n << " world=" << c.world << " seed=" << c.seed
                               << " epoch=" << c.epoch << " drop_last=" << c.drop_last << " rank=" << rank;
      EXPECT_EQ(static_cast<int64_t>(got.size()), s.num_samples());
    }
  }
}

TEST(DistributedSampler, RanksCoverEverySampleOnce) {
  train::DistributedSampler a(100, 4, 0, true, 7), b(100, 4, 1, true, 7), c(100, 4, 2, true, 7), e(100, 4, 3, true, 7);
  std::multiset<int64_t> all;
  for (auto* s : {&a, &b, &c, &e}) {
    s->set_epoch(3);
    for (auto i : s->indices()) all.insert(i);
  }
  EXPECT_EQ(all.size(), 100u);
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(all.count(i), 1u);
}

TEST(DistributedSampler, EpochChangesOrder) {
  train::DistributedSampler s(50, 1, 0, true, 1);
  auto e0 = s.indices();
  s.set_epoch(1);
  EXPECT_NE(e0, s.indices());
}

TEST(DistributedSampler, RejectsBadArguments) {
  EXPECT_THROW(train::DistributedSampler(10, 0, 0), train::ConfigError);
  EXPECT_THROW(train::DistributedSampler(10, 2, 2), train::ConfigError);
  EXPECT_THROW(train::DistributedSampler(0, 1, 0), train::ConfigError);
  EXPECT_THROW(train::DistributedSampler(2, 4, 0, true, 0, /*drop_last=*/true), train::ConfigError);
}

// The trainer's epoch orders (epoch_orders.h): the sampler's indices whether the epoch's order was
// drawn ahead on the background thread or now, and a drawing ahead for another epoch (a resume, a
// skipped epoch) is never handed out.
TEST(EpochOrders, GiveTheSamplersOrderDrawnAheadOrNot) {
  auto sampler = [](int world, int rank, int64_t epoch) {
    train::DistributedSampler s(1000, world, rank, /*shuffle=*/true, 7);
    s.set_epoch(epoch);
    return s.indices();
  };
  for (int world : {1, 3}) {
    for (int rank = 0; rank < world; ++rank) {
      train::detail::EpochOrders orders(1000, world, rank, 7);
      for (int64_t epoch = 0; epoch < 4; ++epoch) {
        EXPECT_EQ(orders.take(epoch, /*next=*/true), sampler(world, rank, epoch)) << "epoch " << epoch;
      }
      // Epoch 4 was drawn ahead; 6 is asked for (and 7 drawn ahead), then 5 without a next.
      EXPECT_EQ(orders.take(6, true), sampler(world, rank, 6));
      EXPECT_EQ(orders.take(5, false), sampler(world, rank, 5));
      EXPECT_EQ(orders.take(7, false), sampler(world, rank, 7));
    }
  }
  EXPECT_NE(sampler(1, 0, 0), sampler(1, 0, 1));  // the epochs' orders differ: the checks above tell them apart
}

TEST(EpochOrders, RejectBadSizesAtOnce) {
  EXPECT_THROW(train::detail::EpochOrders(0, 1, 0, 0), train::ConfigError);
  EXPECT_THROW(train::detail::EpochOrders(10, 2, 2, 0), train::ConfigError);
}
