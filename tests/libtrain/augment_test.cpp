// Tests for AugmentedDataset: every output image is a window of the padded input, flipped or not;
// the numbers depend on (seed, rank, batch) only; the checkpoint callback round-trips the position.
#include "train/augment.h"
#include "train/base/error.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <set>
#include <sstream>

namespace {

constexpr int64_t kN = 6, kC = 2, kH = 5, kW = 7, kPad = 2;

std::shared_ptr<train::InMemoryDataset> images() {
  auto x = at::arange(kN * kC * kH * kW, at::kFloat).view({kN, kC, kH, kW});
  return std::make_shared<train::InMemoryDataset>(x, at::arange(kN, at::kLong), "toy");
}

train::AugmentOptions crop_flip() {
  train::AugmentOptions o = train::parse_augment("crop,flip");
  o.padding = kPad;
  o.pad_value = -1;
  return o;
}

at::Tensor all() { return at::arange(kN, at::kLong); }

}  // namespace

TEST(Augment, EveryImageIsAWindowOfThePaddedInputFlippedOrNot) {
  auto data = images();
  train::AugmentedDataset aug(data, crop_flip(), /*seed=*/1, /*rank=*/0);
  const at::Tensor padded = at::constant_pad_nd(data->inputs(), {kPad, kPad, kPad, kPad}, -1);
  std::set<std::string> seen;  // (offset, flip) combinations drawn
  for (int batch = 0; batch < 20; ++batch) {
    const train::Batch b = aug.get_batch(all());
    ASSERT_EQ(b.inputs.sizes(), data->inputs().sizes());
    EXPECT_TRUE(at::equal(b.targets, data->targets()));
    for (int64_t i = 0; i < kN; ++i) {
      bool found = false;
      for (int64_t dy = 0; dy <= 2 * kPad && !found; ++dy) {
        for (int64_t dx = 0; dx <= 2 * kPad && !found; ++dx) {
          const at::Tensor window = padded[i].narrow(1, dy, kH).narrow(2, dx, kW);
          for (const bool flip : {false, true}) {
            if (at::equal(b.inputs[i], flip ? window.flip({2}) : window)) {
              found = true;
              seen.insert(std::to_string(dy) + "," + std::to_string(dx) + (flip ? "f" : ""));
              break;
            }
          }
        }
      }
      EXPECT_TRUE(found) << "batch " << batch << ", image " << i << " is no window of the padded input";
    }
  }
  // 120 draws over 50 (offset, flip) pairs: a working generator reaches far more than a few.
  EXPECT_GT(seen.size(), 20u);
}

TEST(Augment, NumbersDependOnSeedRankAndBatchOnly) {
  train::AugmentedDataset a(images(), crop_flip(), 7, 0), b(images(), crop_flip(), 7, 0);
  train::AugmentedDataset other_rank(images(), crop_flip(), 7, 1), other_seed(images(), crop_flip(), 8, 0);
  const at::Tensor a0 = a.get_batch(all()).inputs, a1 = a.get_batch(all()).inputs;
  EXPECT_TRUE(at::equal(b.get_batch(all()).inputs, a0));
  EXPECT_FALSE(at::equal(a1, a0));
  EXPECT_FALSE(at::equal(other_rank.get_batch(all()).inputs, a0));
  EXPECT_FALSE(at::equal(other_seed.get_batch(all()).inputs, a0));
  // Moving to a position replays that batch, whatever was drawn before.
  EXPECT_EQ(a.batches_drawn(), 2);
  b.set_batches_drawn(1);
  EXPECT_TRUE(at::equal(b.get_batch(all()).inputs, a1));
}

TEST(Augment, FlipOnlyKeepsOrMirrorsEachImage) {
  auto data = images();
  train::AugmentedDataset aug(data, train::parse_augment("flip"), 3, 0);
  int flipped = 0;
  for (int batch = 0; batch < 10; ++batch) {
    const at::Tensor out = aug.get_batch(all()).inputs;
    for (int64_t i = 0; i < kN; ++i) {
      const bool same = at::equal(out[i], data->inputs()[i]);
      const bool mirror = at::equal(out[i], data->inputs()[i].flip({2}));
      EXPECT_TRUE(same || mirror);
      flipped += mirror;
    }
  }
  EXPECT_GT(flipped, 10);  // of 60, about 30
  EXPECT_LT(flipped, 50);
}

