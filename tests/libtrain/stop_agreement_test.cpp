// The stop agreement (libtrain/src/stop_agreement.h) of one process: a posted preemption signal
// becomes a requeue request, SIGTERM a cancel, a non-finite loss a non-finite stop that wins over
// the others; checks come every few steps. Runs on any CPU, no process group, no SLURM.
#include "stop_agreement.h"

#include "nonfinite.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <csignal>
#include <limits>

namespace {

using train::StopKind;
using train::StopRequest;
using train::detail::StopAgreement;

train::CheckpointConfig checkpoint_config() {
  train::CheckpointConfig c;
  c.preempt_signals = "USR2";
  return c;
}

// One process outside SLURM (no job id: no squeue, no scontrol).
train::DistEnv one_process() { return train::DistEnv{}; }

TEST(StopAgreement, NothingPostedTrainsOn) {
  StopAgreement stops(checkpoint_config(), one_process());
  stops.connect(nullptr, at::kCPU, /*read_later=*/false, /*check_every=*/1);
  EXPECT_EQ(stops.check(1).kind, StopKind::none);
  EXPECT_EQ(stops.settle(/*at_epoch_end=*/true).kind, StopKind::none);
}

TEST(StopAgreement, PostedPreemptionBecomesARequeueRequest) {
  StopAgreement stops(checkpoint_config(), one_process());
  stops.connect(nullptr, at::kCPU, false, 1);
  ASSERT_EQ(std::raise(SIGUSR2), 0);  // the handler only notes it
  const StopRequest r = stops.check(3);
  EXPECT_EQ(r.kind, StopKind::preempt);
  EXPECT_TRUE(r.requeue());
  EXPECT_EQ(r.reason, "signal SIGUSR2");
  EXPECT_EQ(stops.final_request(r).kind, StopKind::preempt);  // no non-finite value overrides it
  EXPECT_FALSE(stops.requeue_job());  // outside SLURM there is no job to requeue
}

TEST(StopAgreement, SigtermIsACancelThatIsNotRequeued) {
  StopAgreement stops(checkpoint_config(), one_process());
  stops.connect(nullptr, at::kCPU, false, 1);
  ASSERT_EQ(std::raise(SIGTERM), 0);
  const StopRequest r = stops.check(1);
  EXPECT_EQ(r.kind, StopKind::cancel);
  EXPECT_FALSE(r.requeue());
  EXPECT_EQ(r.signal, SIGTERM);
}

TEST(StopAgreement, ChecksComeEveryFewSteps) {
  StopAgreement stops(checkpoint_config(), one_process());
  stops.connect(nullptr, at::kCPU, false, /*check_every=*/4);
  EXPECT_FALSE(stops.due(3));
  EXPECT_TRUE(stops.due(4));
  EXPECT_TRUE(stops.due(8));
}

TEST(StopAgreement, NonFiniteLossStopsAndWinsOverAPreemption) {
  torch::nn::Linear model(3, 2);
  train::TrainConfig config;
  StopAgreement stops(checkpoint_config(), one_process());
  stops.connect(nullptr, at::kCPU, false, 1);
  stops.watch(config, *model);
  const StopRequest preempt{StopKind::preempt, "signal SIGUSR2"};
  EXPECT_EQ(stops.final_request(preempt).kind, StopKind::preempt);
  stops.nonfinite().after_step(torch::tensor(1.5), 1);
  EXPECT_EQ(stops.check(1).kind, StopKind::none);
  stops.nonfinite().after_step(torch::tensor(std::numeric_limits<double>::quiet_NaN()), 2);
  EXPECT_EQ(stops.settle(/*at_epoch_end=*/false).kind, StopKind::nonfinite);  // before a checkpoint
  EXPECT_EQ(stops.check(2).kind, StopKind::nonfinite);
  EXPECT_EQ(stops.final_request(preempt).kind, StopKind::nonfinite);  // no checkpoint of bad weights
  const std::string reason = stops.nonfinite_reason(1);
  EXPECT_NE(reason.find("step 2"), std::string::npos) << reason;
}

TEST(StopAgreement, SkipModeGivesUpAfterTheMaximumInARow) {
  torch::nn::Linear model(3, 2);
  train::TrainConfig config;
  config.run.nonfinite = train::NonFinite::skip;
  config.run.nonfinite_max_skips = 2;
  StopAgreement stops(checkpoint_config(), one_process());
  stops.connect(nullptr, at::kCPU, false, /*check_every=*/100);
  stops.watch(config, *model);
  const at::Tensor nan = torch::tensor(std::numeric_limits<double>::quiet_NaN());
  EXPECT_FALSE(stops.nonfinite().before_update(nan, 1, nullptr));
  EXPECT_FALSE(stops.due(1));
  EXPECT_FALSE(stops.nonfinite().before_update(nan, 2, nullptr));
  EXPECT_TRUE(stops.due(2));  // at once, not at the next regular check
  EXPECT_EQ(stops.check(2).kind, StopKind::nonfinite);
  const std::string reason = stops.nonfinite_reason(1);
  EXPECT_NE(reason.find("--nonfinite-max-skips"), std::string::npos) << reason;
}

TEST(StopAgreement, NoDeadlineLineOutsideSlurm) {
  StopAgreement stops(checkpoint_config(), one_process());
  EXPECT_EQ(stops.deadline_line(), "");
}

// Flags read a check later (as on a GPU, here on the CPU): a signal posted at one check stops the
// run at the next; one posted in an epoch's last check and drained by the epoch's end stops it at
// the next epoch's first check instead of a check later.
TEST(StopAgreement, ReadLaterFlagsStopAtTheNextCheckAndSurviveTheEpochsEnd) {
  {
    StopAgreement stops(checkpoint_config(), one_process());
    stops.connect(nullptr, at::kCPU, /*read_later=*/true, /*check_every=*/20);
    EXPECT_EQ(stops.check(20).kind, StopKind::none);  // nothing posted yet; posts
    ASSERT_EQ(std::raise(SIGUSR2), 0);
    EXPECT_EQ(stops.check(40).kind, StopKind::none);  // reads step 20's flags, posts the signal
    EXPECT_EQ(stops.check(60).kind, StopKind::preempt);
  }
  StopAgreement stops(checkpoint_config(), one_process());
  stops.connect(nullptr, at::kCPU, /*read_later=*/true, /*check_every=*/20);
  ASSERT_EQ(std::raise(SIGUSR2), 0);
  EXPECT_EQ(stops.check(40).kind, StopKind::none);  // posts the signal
  EXPECT_EQ(stops.settle(/*at_epoch_end=*/true).kind, StopKind::none);  // the epoch ends first: drained
  const StopRequest r = stops.check(60);
  EXPECT_EQ(r.kind, StopKind::preempt);
  EXPECT_EQ(r.reason, "signal SIGUSR2");
}

}  // namespace
