// Tests for libtrain/base/src/env.cpp and env_slurm.cpp: resolution of the distributed layout from fake
// environments (SLURM batch and step variables, torchrun variables, none), the consistency checks and
// their messages, and the derived MASTER_PORT.
#include "train/base/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "train/base/error.h"

namespace train {
namespace {

constexpr char kHost[] = "testhost";

DistEnv resolve(const EnvMap& env) { return resolve_env(env, kHost); }

/// Expects resolve() to throw a ConfigError whose text holds every fragment and a hint.
void expect_config_error(const EnvMap& env, std::initializer_list<std::string> fragments) {
  try {
    const DistEnv e = resolve(env);
    ADD_FAILURE() << "expected ConfigError, resolved rank " << e.rank << " of " << e.world_size;
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    for (const std::string& fragment : fragments) {
      EXPECT_NE(what.find(fragment), std::string::npos) << "missing '" << fragment << "' in: " << what;
    }
    EXPECT_NE(what.find("Hint: "), std::string::npos) << what;
  }
}

/// Two nodes with two tasks each, seen from rank 3, as `srun` inside `sbatch -N2
/// --ntasks-per-node=2` sets it.
EnvMap slurm_2x2_rank3() {
  return {
      {"SLURM_JOB_ID", "12345"},
      {"SLURM_JOB_NODELIST", "node[01-02]"},
      {"SLURM_JOB_NUM_NODES", "2"},
      {"SLURM_NNODES", "2"},
      {"SLURM_NTASKS", "4"},
      {"SLURM_NTASKS_PER_NODE", "2"},
      {"SLURM_TASKS_PER_NODE", "2(x2)"},
      {"SLURM_STEP_ID", "0"},
      {"SLURM_STEP_NODELIST", "node[01-02]"},
      {"SLURM_STEP_NUM_NODES", "2"},
      {"SLURM_STEP_NUM_TASKS", "4"},
      {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
      {"SLURM_PROCID", "3"},
      {"SLURM_LOCALID", "1"},
      {"SLURM_NODEID", "1"},
  };
}

// Under SLURM the host is the node's SLURM name (SLURMD_NODENAME), which srun's and scontrol's
// messages use: several slurmd on one machine share its hostname.
TEST(ResolveEnv, SlurmHostIsTheNodeNameSlurmdGives) {
  EnvMap env = slurm_2x2_rank3();
  EXPECT_EQ(resolve(env).host, kHost);
  env["SLURMD_NODENAME"] = "node02";
  EXPECT_EQ(resolve(env).host, "node02");
  EXPECT_EQ(resolve({{"SLURMD_NODENAME", "node02"}}).host, kHost) << "outside a step the machine's name stays";
}

TEST(ResolveEnv, NothingSetIsASingleProcess) {
  const DistEnv e = resolve({{"PATH", "/usr/bin"}, {"HOME", "/root"}});
  EXPECT_EQ(e.source, EnvSource::single);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.node_rank, 0);
  EXPECT_EQ(e.num_nodes, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, kDefaultMasterPort);
  EXPECT_TRUE(e.job_id.empty());
  EXPECT_TRUE(e.nodes.empty());
  EXPECT_EQ(e.host, kHost);
  EXPECT_EQ(to_string(e.source), "single");
}

TEST(ResolveEnv, EmptyValuesCountAsUnset) {
  const DistEnv e = resolve({{"RANK", ""}, {"WORLD_SIZE", ""}, {"SLURM_PROCID", ""}, {"MASTER_PORT", ""}});
  EXPECT_EQ(e.source, EnvSource::single);
  EXPECT_EQ(e.master_port, kDefaultMasterPort);
}

TEST(ResolveEnv, SingleProcessTakesMasterOverrides) {
  const DistEnv e = resolve({{"MASTER_ADDR", "10.0.0.5"}, {"MASTER_PORT", "29999"}});
  EXPECT_EQ(e.master_addr, "10.0.0.5");
  EXPECT_EQ(e.master_port, 29999);
}

TEST(ResolveEnv, SlurmStepTwoNodesTwoTasksEach) {
  const DistEnv e = resolve(slurm_2x2_rank3());
  EXPECT_EQ(e.source, EnvSource::slurm);
  EXPECT_EQ(to_string(e.source), "slurm");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.num_nodes, 2);
  EXPECT_EQ(e.nodes, (std::vector<std::string>{"node01", "node02"}));
  EXPECT_EQ(e.master_addr, "node01");
  EXPECT_EQ(e.job_id, "12345");
  // 20000 + (12345 mod 2500) * 16 + (0 mod 16)
  EXPECT_EQ(e.master_port, 20000 + 2345 * 16);
  EXPECT_EQ(e.master_port, slurm_master_port("12345", "0"));
}

TEST(ResolveEnv, EveryTaskOfAStepAgreesOnTheRendezvous) {
  std::set<std::pair<std::string, int>> seen;
  for (int rank = 0; rank < 4; ++rank) {
    EnvMap env = slurm_2x2_rank3();
    env["SLURM_PROCID"] = std::to_string(rank);
    env["SLURM_NODEID"] = std::to_string(rank / 2);
    env["SLURM_LOCALID"] = std::to_string(rank % 2);
    const DistEnv e = resolve(env);
    EXPECT_EQ(e.rank, rank);
    EXPECT_EQ(e.node_rank, rank / 2);
    seen.insert({e.master_addr, e.master_port});
  }
  EXPECT_EQ(seen.size(), 1u);
}

TEST(ResolveEnv, SlurmWithoutNtasksUsesNtasksPerNode) {
  // sbatch --nodes=2 --ntasks-per-node=2 without --ntasks: SLURM_NTASKS may be missing.
  const EnvMap env = {
      {"SLURM_JOB_ID", "77"},       {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_NNODES", "2"},
      {"SLURM_NTASKS_PER_NODE", "2"}, {"SLURM_PROCID", "2"},          {"SLURM_NODEID", "1"},
      {"SLURM_LOCALID", "0"},         {"SLURM_STEP_ID", "0"},
  };
  const DistEnv e = resolve(env);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.num_nodes, 2);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.master_addr, "n1");
}

