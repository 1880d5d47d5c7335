// A build without CUDA (torch without CUDA, or no nccl.h): what the CUDA files would provide says
// that it isn't there. CMake compiles this file instead of libtrain/src/cuda/*.cpp.
#include "device/train_device.h"
#include "dist/process_group_impl.h"
#include "step/train_step.h"
#include "train/base/error.h"

namespace train::detail {

std::unique_ptr<TrainDevice> make_cuda_device(const at::Device& device, const TrainConfig&) {
  throw ConfigError("--device " + device.str() + ": expected a build of libtrain with CUDA, found one without.",
                    "rebuild against a CUDA build of torch (with nccl.h), or use --device cpu.");
}

std::unique_ptr<TrainStep> make_cuda_graph_step(const StepParts&, int64_t, int) {
  throw ConfigError("--cuda-graph on: expected a build with CUDA, found one without.",
                    "rebuild against a CUDA build of torch, or use --cuda-graph off.");
}

}  // namespace train::detail

namespace train::detail {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int, int,
                                                    std::chrono::milliseconds, int, const std::string&) {
  throw ConfigError("--backend nccl: this build of libtrain has no NCCL support.",
                    "rebuild against a CUDA build of torch with nccl.h available (TRAIN_NCCL=ON), "
                    "or use --backend gloo.");
}

void* ProcessGroupImpl::nccl_comm() const { return nullptr; }

void ProcessGroupImpl::lend_comm_to_graphs() { comm_in_graphs = true; }  // no graphs without CUDA

void enable_flight_recorder() {}  // no NCCL, no flight recorder

std::string dump_flight_recorder(const ProcessGroupImpl&, const std::string&) { return ""; }

}  // namespace train::detail
