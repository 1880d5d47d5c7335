// The non-finite watch's note as one kernel (nonfinite_fused.h). Each block squares and sums one
// chunk of one gradient and adds that to the gradient's sum in the scratch memory; the last block
// to finish turns the sums into the first bad entry and, in the call's last launch, writes the
// code and advances the step.
//
// The sums are float atomics (double for f64 gradients, as torch's norm of a double is): their
// order varies from run to run, so a sum right at the edge of overflowing may come out finite in
// one run and infinite in the next. Only finiteness is read, and torch's own norm kernels sum in
// an order of their own: a sum overflows to inf here where the norm's does (a gradient of 1e30s),
// and a NaN stays NaN.
#include "nonfinite_fused.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>

namespace train::detail {
namespace {

constexpr int kMaxTensors = 96;  // per launch: the kernel's parameters stay within CUDA's 4 KB
constexpr int kThreads = 256;
constexpr int kPerThread = 4;
constexpr int64_t kChunk = int64_t{kThreads} * kPerThread;

// Up to kMaxTensors of the call's gradients; a block finds its tensor from the chunk prefix sums.
struct Batch {
  NonFiniteFusedTensor t[kMaxTensors];
  int64_t first_chunk[kMaxTensors + 1];
  int count;
  int offset;  // t[0]'s index among the call's gradients
};

// What a launch's last block needs besides its batch.
struct Finish {
  NonFiniteFusedTensor loss, norms;
  int count;  // the call's gradients (or norms)
  bool last;  // the call's last launch: it writes the code and the step
  int64_t* first;
  int64_t* step;
  int64_t host_step, stride;
};

// The scratch memory (nonfinite_fused_scratch_bytes): all zero between calls.
struct Scratch {
  double* sums_d;  // f64 gradients' sums of squares
  float* sums_f;   // the other gradients'
  unsigned* done;  // blocks of the running launch that have added their chunk
  int* bad;        // the first bad gradient entry that the call's earlier launches found (0: none)
};

static_assert(sizeof(Batch) + sizeof(Finish) + sizeof(Scratch) <= 4096, "kernel parameters over 4 KB");

__device__ float widen(float x) { return x; }
__device__ float widen(__half x) { return __half2float(x); }
__device__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ double widen(double x) { return x; }

// The whole block's sum; thread 0 holds it.
template <typename Acc>
__device__ Acc block_sum(Acc v) {
  __shared__ Acc warp_sums[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : Acc(0);
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  }
  return v;
}

// Each thread loads all of its elements before it squares any: the loads overlap.
template <typename T, typename Acc>
__device__ void add_chunk(const NonFiniteFusedTensor& t, int64_t begin, Acc* sum) {
  const T* data = static_cast<const T*>(t.data);
  Acc v[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = begin + int64_t{j} * kThreads;
    v[j] = i < t.numel ? static_cast<Acc>(widen(data[i])) : Acc(0);
  }
  Acc s = 0;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) s += v[j] * v[j];
  s = block_sum(s);
  if (threadIdx.x == 0) atomicAdd(sum, s);
}

// Element i as torch's .to(kFloat) gives it (a double beyond float's range becomes infinite).
__device__ float as_float(const NonFiniteFusedTensor& t, int64_t i) {
  switch (t.dtype) {
    case NonFiniteDtype::f16: return __half2float(static_cast<const __half*>(t.data)[i]);
    case NonFiniteDtype::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(t.data)[i]);
    case NonFiniteDtype::f64: return static_cast<float>(static_cast<const double*>(t.data)[i]);
    default: return static_cast<const float*>(t.data)[i];
  }
}

// Whether a gradient's norm is bad as the ATen path sees it: torch's norm of a half tensor is a
// half (a norm over 65504 is infinite even where every element is finite), of a double a double,
// and the path converts each to float.
__device__ bool bad_norm(NonFiniteDtype dtype, float sum_f, double sum_d) {
  switch (dtype) {
    case NonFiniteDtype::f16: return !isfinite(__half2float(__float2half_rn(sqrtf(sum_f))));
    case NonFiniteDtype::bf16: return !isfinite(__bfloat162float(__float2bfloat16_rn(sqrtf(sum_f))));
    case NonFiniteDtype::f64: return !isfinite(static_cast<float>(sqrt(sum_d)));
    default: return !isfinite(sqrtf(sum_f));
  }
}

