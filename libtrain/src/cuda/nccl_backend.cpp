// The NCCL backend of train::ProcessGroup (process_group.cpp builds Gloo's): c10d's
// ProcessGroupNCCL bound to this rank's GPU, and its communicator for the captured step's own
// NCCL calls. CUDA builds only.
#include "process_group_impl.h"

#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

namespace train::detail {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                    std::chrono::milliseconds timeout, int device_index) {
  auto o = c10d::ProcessGroupNCCL::Options::create();
  o->timeout = timeout;
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, o);
  nccl->setBoundDeviceId(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index)));
  return nccl;
}

void* ProcessGroupImpl::nccl_comm() const {
  auto nccl = c10::dynamic_intrusive_pointer_cast<c10d::ProcessGroupNCCL>(pg);
  if (!nccl) return nullptr;
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_index));  // getCommPtr asks the current device
  return reinterpret_cast<void*>(nccl->getCommPtr());
}

}  // namespace train::detail
