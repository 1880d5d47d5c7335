// The loader's copies to a GPU in a build without CUDA (data/loader_copy.h): there is no GPU to copy
// to. CMake compiles this file instead of libtrain/src/cuda/loader_copy.cpp.
#include "data/loader_copy.h"

#include "train/base/error.h"

namespace train::detail {

std::unique_ptr<BatchCopy> make_cuda_batch_copy(const at::Device& device, std::shared_ptr<DeviceStage> /*stage*/) {
  throw ConfigError("the loader's device " + device.str() + ": expected a build of libtrain with CUDA, found one without.",
                    "rebuild against a CUDA build of torch (with nccl.h), or use --device cpu.");
}

}  // namespace train::detail