TEST(ResolveEnv, SlurmTasksPerNodeNotationIsExpanded) {
  const EnvMap env = {
      {"SLURM_JOB_NODELIST", "n[1-4]"}, {"SLURM_NNODES", "4"}, {"SLURM_NTASKS_PER_NODE", "2(x3),1"},
      {"SLURM_PROCID", "6"},           {"SLURM_NODEID", "3"},  {"SLURM_LOCALID", "0"},
      {"SLURM_STEPID", "1"},
  };
  const DistEnv e = resolve(env);
  EXPECT_EQ(e.world_size, 7);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.num_nodes, 4);
  EXPECT_EQ(e.master_port, kDefaultMasterPort);  // no job id: nothing to derive from
}

TEST(ResolveEnv, SlurmWorldFromTasksPerNode) {
  const EnvMap env = {
      {"SLURM_JOB_NODELIST", "n[1-3]"}, {"SLURM_TASKS_PER_NODE", "3,2(x2)"}, {"SLURM_PROCID", "4"},
      {"SLURM_NODEID", "1"},           {"SLURM_LOCALID", "1"},     {"SLURM_STEP_ID", "0"},
  };
  const DistEnv e = resolve(env);
  EXPECT_EQ(e.world_size, 7);
  EXPECT_EQ(e.num_nodes, 3);
  EXPECT_EQ(e.local_world_size, 2);
}

TEST(ResolveEnv, SlurmStepSmallerThanTheJob) {
  // A 4-node job running a 2-node, 2-task step on its last two nodes.
  const EnvMap env = {
      {"SLURM_JOB_ID", "4242"},
      {"SLURM_JOB_NODELIST", "n[1-4]"},
      {"SLURM_JOB_NUM_NODES", "4"},
      {"SLURM_NTASKS", "8"},
      {"SLURM_TASKS_PER_NODE", "2(x4)"},
      {"SLURM_STEP_ID", "3"},
      {"SLURM_STEP_NODELIST", "n[3-4]"},
      {"SLURM_STEP_NUM_NODES", "2"},
      {"SLURM_STEP_NUM_TASKS", "2"},
      {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
      {"SLURM_PROCID", "1"},
      {"SLURM_NODEID", "1"},
      {"SLURM_LOCALID", "0"},
  };
  const DistEnv e = resolve(env);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.num_nodes, 2);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.nodes, (std::vector<std::string>{"n3", "n4"}));
  EXPECT_EQ(e.master_addr, "n3");
  EXPECT_EQ(e.master_port, slurm_master_port("4242", "3"));
  EXPECT_EQ(e.master_port, 20000 + (4242 % 2500) * 16 + 3);
}

