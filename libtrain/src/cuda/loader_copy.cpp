// The loader's copies to a GPU (data/loader_copy.h): each batch copied from host memory on a side
// stream from the device's pool, an event recorded behind it, and the step's stream made to wait on
// that event, never the host. CUDA builds only.
#include "data/loader_copy.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace train::detail {
namespace {

class CudaBatchCopy : public BatchCopy {
 public:
  CudaBatchCopy(const at::Device& device, std::shared_ptr<DeviceStage> stage)
      : device_(device), stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())),
        stage_(std::move(stage)) {}

  DeviceBatch copy(const Batch& host) override {
    c10::cuda::CUDAStreamGuard on_side(stream_);  // also selects the device
    DeviceBatch out;
    // Allocated on the side stream, by the caching allocator: ready() records the step's stream
    // on the memory as well, so that it is not handed to a later copy while the step reads it.
    if (stage_) {
      out.batch = stage_->finish(host, device_);  // e.g. nvJPEG's decode, queued on the side stream
    } else {
      out.batch.inputs = host.inputs.to(device_, /*non_blocking=*/true);
      out.batch.targets = host.targets.to(device_, /*non_blocking=*/true);
    }
    auto copied = std::make_shared<at::cuda::CUDAEvent>();
    copied->record(stream_);
    const c10::DeviceIndex index = device_.index();
    out.ready = [copied, index, inputs = out.batch.inputs, targets = out.batch.targets] {
      const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(index);
      copied->block(current);
      c10::cuda::CUDACachingAllocator::recordStream(inputs.storage().data_ptr(), current);
      c10::cuda::CUDACachingAllocator::recordStream(targets.storage().data_ptr(), current);
    };
    // Runs on a worker thread before it writes the host buffers again: a wait there costs the
    // step nothing (it is usually long over).
    out.host_free = [copied] { copied->synchronize(); };
    return out;
  }

 private:
  at::Device device_;
  c10::cuda::CUDAStream stream_;
  std::shared_ptr<DeviceStage> stage_;  // null: a plain copy
};

}  // namespace

std::unique_ptr<BatchCopy> make_cuda_batch_copy(const at::Device& device, std::shared_ptr<DeviceStage> stage) {
  return std::make_unique<CudaBatchCopy>(device, std::move(stage));
}

}  // namespace train::detail
