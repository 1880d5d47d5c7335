// A CUDA GPU as a training device (device/train_device.h): the run's device and stream, TF32 and
// cuDNN settings, NHWC weights, values read through pinned memory without stalling, stop flags
// in device memory. CUDA builds only.
#include "device/train_device.h"

#include "cuda/peer_allreduce.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/nn/module.h>

namespace train::detail {
namespace {

// A scalar copied into pinned host memory behind the work queued so far; get() waits only for
// that copy.
class PinnedValue : public PendingValue {
 public:
  explicit PinnedValue(const at::Tensor& scalar) {
    host_ = at::empty({1}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
    host_.copy_(scalar.detach().reshape({1}).to(at::kFloat), /*non_blocking=*/true);
    ready_.record(c10::cuda::getCurrentCUDAStream(scalar.device().index()));
  }
  double get() override {
    ready_.synchronize();
    return host_.data_ptr<float>()[0];
  }

 private:
  at::Tensor host_;
  at::cuda::CUDAEvent ready_;
};

class CudaDevice : public TrainDevice {
 public:
  CudaDevice(const at::Device& device, const TrainConfig& c)
      : TrainDevice(device, traits_of(device)), channels_last_(c.gpu.channels_last) {
    // Work for rank r lands on cuda:r, and on a pool stream: a step can be captured on the
    // current stream (CUDA graphs can't capture the legacy default stream).
    c10::cuda::set_device(device.index());
    c10::cuda::setCurrentCUDAStream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
    if (c.gpu.tf32 != Switch::automatic || c.run.precision == Precision::tf32) {
      const bool on = c.run.precision == Precision::tf32 || c.gpu.tf32 == Switch::on;
      at::globalContext().setAllowTF32CuDNN(on);
      at::globalContext().setAllowTF32CuBLAS(on);
    }
    // cuDNN's autotuning times every algorithm for each new shape: seconds at start that a short
    // run never earns back, so it is opt-in (--cudnn-benchmark).
    at::globalContext().setDeterministicCuDNN(c.gpu.deterministic);
    at::globalContext().setBenchmarkCuDNN(c.gpu.cudnn_benchmark && !c.gpu.deterministic);
  }

  bool peer_access(int peer) const override {
    const int self = device().index();
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || peer < 0 || self >= count || peer >= count || self == peer) {
      (void)cudaGetLastError();
      return false;
    }
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, self, peer) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return can != 0;
  }

  void prepare_model(torch::nn::Module& module) const override {
    if (!channels_last_) return;
    // Same values, NHWC strides: cuDNN then convolves without converting layouts, and the
    // activations, gradients and optimizer state follow the weights' layout.
    torch::NoGradGuard no_grad;
    for (auto& p : module.parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
    }
  }

  void synchronize() const override { c10::cuda::device_synchronize(); }

  double peak_memory_mb() const override {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device().index());
    const auto& peak = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
    return static_cast<double>(peak) / (1024.0 * 1024.0);
  }

  std::unique_ptr<PendingValue> read_later(const at::Tensor& scalar) const override {
    return std::make_unique<PinnedValue>(scalar);
  }

 private:
  static DeviceTraits traits_of(const at::Device& device) {
    DeviceTraits d;
    d.gpu = true;
    d.bf16 = at::cuda::getDeviceProperties(device.index())->major >= 8;
    d.peer_kernels = peer_allreduce_available();
    d.reads_at_once = false;
    d.stop_check_every = 20;
    // The flags are copied back without a host sync and read a check later: NCCL sums them on the
    // device first, Gloo on the host once the copy has long arrived (one rank: no collective).
    d.stop_flags_read_later = true;
    return d;
  }

  bool channels_last_;
};

}  // namespace

std::unique_ptr<TrainDevice> make_cuda_device(const at::Device& device, const TrainConfig& config) {
  return std::make_unique<CudaDevice>(device, config);
}

}  // namespace train::detail