TEST(ResolveEnv, SlurmNodeFoundByHostWhenNodeIdMissing) {
  EnvMap env = {{"SLURM_JOB_NODELIST", "a,testhost,c"}, {"SLURM_NTASKS", "3"}, {"SLURM_PROCID", "1"},
                {"SLURM_STEP_ID", "0"}};
  const DistEnv e = resolve(env);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.master_addr, "a");

  env["SLURM_JOB_NODELIST"] = "a,b,c";
  expect_config_error(env, {"SLURM_NODEID", "host 'testhost' not in SLURM_JOB_NODELIST"});
}

TEST(ResolveEnv, SlurmNodelistFallback) {
  const DistEnv e = resolve({{"SLURM_NODELIST", "x[7-8]"}, {"SLURM_NTASKS", "2"}, {"SLURM_PROCID", "0"},
                             {"SLURM_NODEID", "0"}, {"SLURM_STEP_ID", "0"}});
  EXPECT_EQ(e.nodes, (std::vector<std::string>{"x7", "x8"}));
  EXPECT_EQ(e.num_nodes, 2);
  EXPECT_EQ(e.master_addr, "x7");
}

TEST(ResolveEnv, SlurmSingleTaskWithoutNodeList) {
  const DistEnv e = resolve({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(e.source, EnvSource::slurm);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
}

TEST(ResolveEnv, SlurmMasterOverrides) {
  EnvMap env = slurm_2x2_rank3();
  env["MASTER_ADDR"] = "10.1.2.3";
  env["MASTER_PORT"] = "31337";
  const DistEnv e = resolve(env);
  EXPECT_EQ(e.master_addr, "10.1.2.3");
  EXPECT_EQ(e.master_port, 31337);

  // With MASTER_PORT set, a job id that can't give a port doesn't matter.
  env["SLURM_JOB_ID"] = "not-a-number";
  EXPECT_EQ(resolve(env).master_port, 31337);
  env.erase("MASTER_PORT");
  expect_config_error(env, {"SLURM_JOB_ID='not-a-number'", "non-negative decimal integer"});
}

TEST(ResolveEnv, TorchrunVariablesWinOverSlurm) {
  EnvMap env = slurm_2x2_rank3();
  env.insert({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
              {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29501"}});
  const DistEnv e = resolve(env);
  EXPECT_EQ(e.source, EnvSource::torchrun);
  EXPECT_EQ(to_string(e.source), "torchrun");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.node_rank, 0);
  EXPECT_EQ(e.num_nodes, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29501);
  EXPECT_EQ(e.job_id, "12345");
  EXPECT_TRUE(e.nodes.empty());
}

TEST(ResolveEnv, TorchrunAcrossNodes) {
  const DistEnv e = resolve({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                             {"LOCAL_WORLD_SIZE", "4"}, {"GROUP_RANK", "1"}, {"GROUP_WORLD_SIZE", "2"},
                             {"MASTER_ADDR", "head"}, {"MASTER_PORT", "29400"}});
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.num_nodes, 2);
  EXPECT_EQ(e.master_addr, "head");
}

TEST(ResolveEnv, TorchrunDefaultsWithOnlyRankAndWorldSize) {
  const DistEnv e = resolve({{"RANK", "1"}, {"WORLD_SIZE", "3"}});
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 3);
  EXPECT_EQ(e.num_nodes, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, kDefaultMasterPort);
}

TEST(ResolveEnv, TorchrunAcrossNodesNeedsMasterAddr) {
  expect_config_error({{"RANK", "0"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}},
                      {"MASTER_ADDR", "2 nodes", "found it unset"});
}

TEST(ResolveEnv, TorchrunNeedsBothRankAndWorldSize) {
  expect_config_error({{"RANK", "0"}}, {"RANK='0'", "WORLD_SIZE", "unset"});
  expect_config_error({{"WORLD_SIZE", "2"}}, {"WORLD_SIZE='2'", "RANK"});
}

TEST(ResolveEnv, MalformedIntegersAreNamed) {
  EnvMap env = slurm_2x2_rank3();
  env["SLURM_PROCID"] = "abc";
  expect_config_error(env, {"SLURM_PROCID='abc': expected a non-negative integer", "srun"});
  env["SLURM_PROCID"] = "-1";
  expect_config_error(env, {"SLURM_PROCID='-1': expected a non-negative integer"});
  env["SLURM_PROCID"] = "99999999999";
  expect_config_error(env, {"SLURM_PROCID='99999999999'", "below 2^31"});
  env["SLURM_PROCID"] = " 1";
  expect_config_error(env, {"SLURM_PROCID=' 1'"});

  expect_config_error({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, {"WORLD_SIZE='0': expected a positive integer", "torchrun"});
  expect_config_error({{"RANK", "x"}, {"WORLD_SIZE", "2"}}, {"RANK='x': expected a non-negative integer"});
  expect_config_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1.5"}}, {"LOCAL_RANK='1.5'"});
  EnvMap slurm = slurm_2x2_rank3();
  slurm["SLURM_STEP_NUM_TASKS"] = "0";
  expect_config_error(slurm, {"SLURM_STEP_NUM_TASKS='0': expected a positive integer"});
}

TEST(ResolveEnv, RankMustBeBelowWorldSize) {
  expect_config_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}}, {"RANK=2", "below the world size 2", "WORLD_SIZE=2"});
  EnvMap env = slurm_2x2_rank3();
  env["SLURM_PROCID"] = "4";
  expect_config_error(env, {"SLURM_PROCID=4", "below the world size 4", "SLURM_STEP_NUM_TASKS=4"});
}

