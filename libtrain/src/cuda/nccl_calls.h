// The NCCL calls libtrain makes itself inside captured CUDA graphs (the bucket averages of
// cuda/graph_comm.h, ZeRO-1's reduce-scatter and all-gather of cuda/shard_graph.h), taken from the
// libnccl that torch already loaded: libtrain links no NCCL of its own, so the two never differ.
// CUDA builds only. Private.
#pragma once

#include <nccl.h>

namespace train::detail {

struct NcclCalls {
  using AllReduce = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  using ReduceScatter = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                         cudaStream_t);
  using AllGather = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  using Group = ncclResult_t (*)();
  using ErrorString = const char* (*)(ncclResult_t);
  AllReduce all_reduce = nullptr;
  ReduceScatter reduce_scatter = nullptr;
  AllGather all_gather = nullptr;
  Group group_start = nullptr;
  Group group_end = nullptr;
  ErrorString error_string = nullptr;
};

/// The calls, or null where the loaded NCCL lacks one of them.
const NcclCalls* nccl_calls();

}  // namespace train::detail
