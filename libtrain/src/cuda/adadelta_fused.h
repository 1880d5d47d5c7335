// Adadelta's whole update in one CUDA kernel launch for many tensors (float32, contiguous):
// the foreach path needs eleven passes over parameters, gradients and state; this one reads each
// once and writes each once. Plain C++ interface: no torch or CUDA headers.
#pragma once

#include <cstdint>

namespace train::detail {

struct AdadeltaFusedTensor {
  float* param = nullptr;
  const float* grad = nullptr;
  float* square_avg = nullptr;
  float* acc_delta = nullptr;
  int64_t numel = 0;
};

struct AdadeltaFusedOptions {
  float lr = 1.0f, rho = 0.9f, eps = 1e-6f, weight_decay = 0.0f;
  bool maximize = false;
  /// When set, the learning rate is read from this device float at run time instead of `lr`:
  /// a CUDA graph that captured the launch then follows a changed rate without a new capture.
  const float* lr_device = nullptr;
};

/// Whether this build compiled the kernel (a CUDA compiler was found at configure time).
bool adadelta_fused_available();

/// Queues the update of `count` tensors on `stream` (a cudaStream_t); captured like any kernel.
/// Returns the CUDA error code of the launch (0 on success).
int adadelta_fused_launch(const AdadeltaFusedTensor* tensors, int count, const AdadeltaFusedOptions& options,
                          void* stream);

}  // namespace train::detail
