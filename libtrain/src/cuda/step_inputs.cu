// A captured step's next inputs in one kernel (step_inputs.h).
#include "step_inputs.h"

#include <cuda_runtime.h>

namespace train::detail {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) step_inputs_kernel(StepInputs in) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < in.count) in.indices[i] = in.order[i];
  if (blockIdx.x == 0 && threadIdx.x < in.rates) *in.rate[threadIdx.x] = in.value[threadIdx.x];
}

}  // namespace

bool step_inputs_available() { return true; }

int step_inputs_launch(const StepInputs& in, void* stream) {
  const int64_t blocks = in.count > 0 ? (in.count + kThreads - 1) / kThreads : 1;
  step_inputs_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(in);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace train::detail
