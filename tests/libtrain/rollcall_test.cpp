// The hung-rank roll-call's pieces (private headers of libtrain/src): the record's text in the
// store, the one-line verdict, the stall timeout's rules, and the straggler report.
#include "health/rollcall.h"
#include "health/straggler.h"
#include "train/base/error.h"

#include <gtest/gtest.h>

using train::detail::CollectiveKind;
using train::detail::Phase;
using train::detail::RankPosition;

namespace {

RankPosition at(int rank, Phase phase, int64_t step, int64_t waiting = 0, int bucket = -1, double seconds = 0) {
  RankPosition p;
  p.rank = rank;
  p.phase = phase;
  p.step = step;
  p.waiting = waiting;
  p.seq = waiting;
  p.bucket = bucket;
  p.kind = waiting > 0 ? CollectiveKind::allreduce : CollectiveKind::none;
  p.seconds = seconds;
  return p;
}

}  // namespace

TEST(RollCall, NamesTheOddRankOutAfterTheOthers) {
  const std::string line = train::detail::format_roll_call(
      {at(0, Phase::bucket_allreduce, 406, 812, 0, 95), at(1, Phase::get_batch, 406, 0, -1, 94.4),
       at(2, Phase::bucket_allreduce, 406, 812, 0, 95), at(3, Phase::bucket_allreduce, 406, 812, 0, 96)});
  EXPECT_EQ(line, "ranks 0,2,3 in all-reduce of bucket 0 #812 (step 406); rank 1 in get_batch at step 406 for 94 s");
}

// With each rank's node, the odd ones out name theirs (trainctl run reads it to blame the right node).
TEST(RollCall, TheOddOnesOutNameTheirNodes) {
  const std::vector<std::string> hosts = {"node1", "node2", "node2", "node3"};
  EXPECT_EQ(train::detail::format_roll_call({at(0, Phase::bucket_allreduce, 406, 812, 0, 95),
                                             at(1, Phase::get_batch, 406, 0, -1, 94.4),
                                             at(2, Phase::bucket_allreduce, 406, 812, 0, 95), std::nullopt},
                                            hosts),
            "ranks 0,2 in all-reduce of bucket 0 #812 (step 406); rank 1 on node2 in get_batch at step 406 for 94 s; "
            "rank 3 on node3: no record (not started, or frozen)");
}

TEST(RollCall, SaysWhichCollectiveAndPhaseAndMissingRecords) {
  const std::string line = train::detail::format_roll_call(
      {at(0, Phase::stop_check, 4, 9, -1, 5), at(1, Phase::bucket_allreduce, 5, 9, 0, 4), std::nullopt,
       at(3, Phase::stop_check, 4, 9, -1, 5)});
  EXPECT_EQ(line, "ranks 0,3 in all-reduce #9 (stop check, step 4); rank 1 in all-reduce of bucket 0 #9 (step 5) for 4 s; "
                  "rank 2: no record (not started, or frozen)");
  EXPECT_EQ(train::detail::format_roll_call({at(0, Phase::evaluation, 7, 0, -1, 61), at(1, Phase::evaluation, 7, 0, -1, 60)}),
            "every rank in evaluation at step 7 for 61 s");
}

TEST(RollCall, RecordTravelsThroughItsText) {
  train::detail::RollCallRecord r;
  r.begin_step(12);
  r.begin_wait(r.launch(), CollectiveKind::broadcast);
  const auto p = train::detail::decode(3, train::detail::encode(r));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->rank, 3);
  EXPECT_EQ(p->step, 12);
  EXPECT_EQ(p->waiting, 1);
  EXPECT_EQ(p->kind, CollectiveKind::broadcast);
  EXPECT_EQ(p->phase, Phase::get_batch);
  EXPECT_GE(p->seconds, 0.0);
  r.end_wait();
  EXPECT_EQ(train::detail::decode(3, train::detail::encode(r))->waiting, 0);
  EXPECT_FALSE(train::detail::decode(0, "garbage").has_value());
  EXPECT_FALSE(train::detail::decode(0, "99 0 -1 1 1 0 0.5").has_value());  // no such phase
}

TEST(RollCall, StallTimeoutStaysBelowTheGroupTimeout) {
  EXPECT_DOUBLE_EQ(train::detail::auto_stall_timeout(0, 300), 240);      // no step yet: 80% of it
  EXPECT_DOUBLE_EQ(train::detail::auto_stall_timeout(0.1, 300), 60);     // the floor
  EXPECT_DOUBLE_EQ(train::detail::auto_stall_timeout(12, 300), 120);     // 10 steps
  EXPECT_DOUBLE_EQ(train::detail::auto_stall_timeout(100, 300), 240);    // the cap
  EXPECT_NO_THROW(train::detail::check_stall_timeout(0, 300));
  EXPECT_NO_THROW(train::detail::check_stall_timeout(299, 300));
  try {
    train::detail::check_stall_timeout(300, 300);
    FAIL() << "a stall timeout equal to --dist-timeout was accepted";
  } catch (const train::ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--stall-timeout 300"), std::string::npos) << what;
    EXPECT_NE(what.find("--dist-timeout (300)"), std::string::npos) << what;
    EXPECT_NE(what.find("Hint:"), std::string::npos) << what;
  }
}

TEST(Straggler, NamesARankSlowThreeReportsInARow) {
  train::detail::StragglerReport s;
  std::string warning;
  const std::vector<double> slow1 = {0.10, 0.13, 0.10, 0.10};  // rank 1: 30% over the median
  EXPECT_EQ(s.report(slow1, &warning), "slowest rank 1 130.0 ms/step vs median 100.0 ms (+30%)");
  EXPECT_EQ(warning, "");
  s.report(slow1, &warning);
  EXPECT_EQ(warning, "");
  s.report(slow1, &warning);
  EXPECT_NE(warning.find("straggler: rank 1 (130.0 ms)"), std::string::npos) << warning;
  EXPECT_EQ(warning.find("rank 0"), std::string::npos) << warning;
  s.report(slow1, &warning);
  EXPECT_EQ(warning, "");  // named once per streak
}

TEST(Straggler, ABreakInTheStreakStartsItAgain) {
  train::detail::StragglerReport s;
  std::string warning;
  const std::vector<double> slow = {0.1, 0.1, 0.125};  // 25% over
  const std::vector<double> even = {0.1, 0.1, 0.11};   // 10% over: not slow
  s.report(slow, &warning);
  s.report(slow, &warning);
  s.report(even, &warning);
  s.report(slow, &warning);
  s.report(slow, &warning);
  EXPECT_EQ(warning, "");
  s.report(slow, &warning);
  EXPECT_NE(warning.find("rank 2"), std::string::npos) << warning;
  EXPECT_EQ(s.report({0.2}, &warning), "");  // one rank: nothing to compare
}