TEST(ResolveEnv, LocalRankMustBeBelowLocalWorldSize) {
  expect_config_error({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"},
                       {"MASTER_ADDR", "h"}},
                      {"LOCAL_RANK=2", "below the 2 tasks on this node", "LOCAL_WORLD_SIZE=2"});
  EnvMap env = slurm_2x2_rank3();
  env["SLURM_LOCALID"] = "2";
  expect_config_error(env, {"SLURM_LOCALID=2", "below the 2 tasks", "SLURM_STEP_TASKS_PER_NODE"});
  expect_config_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "3"}},
                      {"LOCAL_WORLD_SIZE=3", "at most the world size 2"});
}

TEST(ResolveEnv, NodeRankMustBeBelowNodeCount) {
  EnvMap env = slurm_2x2_rank3();
  env["SLURM_NODEID"] = "2";
  expect_config_error(env, {"SLURM_NODEID=2", "below the number of nodes 2", "SLURM_STEP_NUM_NODES=2"});
  expect_config_error({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", "2"},
                       {"MASTER_ADDR", "h"}},
                      {"GROUP_RANK=2", "below the number of nodes 2"});
}

TEST(ResolveEnv, SlurmStepAndJobVariablesMustAgree) {
  EnvMap env = slurm_2x2_rank3();
  env["SLURM_STEP_NUM_NODES"] = "3";
  expect_config_error(env, {"SLURM_STEP_NUM_NODES=3", "SLURM_STEP_NODELIST='node[01-02]' (2)", "mixed"});

  env = slurm_2x2_rank3();
  env["SLURM_STEP_TASKS_PER_NODE"] = "3(x2)";
  expect_config_error(env, {"SLURM_STEP_NUM_TASKS=4", "SLURM_STEP_TASKS_PER_NODE='3(x2)' (6 tasks)"});

  env = slurm_2x2_rank3();
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x3)";
  expect_config_error(env, {"SLURM_STEP_TASKS_PER_NODE='2(x3)'", "task counts for 2 nodes", "found 3"});
}

TEST(ResolveEnv, SlurmLayoutErrors) {
  expect_config_error({{"SLURM_PROCID", "0"}, {"SLURM_JOB_NODELIST", "n[1-2]"}},
                      {"SLURM_PROCID=0", "SLURM_NTASKS", "none of them set"});
  expect_config_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n[2-1]"}},
                      {"SLURM_JOB_NODELIST: hostlist 'n[2-1]'", "LO <= HI"});
  expect_config_error({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_NNODES", "1"}, {"SLURM_STEP_ID", "0"}},
                      {"SLURM_LOCALID", "found it unset"});
  expect_config_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "3"}, {"SLURM_NNODES", "2"}, {"SLURM_NODEID", "0"},
                       {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_STEP_ID", "0"}},
                      {"SLURM_TASKS_PER_NODE", "not divisible"});
  expect_config_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_NNODES", "2"}, {"SLURM_NODEID", "0"},
                       {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "1,0"}},
                      {"SLURM_TASKS_PER_NODE='1,0'"});
  expect_config_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_NNODES", "2"}, {"SLURM_NODEID", "0"},
                       {"SLURM_LOCALID", "0"}, {"SLURM_STEP_ID", "0"}},
                      {"MASTER_ADDR", "2 nodes"});
}

