// How a run's gradients travel, decided once and in one place: the process group's backend (Gloo
// or NCCL), whether the GPUs of one machine average through each other's memory, where a CUDA
// graph step averages, and the shared-memory sum of CPU ranks. Pure: every input is a fact or a
// flag, so each choice is tested on any CPU.
#pragma once

#include "step/train_step.h"
#include "train/config.h"
#include "train/process_group.h"

#include <string>

namespace train::detail {

/// --peer-allreduce auto takes the peer all-reduce for up to this many ranks of one machine.
constexpr int kAutoPeerMaxRanks = 4;

/// What the plan is made from, besides the flags.
struct CommFacts {
  bool gpu = false;              ///< the run trains on a CUDA GPU
  int world_size = 1;
  int local_world_size = 1;      ///< ranks on this machine
  int local_rank = 0;
  int device_index = 0;          ///< this rank's GPU
  bool graph_step = false;       ///< the step is captured in a CUDA graph (step_choice.h)
  bool peer_kernels = false;     ///< this build has the peer all-reduce kernel
  /// Every local rank's GPU has its local rank's index, and this GPU reads every other one's memory.
  bool peer_access_to_local = false;
  /// The model's gradients, 4 bytes a trained parameter (the same on every rank).
  int64_t gradient_bytes = 0;
  /// --accumulate-steps > 1 or --clip-grad-norm: of the graph step's averages, only NCCL's inside
  /// the graph gave the eager step's bits (2x H200; the peer all-reduce and "between" did not).
  bool accumulate_or_clip = false;
  /// --shard-optimizer (or the spec's) on GPUs: the step reduce-scatters and all-gathers through
  /// NCCL, inside the graph or through the process group, never the peer all-reduce.
  bool sharded = false;
};

struct CommPlan {
  Backend backend = Backend::gloo;  ///< the process group's
  /// The graph step averages buckets through the GPUs' peer memory where it can be set up (NCCL,
  /// or one all-reduce between two graphs, for the rest), and the first module gets a bucket of
  /// its own.
  bool peer = false;
  GraphAverage graph_average = GraphAverage::in_graph;
  bool shared_memory = true;  ///< CPU ranks on one machine sum gradients in shared memory
  std::string why;            ///< a log line for a choice the flags don't show ("" if none)
};

/// The plan for `config` (its --backend, --graph-allreduce, --peer-allreduce and --shm-allreduce)
/// and `facts`. --backend auto is NCCL on GPUs and Gloo on the CPU, except where the graph step of
/// a machine's GPUs averages every bucket through peer memory (two GPUs; up to kAutoPeerMaxRanks
/// when the whole model's gradients fit kPeerMaxReadBytes' reads): that step makes no NCCL call, a
/// process that merely has an NCCL process group runs it ~4% slower at 2 GPUs and 1-2% at 4 (a
/// small model; docs/benchmarks.md), and the control collectives go through shared memory, so the
/// group is Gloo. --peer-allreduce auto means two ranks, or up to kAutoPeerMaxRanks of one machine
/// (with NCCL for the buckets too large for it); on means 2 to kPeerMaxRanks.
CommPlan plan_comm(const TrainConfig& config, const CommFacts& facts);

}  // namespace train::detail
