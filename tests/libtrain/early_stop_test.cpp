// Early stopping's decision on its own (libtrain/src/early_stop.h), one process: patience and
// min delta for a metric to minimise and one to maximise, its state through a checkpoint archive,
// and the flags' checks.
#include "trainer/early_stop.h"

#include "train/base/error.h"

#include <gtest/gtest.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <sstream>

namespace {

train::EvalResult eval(double loss, double accuracy) {
  train::EvalResult r;
  r.loss = loss;
  r.count = 100;
  r.metrics["accuracy"] = accuracy;
  return r;
}

}  // namespace

// test_loss must fall by more than min delta: 1.0, 0.95 (better), 0.949 and 0.9455 (within 0.01: not
// better), so with patience 2 the run stops after epoch 4.
TEST(EarlyStop, LossMustFallByMoreThanMinDeltaWithinPatience) {
  train::detail::EarlyStop s({"test_loss", 2, 0.01});
  const at::Device cpu(at::kCPU);
  EXPECT_FALSE(s.after_epoch(1, eval(1.0, 0), nullptr, 0, cpu));
  EXPECT_FALSE(s.after_epoch(2, eval(0.95, 0), nullptr, 0, cpu));
  EXPECT_FALSE(s.after_epoch(3, eval(0.949, 0), nullptr, 0, cpu));
  EXPECT_FALSE(s.stopped());
  EXPECT_TRUE(s.after_epoch(4, eval(0.9455, 0), nullptr, 0, cpu));
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.best_text(), "0.95 at epoch 2");
}

// Accuracy must rise; an improvement resets the count; the state survives a checkpoint archive.
TEST(EarlyStop, AccuracyMustRiseAndTheStateResumes) {
  train::detail::EarlyStop s({"test_accuracy", 2, 0});
  const at::Device cpu(at::kCPU);
  EXPECT_FALSE(s.after_epoch(1, eval(9, 0.5), nullptr, 0, cpu));
  EXPECT_FALSE(s.after_epoch(2, eval(9, 0.5), nullptr, 0, cpu));  // one epoch without
  EXPECT_FALSE(s.after_epoch(3, eval(9, 0.6), nullptr, 0, cpu));  // better: the count starts again
  EXPECT_FALSE(s.after_epoch(4, eval(9, 0.6), nullptr, 0, cpu));
  torch::serialize::OutputArchive out;
  s.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  std::istringstream in_bytes(bytes.str());
  torch::serialize::InputArchive in;
  in.load_from(in_bytes);
  train::detail::EarlyStop resumed({"test_accuracy", 2, 0});
  resumed.load(&in);
  EXPECT_EQ(resumed.best_text(), "0.6 at epoch 3");
  EXPECT_TRUE(resumed.after_epoch(5, eval(9, 0.55), nullptr, 0, cpu)) << "the resumed count goes on: 2 epochs without";
  train::detail::EarlyStop fresh({"test_accuracy", 2, 0});
  fresh.load(nullptr);  // a checkpoint without it
  EXPECT_EQ(fresh.best_text(), "");
}

// Off: never stops. On other ranks than 0 without a process group: rank 0 decides, so never.
TEST(EarlyStop, OffOrNotRankZeroNeverStopsAlone) {
  train::detail::EarlyStop off;
  EXPECT_FALSE(off.enabled());
  EXPECT_FALSE(off.after_epoch(9, eval(1, 0), nullptr, 0, at::Device(at::kCPU)));
  train::detail::EarlyStop rank1({"test_loss", 1, 0});
  EXPECT_FALSE(rank1.after_epoch(1, eval(1, 0), nullptr, 1, at::Device(at::kCPU)));
  EXPECT_FALSE(rank1.after_epoch(2, eval(1, 0), nullptr, 1, at::Device(at::kCPU)));
}

