// The NCCL calls of captured graphs (nccl_calls.h).
#include "cuda/nccl_calls.h"

#include <dlfcn.h>

namespace train::detail {

const NcclCalls* nccl_calls() {
  static const NcclCalls calls = [] {
    NcclCalls c;
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    void* where = lib != nullptr ? lib : RTLD_DEFAULT;
    c.all_reduce = reinterpret_cast<NcclCalls::AllReduce>(dlsym(where, "ncclAllReduce"));
    c.reduce_scatter = reinterpret_cast<NcclCalls::ReduceScatter>(dlsym(where, "ncclReduceScatter"));
    c.all_gather = reinterpret_cast<NcclCalls::AllGather>(dlsym(where, "ncclAllGather"));
    c.group_start = reinterpret_cast<NcclCalls::Group>(dlsym(where, "ncclGroupStart"));
    c.group_end = reinterpret_cast<NcclCalls::Group>(dlsym(where, "ncclGroupEnd"));
    c.error_string = reinterpret_cast<NcclCalls::ErrorString>(dlsym(where, "ncclGetErrorString"));
    return c;
  }();
  const bool all = calls.all_reduce != nullptr && calls.reduce_scatter != nullptr && calls.all_gather != nullptr &&
                   calls.group_start != nullptr && calls.group_end != nullptr && calls.error_string != nullptr;
  return all ? &calls : nullptr;
}

}  // namespace train::detail
