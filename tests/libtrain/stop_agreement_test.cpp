// The stop agreement (libtrain/src/stops/stop_agreement.h) of one process: a posted preemption signal
// becomes a requeue request, SIGTERM a cancel, a non-finite loss a non-finite stop that wins over
// the others; checks come every few steps. Runs on any CPU, no process group, no SLURM.
#include "stops/stop_agreement.h"

#include "step/step_observers.h"
#include "step/train_step.h"

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
  EXPECT_EQ(stops.poll(1).kind, StopKind::none);
  EXPECT_EQ(stops.settle(/*at_epoch_end=*/true).kind, StopKind::none);
}

TEST(StopAgreement, PostedPreemptionBecomesARequeueRequest) {
  StopAgreement stops(checkpoint_config(), one_process());
  stops.connect(nullptr, at::kCPU, false, 1);
  ASSERT_EQ(std::raise(SIGUSR2), 0);  // the handler only notes it
  const StopRequest r = stops.poll(3);
  EXPECT_EQ(r.kind, StopKind::preempt);
  EXPECT_TRUE(r.requeue());
  EXPECT_EQ(r.reason, "signal SIGUSR2");
  EXPECT_EQ(stops.final_request(r, /*epoch=*/1).kind, StopKind::preempt);  // no non-finite value overrides it
  EXPECT_FALSE(stops.requeue_job());  // outside SLURM there is no job to requeue
}

TEST(StopAgreement, SigtermIsACancelThatIsNotRequeued) {
  StopAgreement stops(checkpoint_config(), one_process());
  stops.connect(nullptr, at::kCPU, false, 1);
  ASSERT_EQ(std::raise(SIGTERM), 0);
  const StopRequest r = stops.poll(1);
  EXPECT_EQ(r.kind, StopKind::cancel);
  EXPECT_FALSE(r.requeue());
  EXPECT_EQ(r.signal, SIGTERM);
}

TEST(StopAgreement, ChecksComeEveryFewSteps) {
  StopAgreement stops(checkpoint_config(), one_process());
  stops.connect(nullptr, at::kCPU, false, /*check_every=*/4);
  ASSERT_EQ(std::raise(SIGUSR2), 0);
  EXPECT_EQ(stops.poll(3).kind, StopKind::none);  // not a check's step: the signal waits
  EXPECT_EQ(stops.poll(4).kind, StopKind::preempt);
}

TEST(StopAgreement, NonFiniteLossStopsAndWinsOverAPreemption) {
  torch::nn::Linear model(3, 2);
  train::TrainConfig config;
  StopAgreement stops(checkpoint_config(), one_process());
  stops.connect(nullptr, at::kCPU, false, 1);
  train::detail::StepParts parts;
  train::detail::StepObservers observers;
  stops.equip(config, *model, /*clip=*/nullptr, parts, observers);
  EXPECT_NE(parts.watch, nullptr);          // a captured step notes its values in the graph
  EXPECT_FALSE(parts.before_update);        // --nonfinite stop: no decision before the update
  EXPECT_FALSE(stops.skipped_steps());
  const StopRequest preempt{StopKind::preempt, "signal SIGUSR2"};
  EXPECT_EQ(stops.final_request(preempt, 1).kind, StopKind::preempt);
  auto step = [&](int64_t n, double loss) {
    observers.before_step(n);
    at::Tensor l = torch::tensor(loss);
    observers.after_step(n, l);
  };
  step(1, 1.5);
  EXPECT_EQ(stops.poll(1).kind, StopKind::none);
  step(2, std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(stops.settle(/*at_epoch_end=*/false).kind, StopKind::nonfinite);  // before a checkpoint
  EXPECT_EQ(stops.poll(2).kind, StopKind::nonfinite);
  const StopRequest final_request = stops.final_request(preempt, /*epoch=*/1);
  EXPECT_EQ(final_request.kind, StopKind::nonfinite);  // no checkpoint of bad weights
  EXPECT_NE(final_request.reason.find("step 2"), std::string::npos) << final_request.reason;
}

TEST(StopAgreement, SkipModeGivesUpAfterTheMaximumInARow) {
  torch::nn::Linear model(3, 2);
  train::TrainConfig config;
  config.run.nonfinite = train::NonFinite::skip;
  config.run.nonfinite_max_skips = 2;
  StopAgreement stops(checkpoint_config(), one_process());
  stops.connect(nullptr, at::kCPU, false, /*check_every=*/100);
  train::detail::StepParts parts;
  train::detail::StepObservers observers;
  stops.equip(config, *model, /*clip=*/nullptr, parts, observers);
  EXPECT_EQ(parts.watch, nullptr);  // skip decides on the host: no note in a graph
  ASSERT_TRUE(parts.before_update);
  const at::Tensor nan = torch::tensor(std::numeric_limits<double>::quiet_NaN());
  observers.before_step(1);
  EXPECT_FALSE(parts.before_update(nan));
  EXPECT_EQ(stops.poll(1).kind, StopKind::none);  // not a check's step, not given up yet
  observers.before_step(2);
  EXPECT_FALSE(parts.before_update(nan));
  EXPECT_EQ(stops.skipped_steps(), std::optional<int64_t>(2));
  EXPECT_EQ(stops.poll(2).kind, StopKind::nonfinite);  // at once, not at the next regular check
  const std::string reason = stops.final_request(StopRequest{StopKind::nonfinite, "", 0}, 1).reason;
  EXPECT_NE(reason.find("--nonfinite-max-skips"), std::string::npos) << reason;
}

TEST(StopAgreement, NoDeadlineOutsideSlurm) {
  StopAgreement stops(checkpoint_config(), one_process());
  EXPECT_FALSE(stops.time_margin());  // no job end time: --time-margin is no deadline
}

// Flags read a check later (as on a GPU, here on the CPU): a signal posted at one check stops the
// run at the next; one posted in an epoch's last check and drained by the epoch's end stops it at
// the next epoch's first check instead of a check later.
TEST(StopAgreement, ReadLaterFlagsStopAtTheNextCheckAndSurviveTheEpochsEnd) {
  {
    StopAgreement stops(checkpoint_config(), one_process());
    stops.connect(nullptr, at::kCPU, /*read_later=*/true, /*check_every=*/20);
    EXPECT_EQ(stops.poll(20).kind, StopKind::none);  // nothing posted yet; posts
    ASSERT_EQ(std::raise(SIGUSR2), 0);
    EXPECT_EQ(stops.poll(40).kind, StopKind::none);  // reads step 20's flags, posts the signal
    EXPECT_EQ(stops.poll(60).kind, StopKind::preempt);
  }
  StopAgreement stops(checkpoint_config(), one_process());
  stops.connect(nullptr, at::kCPU, /*read_later=*/true, /*check_every=*/20);
  ASSERT_EQ(std::raise(SIGUSR2), 0);
  EXPECT_EQ(stops.poll(40).kind, StopKind::none);  // posts the signal
  EXPECT_EQ(stops.settle(/*at_epoch_end=*/true).kind, StopKind::none);  // the epoch ends first: drained
  const StopRequest r = stops.poll(60);
  EXPECT_EQ(r.kind, StopKind::preempt);
  EXPECT_EQ(r.reason, "signal SIGUSR2");
}

}  // namespace
