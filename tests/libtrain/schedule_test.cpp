// The learning rate's one owner (libtrain/src/optim/schedule.h): the rate it computes is the rate
// in the optimizer's parameter groups and in the step's device copy, after every step and epoch,
// across a resume from its own record, and an error in the user's schedule names where. Runs on any
// CPU, no process group.
#include "optim/schedule.h"

#include "archive.h"
#include "train/base/error.h"
#include "train/fused_optim.h"
#include "train/user_code_error.h"

#include "train/sampler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <sstream>
#include <stdexcept>

namespace {

using train::LrSchedule;
using train::ScheduleContext;
using train::detail::Schedule;

// FusedSGD with its device copy of group 0's rate in view: the copy is created once, and then
// changes only when sync_lr() writes it (as under a CUDA graph, where the update reads it).
class ProbedSGD : public train::optim::FusedSGD {
 public:
  explicit ProbedSGD(std::vector<torch::optim::OptimizerParamGroup> groups, double lr)
      : FusedSGD(groups, torch::optim::SGDOptions(lr)), copy_(device_lr(0, at::kCPU)) {}
  double device_rate() const { return copy_.item<double>(); }

 private:
  at::Tensor copy_;  // shares the optimizer's device tensor
};

// Follows the rate as the CUDA graph step does (the schedule's rate_changed: TrainStep::lr_changed):
// sync the device copy, or recapture.
struct FollowingStep {
  explicit FollowingStep(ProbedSGD& opt) : opt(opt) {}
  std::function<void()> follow() {
    return [this] {
      ++changes;
      if (opt.lr_on_device()) opt.sync_lr();
    };
  }
  ProbedSGD& opt;
  int changes = 0;
};

std::vector<torch::optim::OptimizerParamGroup> two_groups() {
  return {torch::optim::OptimizerParamGroup({torch::zeros({3}, torch::requires_grad())}),
          torch::optim::OptimizerParamGroup({torch::zeros({2}, torch::requires_grad())})};
}

ScheduleContext run_of(int64_t steps_per_epoch, int epochs) {
  ScheduleContext run;
  run.steps_per_epoch = steps_per_epoch;
  run.total_steps = steps_per_epoch * epochs;
  return run;
}

// Every holder of the rate agrees with the schedule (the device copy is float32).
void expect_everywhere(const Schedule& s, const ProbedSGD& opt) {
  for (const auto& group : opt.param_groups()) EXPECT_DOUBLE_EQ(group.options().get_lr(), s.lr());
  EXPECT_FLOAT_EQ(static_cast<float>(opt.device_rate()), static_cast<float>(s.lr()));
}

using train::test::read_back;

// The schedule's record as a checkpoint holds it.
torch::serialize::InputArchive record_of(const Schedule& s) {
  torch::serialize::OutputArchive out;
  s.save(out);
  return read_back(out);
}

TEST(Schedule, PerStepRateReachesEveryGroupAndTheDeviceCopy) {
  ProbedSGD opt(two_groups(), 0.1);
  FollowingStep step(opt);
  Schedule s(train::warmup_cosine(/*warmup_steps=*/4), run_of(5, 2), opt, [] { return "at step 0"; }, step.follow());
  EXPECT_DOUBLE_EQ(s.context().base_lr, 0.1);  // the optimizer's rate as built
  EXPECT_DOUBLE_EQ(s.lr(), 0.0);               // warm-up starts at 0
  s.start_epoch();
  expect_everywhere(s, opt);
  for (int64_t k = 1; k <= 10; ++k) {
    const double before = s.lr();
    s.after_step(k);
    EXPECT_DOUBLE_EQ(s.last_step_lr(), before) << "step " << k;
    expect_everywhere(s, opt);
  }
  EXPECT_DOUBLE_EQ(s.lr(), 0.0);  // the cosine ends at 0 at the run's last step
  EXPECT_DOUBLE_EQ(s.last_step_lr(), 0.1 * 0.5 * (1 + std::cos(M_PI * 5.0 / 6.0)));
}

TEST(Schedule, EpochScheduleMovesAtEpochEndsAndPushesWhenTheNextEpochStarts) {
  ProbedSGD opt(two_groups(), 1.0);
  FollowingStep step(opt);
  Schedule s(train::step_lr(0.5), run_of(3, 3), opt, [] { return ""; }, step.follow());
  s.start_epoch();
  const int first_changes = step.changes;
  for (int64_t k = 1; k <= 3; ++k) s.after_step(k);
  EXPECT_DOUBLE_EQ(s.lr(), 1.0);
  EXPECT_EQ(step.changes, first_changes);  // the rate didn't change: a captured step stays as it is
  s.after_epoch(1);
  EXPECT_DOUBLE_EQ(s.lr(), 0.5);
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].options().get_lr(), 1.0);  // not before the next epoch
  s.start_epoch();
  EXPECT_EQ(step.changes, first_changes + 1);
  expect_everywhere(s, opt);
  EXPECT_DOUBLE_EQ(s.last_step_lr(), 1.0);
}