// A CUDA graph may capture get_batch only where it is a pure function of the indices: the plain
// in-memory gather is; random crops and flips (new numbers every batch) are not, and neither is a
// user's dataset unless it says so.
TEST(Augment, OnlyDatasetsWithoutRandomNumbersAreCapturable) {
  struct Plain : train::Dataset {
    int64_t size() const override { return 1; }
    train::Batch get_batch(const at::Tensor&) override { return {}; }
  };
  EXPECT_FALSE(Plain().capturable());
  EXPECT_TRUE(images()->capturable());
  EXPECT_FALSE(train::AugmentedDataset(images(), crop_flip(), 1, 0).capturable());
  EXPECT_FALSE(train::AugmentedDataset(images(), train::parse_augment("flip"), 1, 0).capturable());
  EXPECT_FALSE(train::AugmentedDataset(images(), train::parse_augment("crop"), 1, 0).capturable());
  EXPECT_TRUE(train::AugmentedDataset(images(), train::AugmentOptions{}, 1, 0).capturable());
}

TEST(Augment, CheckpointCallbackRoundTripsThePosition) {
  auto a = std::make_shared<train::AugmentedDataset>(images(), crop_flip(), 5, 0);
  for (int i = 0; i < 3; ++i) a->get_batch(all());
  torch::serialize::OutputArchive out;
  train::augment_checkpoint_callback(a)->on_save_checkpoint(out);
  std::stringstream bytes;
  out.save_to(bytes);

  auto b = std::make_shared<train::AugmentedDataset>(images(), crop_flip(), 5, 0);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  train::augment_checkpoint_callback(b)->on_load_checkpoint(in);
  EXPECT_EQ(b->batches_drawn(), 3);
  EXPECT_TRUE(at::equal(b->get_batch(all()).inputs, a->get_batch(all()).inputs));

  // Other augmentations, or none saved: refused, naming both.
  auto flip_only = std::make_shared<train::AugmentedDataset>(images(), train::parse_augment("flip"), 5, 0);
  std::stringstream again(bytes.str());
  torch::serialize::InputArchive in2;
  in2.load_from(again);
  try {
    train::augment_checkpoint_callback(flip_only)->on_load_checkpoint(in2);
    FAIL() << "expected CheckpointError";
  } catch (const train::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("--augment flip, found one written with --augment crop,flip"), std::string::npos) << e.what();
  }
  torch::serialize::OutputArchive empty;
  empty.write("something_else", at::zeros({1}));
  std::stringstream empty_bytes;
  empty.save_to(empty_bytes);
  torch::serialize::InputArchive in3;
  in3.load_from(empty_bytes);
  EXPECT_THROW(train::augment_checkpoint_callback(b)->on_load_checkpoint(in3), train::CheckpointError);
}

// On a GPU: the same window rule, with the CUDA generator, and the same numbers twice.
TEST(Augment, RunsOnTheGpuWithItsOwnCudaGenerator) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: run scripts/gpu-check.sh on a node with a GPU (docs/gpu.md)";
  auto data = images();
  const at::Tensor padded = at::constant_pad_nd(data->inputs(), {kPad, kPad, kPad, kPad}, -1);
  auto make = [&] {
    auto a = std::make_shared<train::AugmentedDataset>(images(), crop_flip(), 11, 0);
    a->to(at::Device(at::kCUDA, 0));
    return a;
  };
  auto a = make(), b = make();
  const at::Tensor idx = all().to(at::kCUDA);
  for (int batch = 0; batch < 5; ++batch) {
    const train::Batch out = a->get_batch(idx);
    ASSERT_TRUE(out.inputs.is_cuda());
    EXPECT_TRUE(at::equal(b->get_batch(idx).inputs, out.inputs)) << "batch " << batch;
    const at::Tensor host = out.inputs.cpu();
    for (int64_t i = 0; i < kN; ++i) {
      bool found = false;
      for (int64_t dy = 0; dy <= 2 * kPad && !found; ++dy) {
        for (int64_t dx = 0; dx <= 2 * kPad && !found; ++dx) {
          const at::Tensor w = padded[i].narrow(1, dy, kH).narrow(2, dx, kW);
          found = at::equal(host[i], w) || at::equal(host[i], w.flip({2}));
        }
      }
      EXPECT_TRUE(found) << "batch " << batch << ", image " << i;
    }
  }
}

TEST(Augment, ParseRejectsUnknownWords) {
  EXPECT_EQ(train::parse_augment("").describe(), "");
  EXPECT_EQ(train::parse_augment("none").describe(), "");
  EXPECT_EQ(train::parse_augment("flip,crop").describe(), "crop,flip");
  try {
    train::parse_augment("crop,rotate");
    FAIL() << "expected ConfigError";
  } catch (const train::ConfigError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("found 'rotate'"), std::string::npos) << w;
    EXPECT_NE(w.find("Hint:"), std::string::npos) << w;
  }
}
