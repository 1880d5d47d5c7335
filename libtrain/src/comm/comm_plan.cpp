// The communication plan (comm_plan.h): one function, every choice of how gradients travel.
#include "comm/comm_plan.h"

#include "cuda/peer_allreduce.h"

namespace train::detail {

CommPlan plan_comm(const TrainConfig& c, const CommFacts& f) {
  CommPlan plan;
  plan.shared_memory = c.distributed.shm_allreduce;
  plan.graph_average = c.gpu.graph_allreduce == GraphAllreduce::between ? GraphAverage::between : GraphAverage::in_graph;
  const Switch peer = c.gpu.peer_allreduce;
  const bool asked = peer == Switch::on || (peer == Switch::automatic && f.world_size == 2);
  plan.peer = f.gpu && f.graph_step && f.world_size > 1 && f.world_size <= kPeerMaxRanks && asked &&
              plan.graph_average == GraphAverage::in_graph && f.peer_kernels;
  const BackendKind backend = c.distributed.backend;
  if (backend == BackendKind::gloo) {
    plan.backend = Backend::gloo;
  } else if (backend == BackendKind::nccl || (f.gpu && backend == BackendKind::automatic)) {
    plan.backend = Backend::nccl;
  }
  // The other rank's GPU is the other local rank's index where both are visible (not under
  // SLURM's per-task binding, where this can't be checked here).
  const bool two_local_gpus = f.world_size == 2 && f.local_world_size == 2 && f.device_index == f.local_rank &&
                              f.peer_access_to_other;
  if (backend == BackendKind::automatic && plan.peer && two_local_gpus) {
    plan.backend = Backend::gloo;
    plan.why = "backend gloo (--backend auto): the 2 GPUs average gradients inside the CUDA graph through each "
               "other's memory, and an NCCL process group would only slow the step; --backend nccl keeps NCCL";
  }
  return plan;
}

}  // namespace train::detail
