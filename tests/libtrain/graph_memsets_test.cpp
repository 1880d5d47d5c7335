// The captured graph's memset nodes as kernels (libtrain/src/cuda/graph_memsets.h): the kernels
// write the bytes the memset nodes would have, in the same order, 1-, 2- and 4-byte elements, one-
// and two-dimensional, at unaligned addresses, and no memset node is left. Needs a CUDA GPU and a
// build with libtrain's own kernels; says so when it skips.
#include "cuda/graph_memsets.h"

#include "gpu_count.h"

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kBytes = 8192;

struct Fill {
  size_t offset, pitch;
  unsigned int value, element;
  size_t width, height;
};

// What the fills write, in order, over a buffer of `before` bytes.
std::vector<unsigned char> expected(const std::vector<Fill>& fills, unsigned char before) {
  std::vector<unsigned char> b(kBytes, before);
  for (const Fill& f : fills) {
    for (size_t r = 0; r < f.height; ++r) {
      for (size_t i = 0; i < f.width; ++i) {
        std::memcpy(b.data() + f.offset + r * f.pitch + i * f.element, &f.value, f.element);  // little-endian
      }
    }
  }
  return b;
}

int memset_nodes(cudaGraph_t g) {
  size_t n = 0;
  EXPECT_EQ(cudaGraphGetNodes(g, nullptr, &n), cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(n);
  EXPECT_EQ(cudaGraphGetNodes(g, nodes.data(), &n), cudaSuccess);
  int count = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType t;
    EXPECT_EQ(cudaGraphNodeGetType(node, &t), cudaSuccess);
    count += t == cudaGraphNodeTypeMemset;
  }
  return count;
}

TEST(GraphMemsetsGpu, KernelsWriteWhatTheMemsetNodesWouldInTheirOrder) {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 1) GTEST_SKIP() << "needs a CUDA GPU, found " << gpus << ": run it on a GPU node (docs/gpu.md)";
  if (!train::detail::graph_memsets_available()) GTEST_SKIP() << "this build has no CUDA compiler: no fill kernel";
  unsigned char* dev = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dev), kBytes), cudaSuccess);
  // A chain: each fill overwrites part of the one before, so the bytes show the order.
  const std::vector<Fill> fills = {
      {1, 0, 0x11, 1, 5000, 1},              // bytes, from an odd address: head, uint4 middle, tail
      {100, 0, 0xDEADBEEFu, 4, 250, 1},      // 4-byte elements
      {1026, 256, 0xBEEF, 2, 37, 5},         // 2-byte elements, 5 rows 256 bytes apart
      {4097, 512, 0x7F, 1, 300, 4},          // bytes, 2D, rows overlapping the first fill's end
      {6000, 0, 0, 1, 3, 1},                 // a few bytes
  };
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaGraphCreate(&g, 0), cudaSuccess);
  cudaGraphNode_t prev = nullptr;
  for (const Fill& f : fills) {
    cudaMemsetParams m{};
    m.dst = dev + f.offset;
    m.pitch = f.pitch;
    m.value = f.value;
    m.elementSize = f.element;
    m.width = f.width;
    m.height = f.height;
    cudaGraphNode_t node = nullptr;
    ASSERT_EQ(cudaGraphAddMemsetNode(&node, g, prev ? &prev : nullptr, prev ? 1 : 0, &m), cudaSuccess);
    prev = node;
  }
  ASSERT_EQ(memset_nodes(g), static_cast<int>(fills.size()));
  int replaced = -1;
  ASSERT_EQ(train::detail::graph_memsets_to_kernels(g, &replaced), 0);
  EXPECT_EQ(replaced, static_cast<int>(fills.size()));
  EXPECT_EQ(memset_nodes(g), 0);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  std::vector<unsigned char> host(kBytes);
  for (unsigned char before : {0x00, 0xC3}) {  // twice: a replay writes everything again
    ASSERT_EQ(cudaMemset(dev, before, kBytes), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, nullptr), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(host.data(), dev, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
    const std::vector<unsigned char> want = expected(fills, before);
    size_t bad = 0, first_bad = kBytes;
    for (size_t i = 0; i < kBytes; ++i) {
      if (host[i] != want[i]) {
        ++bad;
        first_bad = std::min(first_bad, i);
      }
    }
    EXPECT_EQ(bad, 0u) << "first wrong byte at " << first_bad << " (before 0x" << std::hex << int(before) << ")";
  }
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(g);
  (void)cudaFree(dev);
}

}  // namespace
