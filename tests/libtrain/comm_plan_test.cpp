// The communication plan (libtrain/src/comm/comm_plan.h): the one place that decides between
// Gloo, NCCL and the GPUs' peer all-reduce. Pure decisions, checked on any CPU.
#include "comm/comm_plan.h"
#include "cuda/peer_allreduce.h"

#include <gtest/gtest.h>

using train::Backend;
using train::detail::CommFacts;
using train::detail::GraphAverage;
using train::detail::plan_comm;

namespace {

CommFacts two_local_gpus() {
  CommFacts f;
  f.gpu = true;
  f.world_size = 2;
  f.local_world_size = 2;
  f.local_rank = 1;
  f.device_index = 1;
  f.graph_step = true;
  f.peer_kernels = true;
  f.peer_access_to_local = true;
  f.gradient_bytes = 4'799'528;  // the MNIST CNN's 1,199,882 parameters
  return f;
}

// The plan averages inside the graph with NCCL, and its log line says `why`.
void expect_nccl_in_graph(const train::detail::CommPlan& p, const std::string& why) {
  EXPECT_FALSE(p.peer);
  EXPECT_EQ(p.graph_average, GraphAverage::in_graph);
  EXPECT_EQ(p.backend, Backend::nccl);
  EXPECT_NE(p.why.find(why), std::string::npos) << p.why;
}

}  // namespace

TEST(CommPlan, CpuIsGlooWithSharedMemory) {
  train::TrainConfig c;
  CommFacts f;
  f.world_size = 4;
  f.local_world_size = 4;
  auto p = plan_comm(c, f);
  EXPECT_EQ(p.backend, Backend::gloo);
  EXPECT_FALSE(p.peer);
  EXPECT_TRUE(p.shared_memory);
  c.distributed.shm_allreduce = false;
  EXPECT_FALSE(plan_comm(c, f).shared_memory);
}

TEST(CommPlan, TwoLocalGpusOfAGraphStepAverageThroughPeerMemoryOverGloo) {
  train::TrainConfig c;
  auto p = plan_comm(c, two_local_gpus());
  EXPECT_TRUE(p.peer);
  EXPECT_EQ(p.backend, Backend::gloo);
  EXPECT_NE(p.why.find("backend gloo (--backend auto)"), std::string::npos) << p.why;
  // --backend nccl keeps NCCL (peer for the small buckets, NCCL for the rest).
  c.distributed.backend = train::BackendKind::nccl;
  p = plan_comm(c, two_local_gpus());
  EXPECT_TRUE(p.peer);
  EXPECT_EQ(p.backend, Backend::nccl);
  EXPECT_TRUE(p.why.empty());
}

TEST(CommPlan, NoPeerWithoutItsConditions) {
  train::TrainConfig c;
  auto expect_nccl_without_peer = [&](const CommFacts& f, const std::string& what) {
    auto p = plan_comm(c, f);
    EXPECT_FALSE(p.peer) << what;
    EXPECT_EQ(p.backend, Backend::nccl) << what;
  };
  CommFacts f = two_local_gpus();
  f.graph_step = false;  // eager steps (AdamW, a per-step schedule) average through NCCL
  expect_nccl_without_peer(f, "eager step");
  f = two_local_gpus();
  f.peer_kernels = false;
  expect_nccl_without_peer(f, "no kernels");
  f = two_local_gpus();
  f.world_size = 4;
  f.local_world_size = 2;
  expect_nccl_without_peer(f, "auto: more than two ranks only on one machine");
  f.world_size = 8;
  f.local_world_size = 8;
  expect_nccl_without_peer(f, "auto: up to 4 ranks");
  c.gpu.peer_allreduce = train::Switch::off;
  expect_nccl_without_peer(two_local_gpus(), "--peer-allreduce off");
  c.gpu.peer_allreduce = train::Switch::automatic;
  c.gpu.graph_allreduce = train::GraphAllreduce::between;
  expect_nccl_without_peer(two_local_gpus(), "--graph-allreduce between");
  EXPECT_EQ(plan_comm(c, two_local_gpus()).graph_average, GraphAverage::between);
}

