// Whether a CUDA graph calls NCCL on a process group's communicator (ProcessGroupImpl's
// comm_in_graphs, process_group_impl.h), for sources that need only that and not the c10d headers.
#pragma once

namespace train {
class ProcessGroup;
}  // namespace train

namespace train::detail {

bool comm_in_graphs(ProcessGroup& pg);

}  // namespace train::detail
