// The communication plan (comm_plan.h): one function, every choice of how gradients travel.
#include "comm/comm_plan.h"

#include "cuda/peer_allreduce.h"

namespace train::detail {

CommPlan plan_comm(const TrainConfig& c, const CommFacts& f) {
  CommPlan plan;
  plan.shared_memory = c.shm_allreduce == "auto";
  plan.graph_average = c.graph_allreduce == "between" ? GraphAverage::between : GraphAverage::in_graph;
  const bool asked = c.peer_allreduce == "on" || (c.peer_allreduce == "auto" && f.world_size == 2);
  plan.peer = f.gpu && f.graph_step && f.world_size > 1 && f.world_size <= kPeerMaxRanks && asked &&
              plan.graph_average == GraphAverage::in_graph && f.peer_kernels;
  if (c.backend == "gloo") {
    plan.backend = Backend::gloo;
  } else if (c.backend == "nccl" || (f.gpu && c.backend == "auto")) {
    plan.backend = Backend::nccl;
  }
  // The other rank's GPU is the other local rank's index where both are visible (not under
  // SLURM's per-task binding, where this can't be checked here).
  const bool two_local_gpus = f.world_size == 2 && f.local_world_size == 2 && f.device_index == f.local_rank &&
                              f.peer_access_to_other;
  if (c.backend == "auto" && plan.peer && two_local_gpus) {
    plan.backend = Backend::gloo;
    plan.why = "backend gloo (--backend auto): the 2 GPUs average gradients inside the CUDA graph through each "
               "other's memory, and an NCCL process group would only slow the step; --backend nccl keeps NCCL";
  }
  return plan;
}

}  // namespace train::detail
