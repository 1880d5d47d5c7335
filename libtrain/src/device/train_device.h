// What differs between training on the CPU and on a CUDA GPU, behind one interface, so that the
// Trainer never branches on the device: the device's set-up and the flags it takes, the model's
// memory layout, reading a value without stalling the device, how ranks agree on a stop, memory
// figures. The CPU's version is train_device.cpp; CUDA's is cuda/cuda_device.cpp (CUDA builds).
#pragma once

#include "train/config.h"
#include "train/base/env.h"
#include "train/process_group.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <optional>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace train::detail {

/// A value on its way from the device; get() waits for it if it has to.
class PendingValue {
 public:
  virtual ~PendingValue() = default;
  virtual double get() = 0;
};

/// What a device is and how the run treats it: the CPU's defaults, a GPU's in cuda_device.cpp.
struct DeviceTraits {
  bool gpu = false;             ///< a GPU: CUDA graphs, bf16 autocast and peer memory may apply
  bool bf16 = false;            ///< it computes in bfloat16 (compute capability 8.0 or newer)
  bool peer_kernels = false;    ///< this build has the GPUs' peer all-reduce kernel (and this is a GPU)
  bool reads_at_once = true;    ///< a value is there at once: progress lines print immediately
  /// How often (in steps) ranks agree on a stop; on a GPU the agreement costs a collective that
  /// the host would otherwise wait for, so it runs every few steps.
  int64_t stop_check_every = 1;
  bool stop_flags_read_later = false;  ///< the stop flags are posted and read a check later, no host sync
};

class TrainDevice {
 public:
  virtual ~TrainDevice() = default;

  /// The device `device` with `config`'s settings applied (CUDA: this thread's device and
  /// stream, TF32, cuDNN). Throws train::ConfigError naming a flag the device can't honour
  /// (GPU-only flags on the CPU).
  static std::unique_ptr<TrainDevice> create(const at::Device& device, const TrainConfig& config);
  /// The device for this rank: --device cpu, or cuda:<local rank> (cuda:0 where SLURM binds GPUs
  /// per task) when --device is cuda or auto and CUDA sees GPUs (auto: else the CPU). Throws
  /// train::ConfigError for --device cuda without a visible GPU, for a job that SLURM gave GPUs
  /// CUDA can't see, and for too few GPUs for the node's ranks.
  static at::Device pick(const TrainConfig& config, const DistEnv& env);

  const at::Device& device() const { return device_; }
  /// What the device is and how the run treats it (fixed once the device is set up).
  const DeviceTraits& traits() const { return traits_; }

  /// This GPU can read GPU `peer`'s memory directly (false where either isn't visible).
  virtual bool peer_access(int peer) const { (void)peer; return false; }
  /// The model just moved here, before the optimizer is built (CUDA: NHWC weights for
  /// --channels-last on).
  virtual void prepare_model(torch::nn::Module& module) const { (void)module; }
  /// Waits until the device has done everything queued.
  virtual void synchronize() const {}
  /// Peak memory the device's allocator handed out so far, in MB (0 on the CPU).
  virtual double peak_memory_mb() const { return 0; }
  /// `scalar`'s value, read later without stalling the device (CUDA: a pinned copy and an event;
  /// the CPU reads it at once).
  virtual std::unique_ptr<PendingValue> read_later(const at::Tensor& scalar) const;

 protected:
  TrainDevice(const at::Device& device, DeviceTraits traits) : device_(device), traits_(traits) {}

 private:
  at::Device device_;
  DeviceTraits traits_;
};

/// CUDA builds: the CUDA device (cuda/cuda_device.cpp). Other builds: throws train::ConfigError.
std::unique_ptr<TrainDevice> make_cuda_device(const at::Device& device, const TrainConfig& config);

}  // namespace train::detail
