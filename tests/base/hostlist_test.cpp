// Tests for libtrain/base/src/hostlist.cpp: a table of SLURM hostlist expressions (every case in
// docs and REFERENCE), invalid ones, compression round trips, and a comparison with the real
// `scontrol show hostnames` when SLURM's client is installed.
#include "train/base/hostlist.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "test_process.h"
#include "train/base/error.h"

namespace train {
namespace {

using Hosts = std::vector<std::string>;

struct ExpandCase {
  std::string expr;
  Hosts hosts;
};

const std::vector<ExpandCase>& expand_cases() {
  static const std::vector<ExpandCase> cases = {
      // REFERENCE.md, checked there against scontrol (Slurm 22.05).
      {"node[01-04,07]", {"node01", "node02", "node03", "node04", "node07"}},
      {"a,b[1-2],c-ib[001,003]", {"a", "b1", "b2", "c-ib001", "c-ib003"}},
      {"gpu[1-2]-ib[3-4]", {"gpu1-ib3", "gpu1-ib4", "gpu2-ib3", "gpu2-ib4"}},
      {"n[098-101]", {"n098", "n099", "n100", "n101"}},
      // Lightning's bugs: a bracket list, a plain comma list, dashes in names.
      {"linux[1,2]", {"linux1", "linux2"}},
      {"linux1,linux2", {"linux1", "linux2"}},
      {"my-node-01,my-node-02", {"my-node-01", "my-node-02"}},
      {"node-a[1-2]", {"node-a1", "node-a2"}},
      // Single hosts and widths.
      {"node1", {"node1"}},
      {"n1-2", {"n1-2"}},
      {"n[0-0]", {"n0"}},
      {"n[007]", {"n007"}},
      {"n[9-11]", {"n9", "n10", "n11"}},
      {"n[01-3]", {"n01", "n02", "n03"}},
      {"n[1-03]", {"n1", "n2", "n3"}},
      {"n[00-1]x[01-02]", {"n00x01", "n00x02", "n01x01", "n01x02"}},
      {"n[4294967295-4294967296]", {"n4294967295", "n4294967296"}},
      // Several groups: SLURM's order (last group fastest, then first, second, ...).
      {"n[1-2][3-4]", {"n13", "n14", "n23", "n24"}},
      {"n[1-3]y[1-2]", {"n1y1", "n1y2", "n2y1", "n2y2", "n3y1", "n3y2"}},
      {"x[1-2]y[1-2]z[1-2]",
       {"x1y1z1", "x1y1z2", "x2y1z1", "x2y1z2", "x1y2z1", "x1y2z2", "x2y2z1", "x2y2z2"}},
      {"n[1-2,5-6]-x[7]", {"n1-x7", "n2-x7", "n5-x7", "n6-x7"}},
      // Separators, duplicates, bare numbers, suffixes.
      {"a, b", {"a", "b"}},
      {"a b\tc", {"a", "b", "c"}},
      {"  n[1-2]  ", {"n1", "n2"}},
      {"n[1-3],n2", {"n1", "n2", "n3", "n2"}},
      {"n[1-2,2-3]", {"n1", "n2", "n2", "n3"}},
      {"[1-2]", {"1", "2"}},
      {"n[1-2]-ib", {"n1-ib", "n2-ib"}},
      {"rack[1-2]-n[01-02].ib", {"rack1-n01.ib", "rack1-n02.ib", "rack2-n01.ib", "rack2-n02.ib"}},
  };
  return cases;
}

TEST(HostlistExpand, Table) {
  for (const ExpandCase& c : expand_cases()) {
    EXPECT_EQ(hostlist_expand(c.expr), c.hosts) << "expression: " << c.expr;
  }
}

TEST(HostlistExpand, LargeRanges) {
  const Hosts hosts = hostlist_expand("n[1-65536]");
  ASSERT_EQ(hosts.size(), 65536u);
  EXPECT_EQ(hosts.front(), "n1");
  EXPECT_EQ(hosts.back(), "n65536");
  EXPECT_EQ(hostlist_expand("a[1-1000]b[1-1000]").size(), 1000000u);
}

struct InvalidCase {
  std::string expr;
  std::string fragment;  ///< part of the message that pins the problem down
};

TEST(HostlistExpand, InvalidExpressionsThrowConfigError) {
  const std::vector<InvalidCase> cases = {
      {"", "an empty expression"},
      {"   ", "an empty expression"},
      {"n[3-1]", "LO <= HI"},
      {"n[010-009]", "LO <= HI"},
      {"n[1-3", "a ']' closing this '['"},
      {"n1-3]", "an unmatched ']'"},
      {"n]1[", "an unmatched ']'"},
      {"n[]", "'[]'"},
      {"n[1,,2]", "an empty element"},
      {"n[1,]", "an empty element"},
      {"n[a-b]", "a decimal number"},
      {"n[x]", "a decimal number"},
      {"n[-1]", "a decimal number"},
      {"n[1-]", "a decimal number after '-'"},
      {"n[1-2x]", "',' or ']'"},
      {"n[1-2-3]", "',' or ']'"},
      {"n[+1-2]", "a decimal number"},
      {"n[ 1-2]", "a space"},
      {"n[1 - 2]", "',' or ']'"},
      {"n[[1]]", "a nested '['"},
      {"a,,b", "two commas in a row"},
      {",a", "a leading comma"},
      {"a,", "a trailing comma"},
      {"n[1-65537]", "at most 65536 hosts in one range"},
      {"n[0-99999999999]", "at most 65536 hosts in one range"},
      {"a[1-2000]b[1-2000]", "hosts in all"},
      {"n[99999999999999999999]", "below 2^64"},
  };
  for (const InvalidCase& c : cases) {
    try {
      const Hosts hosts = hostlist_expand(c.expr);
      ADD_FAILURE() << "expected ConfigError for '" << c.expr << "', got " << hosts.size() << " hosts";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("hostlist '" + c.expr.substr(0, 20)), std::string::npos) << what;
      EXPECT_NE(what.find("expected"), std::string::npos) << what;
      EXPECT_NE(what.find("found"), std::string::npos) << what;
      EXPECT_NE(what.find(c.fragment), std::string::npos) << "for '" << c.expr << "': " << what;
      EXPECT_FALSE(e.hint().empty()) << what;
    }
  }
}

TEST(HostlistExpand, MessageGivesTheColumn) {
  try {
    hostlist_expand("a,b[1-2],c[5-3]");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'5-3' at column 12"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Hint: write the lower bound first"), std::string::npos) << e.what();
  }
}

