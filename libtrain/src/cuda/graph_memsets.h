// A captured graph's memset nodes as kernel nodes. A memset node inside a CUDA graph leaves the
// GPU idle for a few microseconds before the kernel that follows it (measured in the GRU's and
// the MNIST CNN's steps: 3-6 us after each of cuBLAS's and cuDNN's memsets, where a kernel after
// a kernel waits well under one); a kernel that writes the same bytes doesn't. The same bytes, so
// the same results. Plain C++ interface: no torch or CUDA headers.
#pragma once

namespace train::detail {

/// Whether this build compiled the fill kernel.
bool graph_memsets_available();

/// Replaces each memset node of `graph` (a cudaGraph_t, captured, not yet instantiated) whose
/// edges are plain ones and that sets at most 64 rows by a kernel node that writes the same bytes, with the same dependencies.
/// Returns the CUDA error code (0 on success); *replaced counts the nodes replaced.
int graph_memsets_to_kernels(void* graph, int* replaced);

}  // namespace train::detail
