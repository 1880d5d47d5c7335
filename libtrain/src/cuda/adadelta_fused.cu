// The fused Adadelta kernel (adadelta_fused.h). Blocks walk fixed-size chunks of a batch of up to
// kMaxTensors tensors; a block finds its tensor from the chunk prefix sums passed by value.
#include "adadelta_fused.h"

#include <cuda_runtime.h>

namespace train::detail {
namespace {

constexpr int kMaxTensors = 24;
constexpr int kThreads = 256;
constexpr int kPerThread = 8;
constexpr int64_t kChunk = int64_t{kThreads} * kPerThread;

struct Batch {
  AdadeltaFusedTensor t[kMaxTensors];
  int64_t first_chunk[kMaxTensors + 1];  // prefix sums of each tensor's chunk count
  int count;
};

__global__ void adadelta_kernel(const Batch batch, const AdadeltaFusedOptions o) {
  const int64_t chunk = blockIdx.x;
  int k = 0;
  while (k + 1 < batch.count && batch.first_chunk[k + 1] <= chunk) ++k;
  const AdadeltaFusedTensor& t = batch.t[k];
  const int64_t begin = (chunk - batch.first_chunk[k]) * kChunk;
  const float lr = o.lr_device != nullptr ? *o.lr_device : o.lr;
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = begin + int64_t{j} * kThreads + threadIdx.x;
    if (i >= t.numel) return;
    const float p = t.param[i];
    float g = o.maximize ? -t.grad[i] : t.grad[i];
    if (o.weight_decay != 0.0f) g += o.weight_decay * p;
    const float sq = t.square_avg[i] * o.rho + (1.0f - o.rho) * g * g;
    const float std = sqrtf(sq + o.eps);
    const float acc = t.acc_delta[i];
    const float delta = sqrtf(acc + o.eps) / std * g;
    t.square_avg[i] = sq;
    t.acc_delta[i] = acc * o.rho + (1.0f - o.rho) * delta * delta;
    t.param[i] = p - lr * delta;
  }
}

}  // namespace

bool adadelta_fused_available() { return true; }

int adadelta_fused_launch(const AdadeltaFusedTensor* tensors, int count, const AdadeltaFusedOptions& options,
                          void* stream) {
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
    adadelta_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(batch, options);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  return 0;
}

}  // namespace train::detail
