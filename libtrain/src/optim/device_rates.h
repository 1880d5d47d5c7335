// What libtrain's step asks of the run's optimizer about its rates on the device, answered here
// so that the step (step/, cuda/) never tests the optimizer's type itself. Private.
#pragma once

#include "train/device_state_optimizer.h"

#include <cstddef>
#include <vector>

namespace train::optim {

/// `optimizer` as one whose step reads its per-step state and its rates from the device
/// (libtrain's Adadelta, FusedSGD, FusedAdam, FusedAdamW), or null.
DeviceStateOptimizer* device_state(torch::optim::Optimizer& optimizer);
const DeviceStateOptimizer* device_state(const torch::optim::Optimizer& optimizer);

/// The rates that sync_lr() would write now, taken as written: the caller queues them (a kernel of
/// its own) before anything reads them. False, taking nothing, where more than `max` changed.
bool take_rate_writes(DeviceStateOptimizer& optimizer, size_t max, std::vector<details::DeviceRates::Write>* out);

}  // namespace train::optim