// Four GPUs of one machine: auto takes the peer all-reduce for the buckets it fits. Where every
// bucket fits (the whole model's gradients read from 3 peers stay within kPeerMaxReadBytes), the
// group is Gloo as for two; past that NCCL's, for the large buckets.
TEST(CommPlan, AutoTakesPeerMemoryForFourGpusOfOneMachine) {
  train::TrainConfig c;
  CommFacts f = two_local_gpus();
  f.world_size = 4;
  f.local_world_size = 4;
  f.local_rank = 3;
  f.device_index = 3;
  auto p = plan_comm(c, f);
  EXPECT_TRUE(p.peer);
  EXPECT_EQ(p.backend, Backend::gloo);
  EXPECT_NE(p.why.find("backend gloo (--backend auto): the 4 GPUs"), std::string::npos) << p.why;
  f.gradient_bytes = train::detail::kPeerMaxReadBytes / 3;  // at the limit: still Gloo
  EXPECT_EQ(plan_comm(c, f).backend, Backend::gloo);
  f.gradient_bytes += 4;  // one parameter more: some bucket may need NCCL
  p = plan_comm(c, f);
  EXPECT_TRUE(p.peer);
  EXPECT_EQ(p.backend, Backend::nccl);
  EXPECT_TRUE(p.why.empty()) << p.why;
  f.gradient_bytes = 0;  // unknown: NCCL
  EXPECT_EQ(plan_comm(c, f).backend, Backend::nccl);
  f = two_local_gpus();
  f.world_size = 3;
  f.local_world_size = 3;
  p = plan_comm(c, f);
  EXPECT_TRUE(p.peer);
  EXPECT_EQ(p.backend, Backend::gloo);
  f.peer_access_to_local = false;  // one pair of GPUs isn't peers
  EXPECT_EQ(plan_comm(c, f).backend, Backend::nccl);
  f = two_local_gpus();
  f.world_size = 4;
  f.local_world_size = 4;
  f.device_index = 0;  // per-task GPU binding: the others' indices can't be checked
  EXPECT_EQ(plan_comm(c, f).backend, Backend::nccl);
  c.distributed.backend = train::BackendKind::nccl;
  EXPECT_EQ(plan_comm(c, two_local_gpus()).backend, Backend::nccl) << "--backend nccl keeps NCCL";
}

TEST(CommPlan, PeerOnTakesUpToEightLocalGpus) {
  train::TrainConfig c;
  c.gpu.peer_allreduce = train::Switch::on;
  CommFacts f = two_local_gpus();
  f.world_size = 4;
  f.local_world_size = 4;
  auto p = plan_comm(c, f);
  EXPECT_TRUE(p.peer);
  EXPECT_EQ(p.backend, Backend::gloo);  // every bucket fits the peer all-reduce
  f.world_size = 8;
  f.local_world_size = 8;
  p = plan_comm(c, f);
  EXPECT_TRUE(p.peer);
  EXPECT_EQ(p.backend, Backend::nccl);  // past kAutoPeerMaxRanks, and 7 x 4.8 MB of reads is over 16 MiB
  f.world_size = 16;
  f.local_world_size = 8;
  EXPECT_FALSE(plan_comm(c, f).peer);
  // The peer access that can't be checked (per-task GPU binding): NCCL, peer still asked for.
  c.gpu.peer_allreduce = train::Switch::automatic;
  f = two_local_gpus();
  f.peer_access_to_local = false;
  p = plan_comm(c, f);
  EXPECT_EQ(p.backend, Backend::nccl);
  EXPECT_TRUE(p.peer);
}

// With accumulation or clipping the graph step averages with NCCL inside the graph: the peer
// all-reduce and "between" gave other bits than the eager step on 2 GPUs, so they are not taken,
// and the log says why.
TEST(CommPlan, AccumulationOrClippingAveragesWithNcclInsideTheGraph) {
  train::TrainConfig c;
  CommFacts f = two_local_gpus();
  f.accumulate_or_clip = true;
  expect_nccl_in_graph(plan_comm(c, f),
                       "the peer all-reduce (--peer-allreduce off is implied) did not give the eager step's bits");
  c.gpu.graph_allreduce = train::GraphAllreduce::between;
  const auto p = plan_comm(c, f);
  EXPECT_EQ(p.graph_average, GraphAverage::in_graph);
  EXPECT_NE(p.why.find("--graph-allreduce between did not give"), std::string::npos) << p.why;
  f.accumulate_or_clip = false;
  EXPECT_EQ(plan_comm(c, f).graph_average, GraphAverage::between) << "without them the flag holds";
  f.graph_step = false;
  f.accumulate_or_clip = true;
  EXPECT_TRUE(plan_comm(c, f).why.empty()) << "an eager step averages as it always does";
}

// --shard-optimizer on GPUs: NCCL reduce-scatters and all-gathers inside the graph, so the peer
// all-reduce and "between" are left out and --backend auto keeps NCCL; the CPU's plan is unchanged.
TEST(CommPlan, AShardedGpuRunUsesNcclInsideTheGraph) {
  train::TrainConfig c;
  CommFacts f = two_local_gpus();
  f.sharded = true;
  f.accumulate_or_clip = true;  // sharded and clipped: sharding's reason
  expect_nccl_in_graph(plan_comm(c, f), "--shard-optimizer: the GPUs reduce-scatter the gradients and all-gather the "
                                        "parameters with NCCL inside the CUDA graph (no peer all-reduce)");
  c.gpu.graph_allreduce = train::GraphAllreduce::between;
  c.gpu.peer_allreduce = train::Switch::off;
  expect_nccl_in_graph(plan_comm(c, f), "(not --graph-allreduce between)");
  f.graph_step = false;
  EXPECT_TRUE(plan_comm(c, f).why.empty()) << "an eager sharded step says nothing of a graph";
  EXPECT_EQ(plan_comm(c, f).backend, Backend::nccl);
  CommFacts cpu;
  cpu.world_size = 2;
  cpu.local_world_size = 2;
  cpu.sharded = true;
  const auto p = plan_comm(train::TrainConfig{}, cpu);
  EXPECT_EQ(p.backend, Backend::gloo);
  EXPECT_TRUE(p.shared_memory);
  EXPECT_TRUE(p.why.empty());
}
