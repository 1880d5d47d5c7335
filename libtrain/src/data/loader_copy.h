// The loader's copy of a collated batch from host memory to a GPU (loader.h), behind an interface
// so that loader.cpp holds no CUDA code: cuda/loader_copy.cpp in CUDA builds,
// cpu/loader_copy_no_cuda.cpp otherwise. Private.
#pragma once

#include "train/data.h"
#include "train/sample_dataset.h"

#include <c10/core/Device.h>

#include <functional>
#include <memory>

namespace train::detail {

/// A batch on its way to the device.
struct DeviceBatch {
  Batch batch;  ///< on the device; its copy may still be running on the copy's stream
  /// Makes the calling thread's current stream wait for the copy (no host sync), and tells the
  /// device's allocator that this stream uses the batch's memory. Call it on the thread that runs
  /// the step, before the step reads the batch, outside CUDA graph capture.
  std::function<void()> ready;
  /// Blocks the calling thread until the copy has read the host buffers, so that they may be
  /// written again. Empty: they may be written at once.
  std::function<void()> host_free;
};

/// Copies host batches to one device, asynchronously.
class BatchCopy {
 public:
  virtual ~BatchCopy() = default;
  /// Queues the copy of `host` (CPU tensors, ideally pinned) to the device on this object's side
  /// stream. Called from the loader's worker threads, concurrently.
  virtual DeviceBatch copy(const Batch& host) = 0;
};

/// The copy to CUDA device `device`, on a stream from the device's pool; with `stage`, the batch is
/// made on the device by stage->finish() on that stream instead of copied as it is.
/// @throws train::ConfigError in a build without CUDA.
std::unique_ptr<BatchCopy> make_cuda_batch_copy(const at::Device& device, std::shared_ptr<DeviceStage> stage = nullptr);

}  // namespace train::detail
