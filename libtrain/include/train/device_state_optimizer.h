// The mark of an optimizer a CUDA graph can replay: its step reads its per-step state and its
// learning rate from the device (train::optim::Adadelta, FusedSGD, FusedAdam, FusedAdamW).
#pragma once

namespace train::optim {

/// An optimizer whose step reads no host state that changes over a run: its step counts live on
/// the device, and on CUDA it reads each group's learning rate from device memory. The Trainer
/// captures such a step in a CUDA graph (`--cuda-graph`), and when the LR schedule changes the
/// rate it calls sync_lr() before the next replay.
class DeviceStateOptimizer {
 public:
  virtual ~DeviceStateOptimizer() = default;
  /// True once a step has read the rates from the device (CUDA): then sync_lr() is all a captured
  /// step needs to follow a new rate. False on the CPU, and before the first step.
  virtual bool lr_on_device() const = 0;
  /// Copies each group's rate (`options().get_lr()`) into its device copy: a small kernel on the
  /// current stream where the rate changed, no host wait. Call it outside a graph capture.
  virtual void sync_lr() = 0;
};

}  // namespace train::optim
