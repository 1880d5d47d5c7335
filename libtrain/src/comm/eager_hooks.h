// The hooks of eager backward passes: the process group's all-reduce (Gloo or NCCL through c10d,
// started as each bucket completes, overlapping the rest of the backward) and, for CPU ranks on
// one machine, a sum through shared memory at the end of the backward.
#pragma once

#include "comm/reducer.h"

#include <memory>
#include <string>

namespace train::detail {
struct ProcessGroupImpl;
}  // namespace train::detail

namespace train {

class ProcessGroup;

/// The eager hook for every bucket of `reducer` over `pg`: the shared-memory sum where
/// `shared_memory` allows it and every rank is on this machine with CPU float/double gradients,
/// else the process group's all-reduce. Collective (the shared-memory set-up): every rank calls
/// it alike. `why` gets the choice in words.
std::shared_ptr<CommHook> make_eager_hook(Reducer& reducer, ProcessGroup& pg, bool shared_memory, std::string* why);

}  // namespace train
