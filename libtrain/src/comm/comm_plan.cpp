// The communication plan (comm_plan.h): one function, every choice of how gradients travel.
#include "comm/comm_plan.h"

#include "cuda/peer_allreduce.h"

#include <string>

namespace train::detail {

namespace {

// Why a graph step of several GPUs must average with NCCL inside the graph, leaving out the peer
// all-reduce (`peer`) or "between" that the flags picked; "" where it may use them.
std::string nccl_in_graph_reason(const CommFacts& f, bool peer) {
  if (f.sharded) {
    return std::string("--shard-optimizer: the GPUs reduce-scatter the gradients and all-gather the parameters "
                       "with NCCL inside the CUDA graph (") +
           (peer ? "no peer all-reduce" : "not --graph-allreduce between") + ")";
  }
  if (f.accumulate_or_clip) {
    // A faster path gives the plain one's bits or is not taken: NCCL inside the graph is the one
    // measured equal to the eager step.
    return std::string("the CUDA graph step averages with NCCL inside the graph: with --accumulate-steps or "
                       "--clip-grad-norm, ") +
           (peer ? "the peer all-reduce (--peer-allreduce off is implied)" : "--graph-allreduce between") +
           " did not give the eager step's bits on 2 GPUs, so it is not used";
  }
  return "";
}

}  // namespace

CommPlan plan_comm(const TrainConfig& c, const CommFacts& f) {
  CommPlan plan;
  plan.shared_memory = c.distributed.shm_allreduce;
  plan.graph_average = c.gpu.graph_allreduce == GraphAllreduce::between ? GraphAverage::between : GraphAverage::in_graph;
  const Switch peer = c.gpu.peer_allreduce;
  // auto: two ranks, or up to 4 of one machine, where the small buckets' one-shot exchange beat
  // NCCL's (4x H100: the GRU and MNIST at 4 x 64 +2-3%, ResNet-18 and the transformer unchanged;
  // buckets too large for it stay NCCL's).
  const bool auto_ranks = f.world_size == 2 || (f.world_size <= kAutoPeerMaxRanks && f.local_world_size == f.world_size);
  const bool asked = peer == Switch::on || (peer == Switch::automatic && auto_ranks);
  plan.peer = f.gpu && f.graph_step && f.world_size > 1 && f.world_size <= kPeerMaxRanks && asked &&
              plan.graph_average == GraphAverage::in_graph && f.peer_kernels;
  if (f.gpu && f.graph_step && f.world_size > 1 && (plan.peer || plan.graph_average == GraphAverage::between)) {
    const std::string why = nccl_in_graph_reason(f, plan.peer);
    if (!why.empty()) {
      plan.why = why;
      plan.peer = false;
      plan.graph_average = GraphAverage::in_graph;
    }
  }
  const BackendKind backend = c.distributed.backend;
  if (backend == BackendKind::gloo) {
    plan.backend = Backend::gloo;
  } else if (backend == BackendKind::nccl || (f.gpu && backend == BackendKind::automatic)) {
    plan.backend = Backend::nccl;
  }
  // Every GPU of one machine, each the others' peer (not under SLURM's per-task binding, where
  // this can't be checked here); past two, only where no bucket would need NCCL's ring.
  const bool one_machine = f.world_size == f.local_world_size && f.device_index == f.local_rank && f.peer_access_to_local;
  const bool every_bucket_peer =
      f.world_size == 2 ||
      (f.world_size <= kAutoPeerMaxRanks && f.gradient_bytes > 0 && f.gradient_bytes * (f.world_size - 1) <= kPeerMaxReadBytes);
  if (backend == BackendKind::automatic && plan.peer && one_machine && every_bucket_peer && plan.why.empty()) {
    plan.backend = Backend::gloo;
    plan.why = "backend gloo (--backend auto): the " + std::to_string(f.world_size) +
               " GPUs average every gradient inside the CUDA graph through each other's memory, and an NCCL "
               "process group would only slow the step; --backend nccl keeps NCCL";
  }
  return plan;
}

}  // namespace train::detail
