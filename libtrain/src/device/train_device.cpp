// The CPU as a training device (train_device.h): values are read at once, ranks agree on a stop
// every step, and the GPU-only flags are errors.
#include "device/train_device.h"

#include "train/base/error.h"
#include "train/base/device.h"

#include <torch/cuda.h>

#include <cstdlib>

#include <string>

namespace train::detail {
namespace {

class ReadNow : public PendingValue {
 public:
  explicit ReadNow(double v) : v_(v) {}
  double get() override { return v_; }

 private:
  double v_;
};

class CpuDevice : public TrainDevice {
 public:
  explicit CpuDevice(const at::Device& device) : TrainDevice(device, DeviceTraits{}) {}
};

// Flags that only mean something on a GPU: an error on the CPU rather than silently ignored.
void check_cpu_flags(const TrainConfig& c, const at::Device& device) {
  if (c.distributed.backend == BackendKind::nccl) {
    throw ConfigError("--backend nccl: expected a CUDA device, found the run on cpu.",
                      "use --backend gloo for CPU runs, or --device cuda on a GPU node.");
  }
  const GpuConfig& g = c.gpu;
  const bool precision_set = c.run.precision != Precision::fp32 && c.run.precision != Precision::automatic;
  if (g.cuda_graph != Switch::on && !precision_set && !g.channels_last && g.peer_allreduce != Switch::on) return;
  const std::string flag = g.cuda_graph == Switch::on ? "--cuda-graph on"
                           : precision_set             ? "--precision " + choice_name(c.run.precision)
                           : g.channels_last           ? "--channels-last on"
                                                       : "--peer-allreduce on";
  throw ConfigError(flag + ": expected a CUDA device, found the run on " + device.str() + ".",
                    "these settings need a GPU; on the CPU leave them at their defaults.");
}

}  // namespace

at::Device TrainDevice::pick(const TrainConfig& c, const DistEnv& env) {
  const DeviceKind asked = c.run.device;
  const bool want_cuda =
      asked == DeviceKind::cuda || (asked == DeviceKind::automatic && c.distributed.backend != BackendKind::gloo);
  if (!want_cuda) return at::Device(at::kCPU);
  const int count = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (count == 0) {
    // SLURM gave this job GPUs but CUDA sees none: stop rather than train on the CPU unasked.
    check_allocated_gpus_usable(current_environment(), choice_name(asked), 0,
                                "torch reports " + std::to_string(count) + " CUDA devices");
    if (asked == DeviceKind::automatic) return at::Device(at::kCPU);
    const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
    throw ConfigError("--device cuda: expected a visible CUDA device, found none (CUDA_VISIBLE_DEVICES=" +
                          std::string(vis ? vis : "<unset>") + ").",
                      "ask SLURM for GPUs (--gres=gpu:N or --gpus-per-node=N) and run on a GPU "
                      "partition, or use --device cpu.");
  }
  // The launcher's rule: cuda:<local rank>, or cuda:0 when SLURM binds GPUs per task; too few
  // GPUs for the node's ranks is an error naming both counts.
  return at::Device(train::choose_device(env, count, "nccl", current_environment()).device);
}

std::unique_ptr<PendingValue> TrainDevice::read_later(const at::Tensor& scalar) const {
  return std::make_unique<ReadNow>(scalar.item<double>());
}

std::unique_ptr<TrainDevice> TrainDevice::create(const at::Device& device, const TrainConfig& config) {
  if (device.is_cuda()) return make_cuda_device(device, config);
  check_cpu_flags(config, device);
  return std::make_unique<CpuDevice>(device);
}

}  // namespace train::detail
