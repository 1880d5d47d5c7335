// The health check's verdict (which nodes are named; health_verdict.h), its options from
// TrainConfig's health section (health_check.h), and the network interface checks behind
// --interface and the store's bind address (train/base/net_interfaces.h), with the interface reaching a
// process group through its options (process_group_impl.h), as a loop of a program's own passes it.
#include "health/health_check.h"
#include "health/health_verdict.h"
#include "dist/process_group_impl.h"

#include "train/base/error.h"
#include "train/base/net_interfaces.h"
#include "train/process_group.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>

namespace train::detail {
namespace {

TEST(HealthVerdict, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_TRUE(std::isnan(median({})));
}

TEST(HealthVerdict, OneSlowNodeOfTwoIsNamed) {
  // Each node against the other: 10 < 0.5 x 100, while 100 >= 0.5 x 10.
  const auto v = judge_nodes({"node1", "node2"}, {100, 10}, 0.5);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_FALSE(v[0].bad);
  EXPECT_TRUE(v[1].bad);
  EXPECT_DOUBLE_EQ(v[1].reference, 100);
  EXPECT_EQ(bad_node_list(v), "node2");
}

TEST(HealthVerdict, AtTheFractionIsNotBelowIt) {
  EXPECT_EQ(bad_node_list(judge_nodes({"a", "b"}, {100, 50}, 0.5)), "");
  EXPECT_EQ(bad_node_list(judge_nodes({"a", "b"}, {100, 49.9}, 0.5)), "b");
}

TEST(HealthVerdict, NodesTakeTheirSlowestRankAndTheOthersMedian) {
  // Ranks 0,1 on a; 2,3 on b; 4,5 on c; 6 on d. b's rank 3 is slow: b's value is 20.
  const auto v = judge_nodes({"a", "a", "b", "b", "c", "c", "d"}, {100, 90, 95, 20, 80, 110, 70}, 0.5);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_DOUBLE_EQ(v[0].value, 90);
  EXPECT_DOUBLE_EQ(v[1].value, 20);
  EXPECT_DOUBLE_EQ(v[1].reference, 80);  // median of a 90, c 80, d 70
  EXPECT_DOUBLE_EQ(v[0].reference, 70);  // median of b 20, c 80, d 70
  EXPECT_EQ(bad_node_list(v), "b");
}

TEST(HealthVerdict, OneNodeHasNothingToCompareWith) {
  const auto v = judge_nodes({"solo", "solo"}, {5, 100}, 0.9);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(std::isnan(v[0].reference));
  EXPECT_FALSE(v[0].bad);
}

TEST(HealthVerdict, AFailedMeasurementMakesItsNodeBad) {
  EXPECT_EQ(bad_node_list(judge_nodes({"a", "b", "c"}, {100, NAN, 100}, 0.5)), "b");
  EXPECT_EQ(bad_node_list(judge_nodes({"a", "b", "c"}, {100, 100, 0}, 0.5)), "c");
}

TEST(HealthVerdict, RanksAreGroupedByNodeInOrderOfFirstAppearance) {
  const auto r = ranks_by_node({"b", "a", "b", "c", "a"});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0], (std::vector<int>{0, 2}));  // b: rank 0's node comes first
  EXPECT_EQ(r[1], (std::vector<int>{1, 4}));
  EXPECT_EQ(r[2], (std::vector<int>{3}));
  EXPECT_TRUE(ranks_by_node({}).empty());
}

TEST(HealthVerdict, EachMeasureNamesItsOwnBadNodes) {
  // GEMM: node2 slow. Within-node all-reduce (nodes of two ranks or more): node1 slow; node3 has
  // one rank, so it has no within-node measure and is not judged there.
  const std::vector<MeasureVerdicts> m = {
      {"GEMM throughput", judge_nodes({"node1", "node2", "node3"}, {100, 10, 100}, 0.5)},
      {"within-node all-reduce bus bandwidth", judge_nodes({"node1", "node1", "node2", "node2"}, {1, 2, 5, 5}, 0.5)}};
  EXPECT_EQ(bad_node_list(m), "node2,node1");
  EXPECT_EQ(failed_measures(m, 0.5),
            "node(s) node2: GEMM throughput below 0.5 x the median of the other nodes'; "
            "node(s) node1: within-node all-reduce bus bandwidth below 0.5 x the median of the other nodes'");
}

