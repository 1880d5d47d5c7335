// The umbrella header compiles on its own and brings the whole public API (train/train.h).
#include "train/train.h"

#include <gtest/gtest.h>

TEST(Umbrella, OneIncludeGivesTheTrainerAndItsParts) {
  train::TrainSpec spec;
  EXPECT_EQ(spec.metrics.size(), 1u);
  EXPECT_EQ(spec.metrics[0].name, "accuracy");
  train::InMemoryDataset data(torch::zeros({4, 1, 2, 2}), torch::zeros({4}, torch::kLong), "tiny");
  EXPECT_EQ(data.size(), 4);
  train::DistributedSampler sampler(10, 2, 0, /*shuffle=*/false);
  EXPECT_EQ(sampler.indices(), (std::vector<int64_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(train::choice_name(train::GraphAllreduce::in_graph), "in-graph");
  train::TrainConfig config;
  EXPECT_EQ(config.run.device, train::DeviceKind::automatic);
}
