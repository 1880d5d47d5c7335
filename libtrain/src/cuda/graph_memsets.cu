// A captured graph's memset nodes as kernel nodes (graph_memsets.h).
#include "graph_memsets.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace train::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;
constexpr size_t kMaxRows = 64;

// What cudaMemset2D writes: `height` rows of `width` elements of `element` bytes (1, 2 or 4),
// `pitch` bytes apart, each element the low bytes of `value`. Rows of one element size start at
// a multiple of it, so byte k of a row is byte (k % element) of `value` (little-endian); a row's
// 16-byte-aligned middle goes as whole uint4 stores of that pattern.
__global__ void __launch_bounds__(kThreads) fill_kernel(unsigned char* dst, size_t pitch, unsigned int value,
                                                        unsigned int element, size_t width, size_t height) {
  uint32_t pattern = value;
  if (element == 1) pattern = (value & 0xffu) * 0x01010101u;
  if (element == 2) pattern = (value & 0xffffu) * 0x00010001u;
  const uint4 wide = make_uint4(pattern, pattern, pattern, pattern);
  const size_t row_bytes = width * element;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t r = 0; r < height; ++r) {
    unsigned char* row = dst + r * pitch;
    const uintptr_t a = reinterpret_cast<uintptr_t>(row);
    const size_t head = ((a + 15) / 16 * 16 - a) < row_bytes ? (a + 15) / 16 * 16 - a : row_bytes;
    const size_t n16 = (row_bytes - head) / 16;
    const size_t tail = head + n16 * 16;
    const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (size_t k = tid; k < head; k += stride) row[k] = static_cast<unsigned char>(pattern >> (8 * ((a + k) % 4)));
    auto* mid = reinterpret_cast<uint4*>(row + head);
    for (size_t q = tid; q < n16; q += stride) mid[q] = wide;
    for (size_t k = tail + tid; k < row_bytes; k += stride) {
      row[k] = static_cast<unsigned char>(pattern >> (8 * ((a + k) % 4)));
    }
  }
}

bool plain(const cudaGraphEdgeData& e) {
  cudaGraphEdgeData zero;
  std::memset(&zero, 0, sizeof(zero));
  return std::memcmp(&e, &zero, sizeof(zero)) == 0;
}

}  // namespace

bool graph_memsets_available() { return true; }

int graph_memsets_to_kernels(void* graph_ptr, int* replaced) {
  auto graph = static_cast<cudaGraph_t>(graph_ptr);
  if (replaced != nullptr) *replaced = 0;
  size_t count = 0;
  if (cudaError_t e = cudaGraphGetNodes(graph, nullptr, &count); e != cudaSuccess) return e;
  std::vector<cudaGraphNode_t> nodes(count);
  if (cudaError_t e = cudaGraphGetNodes(graph, nodes.data(), &count); e != cudaSuccess) return e;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    if (cudaError_t e = cudaGraphNodeGetType(node, &type); e != cudaSuccess) return e;
    if (type != cudaGraphNodeTypeMemset) continue;
    cudaMemsetParams m;
    if (cudaError_t e = cudaGraphMemsetNodeGetParams(node, &m); e != cudaSuccess) return e;
    if (m.elementSize != 1 && m.elementSize != 2 && m.elementSize != 4) continue;
    // The kernel goes one row at a time: many rows would make it slow. Such a memset stays.
    if (m.height > kMaxRows) continue;
    size_t n_in = 0, n_out = 0;
    if (cudaError_t e = cudaGraphNodeGetDependencies(node, nullptr, nullptr, &n_in); e != cudaSuccess) return e;
    if (cudaError_t e = cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &n_out); e != cudaSuccess) return e;
    std::vector<cudaGraphNode_t> in(n_in), out(n_out);
    std::vector<cudaGraphEdgeData> in_edges(n_in), out_edges(n_out);
    if (cudaError_t e = cudaGraphNodeGetDependencies(node, in.data(), in_edges.data(), &n_in); e != cudaSuccess) return e;
    if (cudaError_t e = cudaGraphNodeGetDependentNodes(node, out.data(), out_edges.data(), &n_out); e != cudaSuccess) {
      return e;
    }
    bool all_plain = true;
    for (const cudaGraphEdgeData& d : in_edges) all_plain = all_plain && plain(d);
    for (const cudaGraphEdgeData& d : out_edges) all_plain = all_plain && plain(d);
    if (!all_plain) continue;

    auto* dst = static_cast<unsigned char*>(m.dst);
    size_t pitch = m.pitch;
    unsigned int value = m.value, element = m.elementSize;
    size_t width = m.width, height = m.height;
    void* args[] = {&dst, &pitch, &value, &element, &width, &height};
    const size_t per_row16 = (width * element + 15) / 16;
    size_t blocks = (per_row16 + kThreads - 1) / kThreads;
    blocks = blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks);
    cudaKernelNodeParams k{};
    k.func = reinterpret_cast<void*>(&fill_kernel);
    k.gridDim = dim3(static_cast<unsigned>(blocks));
    k.blockDim = dim3(kThreads);
    k.sharedMemBytes = 0;
    k.kernelParams = args;
    k.extra = nullptr;
    cudaGraphNode_t fill;
    if (cudaError_t e = cudaGraphAddKernelNode(&fill, graph, in.data(), n_in, &k); e != cudaSuccess) return e;
    for (size_t i = 0; i < n_out; ++i) {
      if (cudaError_t e = cudaGraphAddDependencies(graph, &fill, &out[i], nullptr, 1); e != cudaSuccess) return e;
    }
    if (cudaError_t e = cudaGraphDestroyNode(node); e != cudaSuccess) return e;
    if (replaced != nullptr) ++*replaced;
  }
  return cudaSuccess;
}

}  // namespace train::detail