// The last block: the batch's verdicts (its sums zeroed again for the next call), then, in the
// call's last launch, the loss's, the code and the step. Earlier launches hold earlier gradients,
// so a bad entry they found stays the first.
__device__ void finish(const Batch& b, const Finish& f, const Scratch& s) {
  __shared__ int first_bad;
  if (threadIdx.x == 0) first_bad = INT_MAX;
  __syncthreads();
  for (int k = threadIdx.x; k < b.count; k += kThreads) {
    const int g = b.offset + k;
    const float sum_f = __ldcg(&s.sums_f[g]);
    const double sum_d = __ldcg(&s.sums_d[g]);
    s.sums_f[g] = 0.0f;
    s.sums_d[g] = 0.0;
    if (bad_norm(b.t[k].dtype, sum_f, sum_d)) atomicMin(&first_bad, g + 1);
  }
  if (f.norms.data != nullptr) {
    for (int k = threadIdx.x; k < f.count; k += kThreads) {
      if (!isfinite(as_float(f.norms, k))) atomicMin(&first_bad, k + 1);
    }
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  *s.done = 0;
  int bad = *s.bad;
  if (bad == 0 && first_bad != INT_MAX) bad = first_bad;
  if (!f.last) {
    *s.bad = bad;
    return;
  }
  *s.bad = 0;
  const int entry = !isfinite(as_float(f.loss, 0)) ? 0 : bad > 0 ? bad : -1;
  const int64_t step = f.step != nullptr ? *f.step : f.host_step;
  if (entry >= 0 && *f.first < 0) *f.first = step * f.stride + entry;
  if (f.step != nullptr) *f.step = step + 1;
}

__global__ void __launch_bounds__(kThreads) note_kernel(const Batch b, const Finish f, const Scratch s) {
  const int64_t chunk = blockIdx.x;
  if (chunk < b.first_chunk[b.count]) {
    int k = 0;  // the last tensor starting at or before the chunk (empty ones start where the next does)
    for (int hi = b.count - 1; k < hi;) {
      const int mid = (k + hi + 1) / 2;
      if (b.first_chunk[mid] <= chunk) {
        k = mid;
      } else {
        hi = mid - 1;
      }
    }
    const NonFiniteFusedTensor& t = b.t[k];
    const int64_t begin = (chunk - b.first_chunk[k]) * kChunk + threadIdx.x;
    const int g = b.offset + k;
    switch (t.dtype) {  // the same for the whole block
      case NonFiniteDtype::f16: add_chunk<__half, float>(t, begin, &s.sums_f[g]); break;
      case NonFiniteDtype::bf16: add_chunk<__nv_bfloat16, float>(t, begin, &s.sums_f[g]); break;
      case NonFiniteDtype::f64: add_chunk<double, double>(t, begin, &s.sums_d[g]); break;
      default: add_chunk<float, float>(t, begin, &s.sums_f[g]); break;
    }
  }
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __threadfence();  // this block's sum is seen before its count: the last block reads every sum
    last = atomicAdd(s.done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  finish(b, f, s);
}

}  // namespace

bool nonfinite_fused_available() { return true; }

size_t nonfinite_fused_scratch_bytes(int max_tensors) {
  return static_cast<size_t>(max_tensors) * (sizeof(double) + sizeof(float)) + sizeof(unsigned) + sizeof(int);
}

int nonfinite_fused_launch(const NonFiniteFusedCall& c, void* stream) {
  if (c.count < 0 || c.count > c.max_tensors || c.scratch == nullptr || c.first == nullptr ||
      (c.norms.data == nullptr && c.count > 0 && c.grads == nullptr)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  char* base = static_cast<char*>(c.scratch);
  const Scratch s{reinterpret_cast<double*>(base), reinterpret_cast<float*>(base + c.max_tensors * sizeof(double)),
                  reinterpret_cast<unsigned*>(base + c.max_tensors * (sizeof(double) + sizeof(float))),
                  reinterpret_cast<int*>(base + c.max_tensors * (sizeof(double) + sizeof(float)) + sizeof(unsigned))};
  Finish f{c.loss, c.norms, c.count, false, c.first, c.step, c.host_step, c.stride};
  const int n = c.norms.data == nullptr ? c.count : 0;  // the gradients to sum
  int start = 0;
  do {  // once at least: the last launch writes the code
    Batch b{};
    b.offset = start;
    b.count = n - start < kMaxTensors ? n - start : kMaxTensors;
    b.first_chunk[0] = 0;
    for (int k = 0; k < b.count; ++k) {
      b.t[k] = c.grads[start + k];
      b.first_chunk[k + 1] = b.first_chunk[k] + (b.t[k].numel + kChunk - 1) / kChunk;
    }
    start += b.count;
    f.last = start >= n;
    const int64_t chunks = b.first_chunk[b.count];
    if (chunks > INT_MAX) return static_cast<int>(cudaErrorInvalidValue);
    const unsigned blocks = chunks > 0 ? static_cast<unsigned>(chunks) : 1u;  // one at least, to finish
    note_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(b, f, s);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return static_cast<int>(e);
  } while (start < n);
  return 0;
}

}  // namespace train::detail
