// The non-finite watch's note (nonfinite.h) in one CUDA kernel launch: whether the loss and each
// gradient's 2-norm are finite, and the code of the first entry that isn't, with no host sync; in
// place of ~13 small ATen kernels per step. Plain C++ interface: no torch or CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace train::detail {

/// The element types the kernel reads: torch's float, half, bfloat16 and double.
enum class NonFiniteDtype : int32_t { f32, f16, bf16, f64 };

/// A tensor the kernel reads: `numel` elements from `data` (dense, in any order of dimensions).
struct NonFiniteFusedTensor {
  const void* data = nullptr;
  int64_t numel = 0;
  NonFiniteDtype dtype = NonFiniteDtype::f32;
};

/// One note: entry 0 is the loss, entry 1 + k the k-th gradient (its 2-norm, as torch's norm of
/// that dtype would hold it, converted to float) or, where `norms.data` is set, norms[k]. An entry
/// is bad when that float is NaN or infinite. Where one is, and *first < 0, the kernel sets
/// *first = step * stride + (the first bad entry); step is *step, which it then advances by one,
/// or `host_step` where `step` is null.
struct NonFiniteFusedCall {
  NonFiniteFusedTensor loss;                    ///< one element
  const NonFiniteFusedTensor* grads = nullptr;  ///< host array of `count` gradients
  int count = 0;
  NonFiniteFusedTensor norms;  ///< or the clipping's norms of the gradients (`count` elements)
  void* scratch = nullptr;     ///< nonfinite_fused_scratch_bytes(max_tensors) of zeroed device memory
  int max_tensors = 0;         ///< at least `count`
  int64_t* first = nullptr;    ///< int64 on the device: -1, or the code of the first bad entry noted
  int64_t* step = nullptr;     ///< int64 on the device: the step noted, advanced by one; or null
  int64_t host_step = 0;       ///< the step noted where `step` is null
  int64_t stride = 1;
};

/// Whether this build compiled the kernel (a CUDA compiler was found at configure time).
bool nonfinite_fused_available();

/// The device memory a call for up to `max_tensors` gradients keeps between launches: zeroed once
/// (every launch leaves it zeroed again), and allocated outside any CUDA graph capture, so that
/// no graph's pool owns it. One note runs at a time on it (stream order).
size_t nonfinite_fused_scratch_bytes(int max_tensors);

/// Queues the note on `stream` (a cudaStream_t); captured like any kernel, with the pointers and
/// sizes of this call. More gradients than one launch's parameters hold take several launches.
/// Returns the CUDA error code of the launch (0 on success).
int nonfinite_fused_launch(const NonFiniteFusedCall& call, void* stream);

}  // namespace train::detail
