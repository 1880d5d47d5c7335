// train::UserCodeError: an exception from the user's code, with its context. Its own
// header for now, so that adding it did not rebuild everything that includes train/base/error.h; it
// belongs next to the other kinds there.
#pragma once

#include "train/base/error.h"

namespace train {

/// The user's code (Dataset::get_batch, the model's forward, the loss, a callback, a metric, the
/// optimizer or model builder, the LR schedule) threw, or its first batch failed the Trainer's
/// check: the message says which part, the step, epoch and rank, the batch's shapes and dtypes,
/// and the original message (LibTorch's without its C++ frames unless
/// TORCH_SHOW_CPP_STACKTRACES=1).
class UserCodeError : public Error { using Error::Error; };

}  // namespace train
