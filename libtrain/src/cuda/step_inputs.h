// What a captured step's next replay reads, written in one kernel between replays: the batch's
// sample indices (the epoch's order, sliced) and the parameter groups' new learning rates. One
// launch where there were two (a copy and a fill per changed rate): the GPU waits for the host
// and for each launch's start between two replays, and on several GPUs every rank then waits for
// the slowest at the next exchange. The same bytes as the copy and the fill. Plain C++ interface:
// no torch or CUDA headers.
#pragma once

#include <cstdint>

namespace train::detail {

inline constexpr int kStepInputRates = 4;

struct StepInputs {
  int64_t* indices = nullptr;      ///< the graph's index input
  const int64_t* order = nullptr;  ///< this step's slice of the epoch's order (contiguous)
  int64_t count = 0;
  float* rate[kStepInputRates] = {};   ///< float32 [] rates in device memory
  float value[kStepInputRates] = {};   ///< what each gets (the float a fill_ with the double writes)
  int rates = 0;
};

/// Whether this build compiled the kernel.
bool step_inputs_available();

/// Queues the copy and the writes on `stream` (a cudaStream_t) as one kernel. Returns the CUDA
/// error code (0 on success).
int step_inputs_launch(const StepInputs& in, void* stream);

}  // namespace train::detail