TEST(HostlistCompress, KnownOutputs) {
  EXPECT_EQ(hostlist_compress({"n1", "n2", "n3", "n5", "m1"}), "n[1-3,5],m1");
  EXPECT_EQ(hostlist_compress({"node01", "node02", "node03", "node04", "node07"}), "node[01-04,07]");
  EXPECT_EQ(hostlist_compress({"n098", "n099", "n100", "n101"}), "n[098-101]");
  EXPECT_EQ(hostlist_compress({"n9", "n10", "n11"}), "n[9-11]");
  EXPECT_EQ(hostlist_compress({"a"}), "a");
  EXPECT_EQ(hostlist_compress({"n7"}), "n7");
  EXPECT_EQ(hostlist_compress({}), "");
  EXPECT_EQ(hostlist_compress({"n1", "n1"}), "n[1,1]");
  EXPECT_THROW(hostlist_compress({"n[1]"}), ConfigError);
  EXPECT_THROW(hostlist_compress({"a,b"}), ConfigError);
  EXPECT_THROW(hostlist_compress({""}), ConfigError);
}

TEST(HostlistCompress, RoundTrips) {
  const std::vector<Hosts> lists = {
      {"n1", "n01", "n001", "n2"},
      {"n9", "n010", "n11"},
      {"gpu1-ib3", "gpu1-ib4", "gpu2-ib3", "gpu2-ib4"},
      {"a", "b1", "b2", "c-ib001", "c-ib003"},
      {"1", "2", "3", "x"},
      {"n3", "n2", "n1"},
      {"n1", "m1", "n2"},
      {"n18446744073709551615", "n1234567890123456789012"},
      {"node-a", "node-b"},
  };
  for (const Hosts& hosts : lists) {
    const std::string expr = hostlist_compress(hosts);
    EXPECT_EQ(hostlist_expand(expr), hosts) << "compressed to " << expr;
  }
  for (const ExpandCase& c : expand_cases()) {
    EXPECT_EQ(hostlist_expand(hostlist_compress(c.hosts)), c.hosts) << "from " << c.expr;
  }
}

/// Runs `scontrol show hostnames EXPR` (killed after 20 s).
std::unique_ptr<test::TestProcess> scontrol_hostnames(const std::string& scontrol, const std::string& expr,
                                                      const test::Env& env) {
  return test::run_process({scontrol, "show", "hostnames", expr}, env, 20);
}

TEST(HostlistExpand, MatchesScontrol) {
  const std::string scontrol = test::find_on_path("scontrol");
  if (scontrol.empty()) {
    GTEST_SKIP() << "scontrol is not on PATH, so SLURM's own expansion can't be compared "
                    "(install slurm-client or slurm-wlm to run this test)";
  }
  // `scontrol show hostnames` needs no cluster, but it reads a slurm.conf first. The expansion
  // doesn't depend on the cluster, so a minimal one keeps the test independent of this machine's
  // SLURM setup (or lack of one).
  test::Env env = test::hermetic_env();
  const std::string conf = testing::TempDir() + "/hostlist_test_slurm.conf";
  std::ofstream(conf) << "ClusterName=hostlisttest\nSlurmctldHost=localhost\n";
  env["SLURM_CONF"] = conf;
  const auto probe = scontrol_hostnames(scontrol, "n[1-2]", env);
  if (!probe->finished() || probe->exit_code() != 0 || probe->out() != "n1\nn2\n") {
    GTEST_SKIP() << "scontrol is installed but `scontrol show hostnames n[1-2]` fails here even with a "
                    "minimal slurm.conf (exit " << probe->exit_code() << "): " << probe->err();
  }
  std::vector<std::string> exprs;
  for (const ExpandCase& c : expand_cases()) {
    // SLURM 22.05 rejects text after the last bracket group; hostlist_expand accepts it (documented).
    const std::size_t close = c.expr.rfind(']');
    if (close != std::string::npos && close + 1 < c.expr.size() && c.expr[close + 1] != ',' &&
        c.expr[close + 1] != ' ') {
      continue;
    }
    exprs.push_back(c.expr);
  }
  for (const char* extra : {"a[1-2]b[3-4]c[5-6]d[7-8]", "c[1-4],d[10-12,20]", "n[1-1000]", "a1,a2,a3",
                            "x[8-12]y[1,3],z", "ib[001-003]-gpu[0-1]"}) {
    exprs.push_back(extra);
  }
  for (const std::string& expr : exprs) {
    const auto result = scontrol_hostnames(scontrol, expr, env);
    ASSERT_TRUE(result->finished()) << "scontrol did not finish for " << expr;
    ASSERT_EQ(result->exit_code(), 0) << expr << ": stdout: " << result->out() << " stderr: " << result->err();
    EXPECT_EQ(hostlist_expand(expr), test::lines_of(result->out())) << "expression: " << expr;
  }
}

}  // namespace
}  // namespace train