TEST(ResolveEnv, BatchScriptOfAMultiTaskJobIsRefused) {
  // What SLURM 22.05 sets in the batch script of `sbatch -N2 --ntasks-per-node=2`: a PROCID but
  // no step; starting the trainer here would leave rank 0 waiting for three ranks for ever.
  EnvMap env = {{"SLURM_JOB_ID", "5"}, {"SLURM_JOB_NODELIST", "node[1-2]"}, {"SLURM_JOB_NUM_NODES", "2"},
                {"SLURM_NNODES", "2"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}, {"SLURM_NTASKS_PER_NODE", "2"},
                {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "0"}};
  expect_config_error(env, {"SLURM_PROCID=0 without a step id", "batch script of job 5", "4 tasks", "Hint: start the program with srun"});
  env["SLURM_STEP_ID"] = "4294967294";  // the batch step's id, should a SLURM version export it
  expect_config_error(env, {"batch script of job 5"});
  env["SLURM_STEP_ID"] = "0";
  EXPECT_EQ(resolve(env).world_size, 4);
  // A single-task job's batch script is a fine place to train.
  const DistEnv single = resolve({{"SLURM_JOB_ID", "5"}, {"SLURM_JOB_NODELIST", "node1"}, {"SLURM_NNODES", "1"},
                                  {"SLURM_TASKS_PER_NODE", "1"}, {"SLURM_PROCID", "0"}, {"SLURM_NODEID", "0"}});
  EXPECT_EQ(single.world_size, 1);
  EXPECT_EQ(single.source, EnvSource::slurm);
  EXPECT_EQ(single.master_port, slurm_master_port("5", ""));
}

TEST(ResolveEnv, MasterPortAndAddrAreChecked) {
  for (const char* bad : {"80", "0", "65536", "70000", "abc", "-1", "29500 "}) {
    expect_config_error({{"MASTER_PORT", bad}}, {std::string("MASTER_PORT='") + bad + "'", "1024-65535"});
  }
  expect_config_error({{"MASTER_ADDR", "tcp://head:29500"}}, {"MASTER_ADDR='tcp://head:29500'", "host name or IP"});
  expect_config_error({{"MASTER_ADDR", "a b"}}, {"MASTER_ADDR='a b'"});
  EXPECT_EQ(resolve({{"MASTER_ADDR", "fe80::1"}, {"MASTER_PORT", "1024"}}).master_addr, "fe80::1");
  EXPECT_EQ(resolve({{"MASTER_PORT", "65535"}}).master_port, 65535);
}

// The job-script recipe: export WORLD_SIZE=$((SLURM_NNODES * SLURM_NTASKS_PER_NODE)),
// MASTER_ADDR=$(scontrol show hostnames | head -n 1), MASTER_PORT=29500, then srun.
TEST(ResolveEnv, SlurmWithExportedWorldSizeAndMasterIsTheJobScriptRecipe) {
  EnvMap env = slurm_2x2_rank3();
  env["WORLD_SIZE"] = "4";
  env["MASTER_ADDR"] = "node01";
  env["MASTER_PORT"] = "29500";
  const DistEnv e = resolve(env);
  EXPECT_EQ(e.source, EnvSource::slurm);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.master_addr, "node01");
  EXPECT_EQ(e.master_port, 29500);
}

TEST(ResolveEnv, SlurmWithExportedWorldSizeMustMatchTheStep) {
  EnvMap env = slurm_2x2_rank3();
  env["WORLD_SIZE"] = "8";
  expect_config_error(env, {"WORLD_SIZE=8", "expected the 4 tasks", "found 8"});
  env["WORLD_SIZE"] = "four";
  expect_config_error(env, {"WORLD_SIZE", "four"});
}

TEST(ResolveEnv, RankWithoutWorldSizeIsStillAnErrorUnderSlurm) {
  EnvMap env = slurm_2x2_rank3();
  env["RANK"] = "3";
  expect_config_error(env, {"RANK='3'", "WORLD_SIZE"});
}

TEST(CheckWorldSizeAgrees, NamesBothNumbers) {
  const DistEnv e = resolve(slurm_2x2_rank3());
  EXPECT_NO_THROW(check_world_size_agrees("--world-size", "4", e));
  try {
    check_world_size_agrees("--world-size", "2", e);
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find("--world-size=2"), std::string::npos) << what;
    EXPECT_NE(what.find("4 tasks"), std::string::npos) << what;
    EXPECT_NE(what.find("Hint: "), std::string::npos) << what;
  }
}

