// The fused Adadelta kernel (adadelta_fused.h). Blocks walk fixed-size chunks of a batch of up to
// kMaxTensors tensors; a block finds its tensor from the chunk prefix sums passed by value.
#include "adadelta_fused.h"
#include "adadelta_fused_math.cuh"

#include <cuda_runtime.h>

namespace train::detail {
namespace {

constexpr int kMaxTensors = 24;
constexpr int kThreads = 256;
// Elements per thread: 8 for large batches of tensors (fewer blocks), 1 for small ones, whose
// update is a matter of latency, not bandwidth.
constexpr int kPerThreadLarge = 8;
constexpr int64_t kSmallBatch = int64_t{1} << 18;  // elements

struct Batch {
  AdadeltaFusedTensor t[kMaxTensors];
  int64_t first_chunk[kMaxTensors + 1];  // prefix sums of each tensor's chunk count
  int count;
};

// Each thread loads all of its elements before it computes any: the loads overlap instead of
// waiting one after another. The arithmetic per element is the same in any case.
template <int kPerThread>
__global__ void adadelta_kernel(const Batch batch, const AdadeltaFusedOptions o) {
  constexpr int64_t kChunk = int64_t{kThreads} * kPerThread;
  const int64_t chunk = blockIdx.x;
  int k = 0;
  while (k + 1 < batch.count && batch.first_chunk[k + 1] <= chunk) ++k;
  const AdadeltaFusedTensor& t = batch.t[k];
  const int64_t begin = (chunk - batch.first_chunk[k]) * kChunk + threadIdx.x;
  const float lr = o.lr_device != nullptr ? *o.lr_device : o.lr;
  float p[kPerThread], g[kPerThread], sq[kPerThread], acc[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = begin + int64_t{j} * kThreads;
    if (i < t.numel) {
      p[j] = t.param[i];
      g[j] = t.grad[i];
      sq[j] = t.square_avg[i];
      acc[j] = t.acc_delta[i];
    }
  }
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = begin + int64_t{j} * kThreads;
    if (i >= t.numel) break;
    adadelta_element(p[j], g[j], sq[j], acc[j], o, lr);
    t.square_avg[i] = sq[j];
    t.acc_delta[i] = acc[j];
    t.param[i] = p[j];
  }
}

template <int kPerThread>
int launch_batches(const AdadeltaFusedTensor* tensors, int count, const AdadeltaFusedOptions& options,
                   cudaStream_t stream) {
  constexpr int64_t kChunk = int64_t{kThreads} * kPerThread;
  for (int start = 0; start < count; start += kMaxTensors) {
    Batch batch{};
    batch.count = count - start < kMaxTensors ? count - start : kMaxTensors;
    batch.first_chunk[0] = 0;
    for (int k = 0; k < batch.count; ++k) {
      batch.t[k] = tensors[start + k];
      batch.first_chunk[k + 1] = batch.first_chunk[k] + (batch.t[k].numel + kChunk - 1) / kChunk;
    }
    const int64_t blocks = batch.first_chunk[batch.count];
    if (blocks == 0) continue;
    adadelta_kernel<kPerThread><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(batch, options);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  return 0;
}

}  // namespace

bool adadelta_fused_available() { return true; }

int adadelta_fused_launch(const AdadeltaFusedTensor* tensors, int count, const AdadeltaFusedOptions& options,
                          void* stream) {
  int64_t total = 0;
  for (int k = 0; k < count; ++k) total += tensors[k].numel;
  const auto s = static_cast<cudaStream_t>(stream);
  return total <= kSmallBatch ? launch_batches<1>(tensors, count, options, s)
                              : launch_batches<kPerThreadLarge>(tensors, count, options, s);
}

}  // namespace train::detail
