// `train --interface` (Gloo, NCCL and the store on one interface; a missing one named
// with the interfaces that exist) and `train --health-check` on 2 CPU ranks through
// `trainctl local` over Gloo on loopback, and on 4 ranks posing as 2 SLURM nodes (the within- and
// between-node all-reduces). The slow node is named in tests/slurm/health_test.cpp.
#include "test_process.h"
#include "gpu_count.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>

using train::test::bin;
using train::test::run_program;

namespace {

std::vector<std::string> two_ranks(std::vector<std::string> extra) {
  std::vector<std::string> cmd = {bin("trainctl"), "local", "--nproc", "2", "--no-prefix", "--", bin("train"),
                                  "--data", train::test::fashion_mnist_dir(), "--epochs", "1", "--max-steps", "2",
                                  "--limit-train-samples", "256", "--limit-test-samples", "100", "--device", "cpu",
                                  "--threads", "1"};
  cmd.insert(cmd.end(), extra.begin(), extra.end());
  return cmd;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(NetworkHealth, InterfaceLoCarriesATwoRankGlooRun) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  // TRAIN_LOG_LEVEL=debug: the store says where it listens. The flag wins over TRAIN_INTERFACE.
  const auto r = run_program(two_ranks({"--interface", "lo"}), {"TRAIN_LOG_LEVEL=debug", "TRAIN_INTERFACE=nosuch0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto done = nlohmann::json::parse(train::test::last_line(r.out), nullptr, false);
  ASSERT_FALSE(done.is_discarded()) << r.out;
  EXPECT_EQ(done.value("world_size", 0), 2);
  EXPECT_EQ(done.value("steps", 0), 2);
  EXPECT_TRUE(has(r.err, "the store listens on 127.0.0.1 (lo) only")) << r.err;
}

TEST(NetworkHealth, AMissingInterfaceIsAConfigErrorListingTheInterfaces) {
  for (const bool by_env : {false, true}) {
    const auto r = by_env ? run_program({bin("train"), "--device", "cpu", "--max-steps", "1"}, {"TRAIN_INTERFACE=nosuch0"})
                          : run_program({bin("train"), "--device", "cpu", "--max-steps", "1", "--interface", "nosuch0"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(has(r.err, "--interface 'nosuch0': expected a network interface of this host")) << r.err;
    EXPECT_TRUE(has(r.err, "Interfaces here: ")) << r.err;
    EXPECT_TRUE(has(r.err, "lo (127.0.0.1")) << r.err;
    EXPECT_TRUE(has(r.err, "Hint: ")) << r.err;
  }
}

TEST(NetworkHealth, HealthCheckOnTwoCpuRanksLogsOneTableAndTrains) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const auto r = run_program(two_ranks({"--health-check"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "health check: 1 node(s), 2 rank(s); GEMM 256x256 fp32 on cpu")) << r.err;
  EXPECT_TRUE(has(r.err, "within-node GB/s")) << r.err;
  EXPECT_TRUE(has(r.err, "all-reduce bus bandwidth over all 2 rank(s), 4 MB, gloo: ")) << r.err;
  // One node: its 2 ranks' own all-reduce is measured (a number, not "-"), and between nodes is "-".
  EXPECT_TRUE(has(r.err, "all-reduce bus bandwidth between nodes, one rank per node: - (one node)")) << r.err;
  const size_t header = r.err.find("others' median  verdict\n");  // the node's row is the next line
  ASSERT_NE(header, std::string::npos) << r.err;
  const size_t row = r.err.find('\n', header);
  const std::vector<std::string> cols = [&] {
    std::vector<std::string> c;
    std::istringstream in(r.err.substr(row + 1, r.err.find('\n', row + 1) - row - 1));
    for (std::string w; in >> w;) c.push_back(w);
    return c;
  }();
  ASSERT_EQ(cols.size(), 7u) << r.err;  // node, ranks, GEMM, its median, within-node, its median, ok
  EXPECT_EQ(cols[1], "0,1");
  EXPECT_GT(std::stod(cols[4]), 0) << r.err;
  EXPECT_EQ(cols[5], "-");  // one node: no other nodes' median
  EXPECT_EQ(cols[6], "ok");
  EXPECT_TRUE(has(r.err, "health check passed")) << r.err;
  // One table: rank 0 logs it.
  EXPECT_EQ(r.err.find("health check: "), r.err.rfind("health check: ")) << r.err;
  // The check draws no random numbers: the trained parameters are those of a run without it.
  const auto without = run_program(two_ranks({}));
  ASSERT_EQ(without.exit_code, 0) << without.err;
  const auto with_done = nlohmann::json::parse(train::test::last_line(r.out), nullptr, false);
  const auto without_done = nlohmann::json::parse(train::test::last_line(without.out), nullptr, false);
  ASSERT_FALSE(with_done.is_discarded() || without_done.is_discarded()) << r.out << without.out;
  EXPECT_EQ(with_done.value("params_sha256", "a"), without_done.value("params_sha256", "b"));
}

// 4 ranks posing as a SLURM step of 2 nodes x 2 tasks (node1: ranks 0,1; node2: ranks 2,3), on
// this machine over loopback: no cluster needed (tests/slurm runs the same on the local cluster).
// TRAIN_FAULT_SLOW_NODE_NET=node2:30 makes node2's own all-reduce 30x slower; --health-warn-only
// names it and trains on.
TEST(NetworkHealth, TwoPosedNodesOfTwoRanksMeasureWithinAndBetweenNodes) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const std::string port = std::to_string(train::test::free_port());
  std::vector<std::unique_ptr<train::test::TestProcess>> ranks;
  for (int r = 0; r < 4; ++r) {
    train::test::Env env = train::test::hermetic_env();
    env.insert({{"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", std::to_string(r)},
                {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_STEP_NODELIST", "node[1-2]"}, {"SLURM_STEP_NUM_NODES", "2"},
                {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}, {"SLURM_NODEID", std::to_string(r / 2)},
                {"SLURM_LOCALID", std::to_string(r % 2)}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port},
                {"TRAIN_FAULT_SLOW_NODE_NET", "node2:30"}});
    std::vector<std::string> argv(two_ranks({"--health-check", "--health-warn-only"}));
    argv.erase(argv.begin(), argv.begin() + 6);  // train itself, without `trainctl local ... --`
    ranks.push_back(std::make_unique<train::test::TestProcess>(argv, env));
  }
  for (auto& p : ranks) ASSERT_TRUE(p->wait(300)) << p->err();
  for (auto& p : ranks) EXPECT_EQ(p->exit_code(), 0) << p->err();
  const std::string& log = ranks[0]->err();
  EXPECT_TRUE(has(log, "health check: 2 node(s), 4 rank(s)")) << log;
  auto row = [&](const std::string& node) {
    std::vector<std::string> words;
    const size_t at = log.find("\n  " + node + " ");
    if (at == std::string::npos) return words;
    std::istringstream in(log.substr(at + 1, log.find('\n', at + 1) - at - 1));
    for (std::string w; in >> w;) words.push_back(w);
    return words;
  };
  const auto node1 = row("node1"), node2 = row("node2");
  ASSERT_GE(node1.size(), 7u) << log;
  ASSERT_GE(node2.size(), 7u) << log;
  EXPECT_EQ(node1[1], "0,1");
  EXPECT_EQ(node2[1], "2,3");
  EXPECT_GT(std::stod(node1[4]), 0) << log;  // within-node GB/s, measured on both nodes
  EXPECT_GT(std::stod(node2[4]), 0) << log;
  EXPECT_DOUBLE_EQ(std::stod(node1[5]), std::stod(node2[4]));  // node1's reference: node2's value
  EXPECT_EQ(node2[6], "BAD:") << log;
  EXPECT_TRUE(has(log, "all-reduce bus bandwidth between nodes (2 ranks, the lowest of each node), 4 MB, gloo: ")) << log;
  EXPECT_FALSE(has(log, "between nodes (2 ranks, the lowest of each node), 4 MB, gloo: -")) << log;
  EXPECT_TRUE(has(log, "--health-check: node(s) node2: within-node all-reduce bus bandwidth below 0.5 x the median of "
                       "the other nodes' (the table on rank 0). Training anyway (--health-warn-only).")) << log;
  EXPECT_FALSE(has(log, "node(s) node1: within-node")) << log;
  const auto done = nlohmann::json::parse(train::test::last_line(ranks[0]->out()), nullptr, false);
  ASSERT_FALSE(done.is_discarded()) << ranks[0]->out();
  EXPECT_EQ(done.value("world_size", 0), 4);
}

TEST(NetworkHealth, HealthFlagsNeedTheCheckAndTheFaultIsChecked) {
  auto r = run_program({bin("train"), "--device", "cpu", "--exclude-bad-nodes"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "--exclude-bad-nodes: expected --health-check too")) << r.err;
  r = run_program({bin("train"), "--device", "cpu", "--health-min-fraction", "1.5"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "--health-min-fraction")) << r.err;
  if (train::test::fashion_mnist_dir().empty()) return;
  r = run_program({bin("train"), "--data", train::test::fashion_mnist_dir(), "--device", "cpu", "--max-steps", "1",
                   "--health-check"}, {"TRAIN_FAULT_SLOW_NODE=node2"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "TRAIN_FAULT_SLOW_NODE='node2': expected NODE:FACTOR")) << r.err;
  r = run_program({bin("train"), "--data", train::test::fashion_mnist_dir(), "--device", "cpu", "--max-steps", "1",
                   "--health-check"}, {"TRAIN_FAULT_SLOW_NODE_NET=node2:0.5"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "TRAIN_FAULT_SLOW_NODE_NET='node2:0.5': expected NODE:FACTOR with a FACTOR of 1 or more")) << r.err;
}

namespace {

// The number after `label` in `log` up to " GB/s" (-1 when the line is missing or holds no number).
double gbps_after(const std::string& log, const std::string& label) {
  const size_t at = log.find(label);
  if (at == std::string::npos) return -1;
  const std::string rest = log.substr(at + label.size());
  char* end = nullptr;
  const double v = std::strtod(rest.c_str(), &end);
  return end != rest.c_str() && std::string(end).rfind(" GB/s", 0) == 0 ? v : -1;
}

// The health table of `log` (up to 600 characters from its first line), or "" without one.
std::string table_of(const std::string& log) {
  const size_t at = log.find("health check:");
  return at == std::string::npos ? "" : log.substr(at, 600);
}

}  // namespace

// On 2 GPUs over NCCL: the within-node all-reduce's NCCL subgroup (2 ranks of one node, through
// trainctl local), then the between-nodes one (2 ranks posing as 2 SLURM nodes, a GPU each). Both
// measure, pass, tear their communicators down and train on; no hang at exit.
TEST(NetworkHealthGpu, NcclSubgroupsWithinAndBetweenNodesOnTwoGpus) {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 2) GTEST_SKIP() << "needs 2 NVIDIA GPUs, found " << gpus << ": run scripts/gpu-check.sh on a node with 2 GPUs (docs/gpu.md)";
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  std::vector<std::string> local = two_ranks({"--backend", "nccl", "--peer-allreduce", "off", "--health-check",
                                               "--health-min-fraction", "0.01"});
  for (auto& s : local) if (s == "cpu") s = "cuda";  // two_ranks' --device cpu
  const auto within = run_program(local, {"NCCL_NVLS_ENABLE=0"}, 300);
  ASSERT_EQ(within.exit_code, 0) << within.err;
  EXPECT_TRUE(has(within.err, "health check: 1 node(s), 2 rank(s); GEMM 4096x4096 fp32 on cuda")) << within.err;
  std::printf("one node, 2 GPUs: %s\n", table_of(within.err).c_str());
  // The node's row: node, ranks, GEMM GFLOP/s, others' median, within-node GB/s (its NCCL subgroup), ...
  std::istringstream table(table_of(within.err));
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(table, line);) {
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    if (words.size() >= 5 && words[1] == "0,1") rows.push_back(words);
  }
  ASSERT_EQ(rows.size(), 1u) << within.err;
  EXPECT_GT(std::strtod(rows[0][4].c_str(), nullptr), 0) << "within-node GB/s: " << within.err;
  EXPECT_GT(gbps_after(within.err, "over all 2 rank(s), 256 MB, nccl: "), 0) << within.err;
  EXPECT_TRUE(has(within.err, "between nodes, one rank per node: - (one node)")) << within.err;
  EXPECT_TRUE(has(within.err, "health check passed")) << within.err;

  const std::string port = std::to_string(train::test::free_port());
  std::vector<std::unique_ptr<train::test::TestProcess>> ranks;
  for (int r = 0; r < 2; ++r) {
    train::test::Env env = train::test::hermetic_env();
    env.insert({{"SLURM_JOB_ID", "4243"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", std::to_string(r)},
                {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_STEP_NODELIST", "node[1-2]"}, {"SLURM_STEP_NUM_NODES", "2"},
                {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}, {"SLURM_NODEID", std::to_string(r)}, {"SLURM_LOCALID", "0"},
                {"CUDA_VISIBLE_DEVICES", std::to_string(r)}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port},
                {"NCCL_NVLS_ENABLE", "0"}});
    std::vector<std::string> argv(local.begin() + 6, local.end());  // train itself, without `trainctl local ... --`
    ranks.push_back(std::make_unique<train::test::TestProcess>(argv, env));
  }
  for (auto& p : ranks) ASSERT_TRUE(p->wait(300)) << p->err();
  for (auto& p : ranks) EXPECT_EQ(p->exit_code(), 0) << p->err();
  const std::string& log = ranks[0]->err();
  EXPECT_TRUE(has(log, "health check: 2 node(s), 2 rank(s)")) << log;
  std::printf("two posed nodes, a GPU each: %s\n", table_of(log).c_str());
  EXPECT_GT(gbps_after(log, "between nodes (2 ranks, the lowest of each node), 256 MB, nccl: "), 0) << log;
  EXPECT_TRUE(has(log, "health check passed")) << log;
  const auto done = nlohmann::json::parse(train::test::last_line(ranks[0]->out()), nullptr, false);
  ASSERT_FALSE(done.is_discarded()) << ranks[0]->out();
  EXPECT_EQ(done.value("world_size", 0), 2);
}