TEST(ApplyInitMethod, TcpHostPortWinsOverTheDerivedRendezvous) {
  DistEnv e = resolve(slurm_2x2_rank3());
  apply_init_method("tcp://node02:3456", e);
  EXPECT_EQ(e.master_addr, "node02");
  EXPECT_EQ(e.master_port, 3456);
  apply_init_method("tcp://[::1]:4000", e);
  EXPECT_EQ(e.master_addr, "::1");
  EXPECT_EQ(e.master_port, 4000);
}

TEST(ApplyInitMethod, OtherFormsAreNamedErrors) {
  DistEnv e = resolve(slurm_2x2_rank3());
  for (const std::string bad : {"env://", "file:///tmp/x", "tcp://node01", "tcp://:29500", "tcp://node01:80",
                                "tcp://node01:port"}) {
    try {
      apply_init_method(bad, e);
      ADD_FAILURE() << "expected ConfigError for " << bad;
    } catch (const ConfigError& err) {
      const std::string what = err.what();
      EXPECT_NE(what.find("--init-method"), std::string::npos) << what;
      EXPECT_NE(what.find("Hint: "), std::string::npos) << what;
    }
  }
}

TEST(SlurmMasterPort, DeterministicAndInRange) {
  EXPECT_EQ(slurm_master_port("12345", "0"), slurm_master_port("12345", "0"));
  EXPECT_EQ(slurm_master_port("12345", ""), slurm_master_port("12345", "0"));
  for (std::uint64_t job = 0; job < 20000; job += 7) {
    for (const char* step : {"0", "1", "15", "4294967294", "4294967295"}) {
      const int port = slurm_master_port(std::to_string(job), step);
      EXPECT_GE(port, kSlurmPortBase);
      EXPECT_LT(port, kSlurmPortBase + kSlurmPortSpan);
    }
  }
  EXPECT_LT(slurm_master_port("18446744073709551615", "18446744073709551615"), kSlurmPortBase + kSlurmPortSpan);
}

TEST(SlurmMasterPort, NearbyJobsAndStepsDontCollide) {
  // Concurrent jobs sharing a node have nearby ids: any 2500 consecutive ids, each with steps
  // 0..15, get pairwise different ports.
  std::set<int> ports;
  for (int job = 1000000; job < 1002500; ++job) {
    for (int step = 0; step < 16; ++step) {
      ports.insert(slurm_master_port(std::to_string(job), std::to_string(step)));
    }
  }
  EXPECT_EQ(ports.size(), 2500u * 16u);
}

TEST(SlurmMasterPort, RejectsNonNumericIds) {
  EXPECT_THROW(slurm_master_port("12a", "0"), ConfigError);
  EXPECT_THROW(slurm_master_port("", "0"), ConfigError);
  EXPECT_THROW(slurm_master_port("1", "x"), ConfigError);
  EXPECT_THROW(slurm_master_port("99999999999999999999", "0"), ConfigError);
}

TEST(ParseTasksPerNode, Notation) {
  EXPECT_EQ(parse_tasks_per_node("V", "4"), (std::vector<int>{4}));
  EXPECT_EQ(parse_tasks_per_node("V", "2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(parse_tasks_per_node("V", "1,2,3"), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(parse_tasks_per_node("V", "8(x2)"), (std::vector<int>{8, 8}));
  for (const char* bad : {"", "0", "2(x0)", "2(x", "2(x3", "(x3)", "2,", ",2", "a", "2 ", "2(3)", "2(x3)1"}) {
    try {
      parse_tasks_per_node("SLURM_TASKS_PER_NODE", bad);
      ADD_FAILURE() << "expected ConfigError for '" << bad << "'";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("SLURM_TASKS_PER_NODE='") + bad + "': expected counts like"), std::string::npos)
          << what;
      EXPECT_NE(what.find("Hint: "), std::string::npos) << what;
    }
  }
}

TEST(CurrentEnvironment, SnapshotsEnviron) {
  setenv("TRAIN_ENV_TEST_VAR", "a=b", 1);
  const EnvMap env = current_environment();
  ASSERT_EQ(env.count("TRAIN_ENV_TEST_VAR"), 1u);
  EXPECT_EQ(env.at("TRAIN_ENV_TEST_VAR"), "a=b");
  unsetenv("TRAIN_ENV_TEST_VAR");
}

}  // namespace
}  // namespace train
