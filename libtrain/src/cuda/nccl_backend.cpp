// The NCCL backend of train::ProcessGroup (process_group.cpp builds Gloo's): c10d's
// ProcessGroupNCCL bound to this rank's GPU, and its communicator for the captured step's own
// NCCL calls, and torch's NCCL flight recorder for the roll-call (rollcall.h). CUDA builds only.
#include "dist/process_group_impl.h"

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <cstdlib>
#include <fstream>

namespace train::detail {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                    std::chrono::milliseconds timeout, int device_index,
                                                    const std::string& name) {
  enable_flight_recorder();
  auto o = c10d::ProcessGroupNCCL::Options::create();
  o->timeout = timeout;
  if (!name.empty()) o->group_name = o->group_desc = name;
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

void ProcessGroupImpl::lend_comm_to_graphs() {
  if (comm_in_graphs) return;
  comm_in_graphs = true;
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_index));
  c10::cuda::device_synchronize();
}

void enable_flight_recorder() {
  // Read once, when the first NCCL group is made: set it before. torch's default keeps none.
  if (std::getenv("TORCH_NCCL_TRACE_BUFFER_SIZE") == nullptr && std::getenv("TORCH_FR_BUFFER_SIZE") == nullptr) {
    ::setenv("TORCH_FR_BUFFER_SIZE", "2000", /*overwrite=*/0);  // torch 2.11 name; TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated
  }
}

std::string dump_flight_recorder(const ProcessGroupImpl& core, const std::string& dir) {
  if (!c10::dynamic_intrusive_pointer_cast<c10d::ProcessGroupNCCL>(core.pg)) return "";
  try {
    // The pickle torch writes itself on a watchdog timeout (TORCH_NCCL_DUMP_ON_TIMEOUT), under
    // the name its analyser looks for: python -m torch.distributed.flight_recorder.fr_trace DIR.
    const std::string trace = ::c10d::dump_nccl_trace(/*includeCollectives=*/true, /*includeStackTraces=*/true,
                                                      /*onlyActive=*/false);
    const std::string path = (dir.empty() ? std::string(".") : dir) + "/nccl_trace_rank_" + std::to_string(core.env.rank);
    std::ofstream out(path, std::ios::binary);
    out.write(trace.data(), static_cast<std::streamsize>(trace.size()));
    return out.good() ? path : "";
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace train::detail