TEST(HealthVerdict, ANodeBadInTwoMeasuresIsNamedOnce) {
  const std::vector<MeasureVerdicts> m = {{"GEMM throughput", judge_nodes({"a", "b"}, {100, 10}, 0.25)},
                                          {"within-node all-reduce bus bandwidth", judge_nodes({"a", "b"}, {8, 1}, 0.25)}};
  EXPECT_EQ(bad_node_list(m), "b");
  EXPECT_EQ(failed_measures(m, 0.25),
            "node(s) b: GEMM throughput below 0.25 x the median of the other nodes'; "
            "node(s) b: within-node all-reduce bus bandwidth below 0.25 x the median of the other nodes'");
}

TEST(HealthVerdict, NothingFailedSaysNothing) {
  const std::vector<MeasureVerdicts> m = {{"GEMM throughput", judge_nodes({"a", "b"}, {100, 90}, 0.5)},
                                          {"within-node all-reduce bus bandwidth", {}}};
  EXPECT_EQ(bad_node_list(m), "");
  EXPECT_EQ(failed_measures(m, 0.5), "");
}

TEST(NetInterfaces, LoopbackIsListedAndAMissingInterfaceIsNamedWithTheOthers) {
  const auto all = net::list_interfaces();
  EXPECT_FALSE(net::interface_of("127.0.0.1", all).empty()) << net::describe(all);
  EXPECT_NO_THROW(net::require_interface(net::interface_of("127.0.0.1", all), "--interface"));
  try {
    net::require_interface("nosuch0", "--interface");
    ADD_FAILURE() << "no error for a missing interface";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--interface 'nosuch0'"), std::string::npos) << what;
    EXPECT_NE(what.find("Interfaces here: "), std::string::npos) << what;
    EXPECT_NE(what.find("127.0.0.1"), std::string::npos) << what;
    EXPECT_NE(what.find("Hint: "), std::string::npos) << what;
  }
}

TEST(NetInterfaces, TheStoreBindsToTheAddressMasterAddrNames) {
  std::string note;
  EXPECT_EQ(net::store_bind_address("127.0.0.1", "", &note), "127.0.0.1");
  EXPECT_NE(note.find("127.0.0.1"), std::string::npos) << note;
  // An address of no interface here: every interface, and the note says why.
  EXPECT_EQ(net::store_bind_address("192.0.2.1", "", &note), "");  // TEST-NET-1, never local
  EXPECT_NE(note.find("no address of this host"), std::string::npos) << note;
  std::string error;
  const int fd = net::listen_on("127.0.0.1", 0, &error);
  EXPECT_GE(fd, 0) << error;
  if (fd >= 0) close(fd);
  EXPECT_LT(net::listen_on("not-an-address", 0, &error), 0);
  EXPECT_NE(error.find("not-an-address"), std::string::npos) << error;
}

TEST(HealthOptions, ComeFromTheConfigsHealthSection) {
  TrainConfig c;
  c.health.check = true;
  c.health.min_fraction = 0.25;
  c.health.exclude_bad_nodes = true;
  const HealthCheckOptions o = health_check_options(c);
  EXPECT_DOUBLE_EQ(o.min_fraction, 0.25);
  EXPECT_FALSE(o.warn_only);
  EXPECT_TRUE(o.exclude_bad_nodes);
}

TEST(HealthOptions, ValidateNamesTheFlagThatNeedsAnother) {
  TrainConfig c;
  c.distributed.interface = net::interface_of("127.0.0.1", net::list_interfaces());  // TRAIN_INTERFACE unread
  EXPECT_NO_THROW(validate_network(c));
  c.health.warn_only = true;
  try {
    validate_network(c);
    ADD_FAILURE() << "no error for --health-warn-only without --health-check";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--health-warn-only: expected --health-check too"), std::string::npos) << e.what();
  }
  c.health.warn_only = false;
  c.distributed.interface = "nosuch0";
  EXPECT_THROW(validate_network(c), ConfigError);
}

// A loop built from the parts: the interface reaches the group (and the health check's
// subgroups, which read it from the group) through ProcessGroupOptions, with no Trainer.
TEST(ProcessGroupInterface, TheOptionsInterfaceReachesTheGroup) {
  const std::string lo = net::interface_of("127.0.0.1", net::list_interfaces());
  ASSERT_FALSE(lo.empty());
  DistEnv env;
  env.master_port = 0;  // one rank: the OS picks the store's port
  ProcessGroupOptions o;
  o.interface = "nosuch0";
  try {
    ProcessGroup::create(env, o);
    ADD_FAILURE() << "no error for ProcessGroupOptions::interface = nosuch0";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--interface 'nosuch0'"), std::string::npos) << e.what();
  }
  o.interface = lo;
  const auto pg = ProcessGroup::create(env, o);
  EXPECT_EQ(details::core_of(*pg).interface, lo);
  EXPECT_EQ(chosen_interface(lo), lo);  // the options win over TRAIN_INTERFACE
}

}  // namespace
}  // namespace train::detail
