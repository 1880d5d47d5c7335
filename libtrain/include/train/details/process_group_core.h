// Not API (spdlog's details/ convention): what train::ProcessGroup must name in its header so that
// libtrain's own sources (the reducer's hooks, the GPUs' peer all-reduce) can reach the c10d
// objects behind it. Their definition is private to libtrain (libtrain/src/process_group_impl.h).
#pragma once

namespace train {
class ProcessGroup;
}  // namespace train

namespace train::details {

/// The c10d store and backend behind a ProcessGroup (defined in libtrain's sources only).
struct ProcessGroupCore;

/// `pg`'s core, for libtrain's own sources.
ProcessGroupCore& core_of(ProcessGroup& pg);

}  // namespace train::details