TEST(Schedule, ResumedRateIsTheOneThatTrains) {
  ProbedSGD opt(two_groups(), 1.0);
  Schedule interrupted(train::step_lr(0.5), run_of(3, 3), opt, [] { return ""; });
  interrupted.after_epoch(1);
  interrupted.after_epoch(2);
  torch::serialize::InputArchive record = record_of(interrupted);  // a checkpoint after epoch 2
  FollowingStep step(opt);
  Schedule s(train::step_lr(0.5), run_of(3, 3), opt, [] { return ""; }, step.follow());
  s.load(record);
  s.start_epoch();
  EXPECT_DOUBLE_EQ(s.lr(), 0.25);
  expect_everywhere(s, opt);
  s.after_epoch(2);
  EXPECT_DOUBLE_EQ(s.lr(), 0.125);  // the recurrence goes on from the resumed rate
}

TEST(Schedule, ConstantRateNeverTouchesACapturedStepAfterTheFirstPush) {
  ProbedSGD opt(two_groups(), 0.3);
  FollowingStep step(opt);
  Schedule s(train::constant_lr(), run_of(4, 1), opt, [] { return ""; }, step.follow());
  s.start_epoch();
  EXPECT_EQ(step.changes, 1);
  for (int64_t k = 1; k <= 4; ++k) s.after_step(k);
  s.after_epoch(1);
  s.start_epoch();
  EXPECT_EQ(step.changes, 1);
  expect_everywhere(s, opt);
}

TEST(Schedule, AnErrorInTheUsersScheduleNamesTheScheduleAndWhere) {
  ProbedSGD opt(two_groups(), 0.1);
  LrSchedule bad;
  bad.every = LrSchedule::Every::step;
  bad.next = [](int64_t index, double lr) {
    if (index == 2) throw std::runtime_error("boom at two");
    return lr;
  };
  Schedule s(bad, run_of(4, 1), opt, [] { return "at step 2 (epoch 1) on rank 0"; });
  s.start_epoch();
  s.after_step(1);
  try {
    s.after_step(2);
    FAIL() << "expected a train::UserCodeError";
  } catch (const train::UserCodeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the LR schedule"), std::string::npos) << what;
    EXPECT_NE(what.find("at step 2 (epoch 1) on rank 0"), std::string::npos) << what;
    EXPECT_NE(what.find("boom at two"), std::string::npos) << what;
  }
}

TEST(Schedule, ARecordWithoutItsRateIsACheckpointError) {
  ProbedSGD opt(two_groups(), 0.1);
  Schedule s(train::constant_lr(), run_of(4, 1), opt, [] { return ""; });
  torch::serialize::OutputArchive out;
  out.write("other", torch::zeros({1}));
  torch::serialize::InputArchive in = read_back(out);
  EXPECT_THROW(s.load(in), train::CheckpointError);
  EXPECT_DOUBLE_EQ(s.lr(), 0.1);
}

TEST(Schedule, ContextCountsEveryRanksShardAndCapsAtMaxSteps) {
  train::RunConfig run;
  // 4 steps an epoch (100 samples over 3 ranks: 34 each, padded, in batches of 10).
  EXPECT_EQ(train::DistributedSampler::samples_per_rank(100, 3), 34);
  ScheduleContext ctx = train::detail::schedule_context(4, 5, run);
  EXPECT_EQ(ctx.steps_per_epoch, 4);
  EXPECT_EQ(ctx.total_steps, 20);
  run.max_steps = 7;
  EXPECT_EQ(train::detail::schedule_context(4, 5, run).total_steps, 7);
  run.dry_run = true;
  run.max_steps.reset();
  EXPECT_EQ(train::detail::schedule_context(4, 5, run).steps_per_epoch, 1);
}

}  // namespace
