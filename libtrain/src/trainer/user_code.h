// Errors in the user's code with their context: which part threw (Dataset::get_batch,
// the model's forward, the loss, a callback, the optimizer or LR schedule builder), at which step,
// epoch and rank, on which batch, with the original message and no C++ frame dump unless
// TORCH_SHOW_CPP_STACKTRACES=1. And the check of the first batch before the first forward. Private.
#pragma once

#include "train/data.h"

#include <exception>
#include <string>

namespace train::detail {

/// What a step is doing and what it was given, kept for an error's message.
struct StepContext {
  const char* phase = "the training step";  ///< e.g. "Dataset::get_batch", "the model's forward"
  std::string batch;          ///< set when a step fails after its batch came: its shapes and dtypes
  bool batch_checked = false;  ///< the first batch passed check_batch
  bool class_indices = false;  ///< the loss takes integer class indices (train::expects_class_indices)
  bool output_checked = false;  ///< the first batch's output passed check_output
  std::string data;             ///< the training data, for messages: "the training data 'NAME' (TrainSpec::train_data)"
};

/// "inputs float32 [64, 1, 28, 28], targets int64 [64]".
std::string describe_batch(const Batch& batch);

/// The exception's message without LibTorch's C++ frames (c10::Error::what_without_backtrace),
/// unless TORCH_SHOW_CPP_STACKTRACES=1 asks for them.
std::string original_message(const std::exception& e);

/// The first batch's checks: as many target rows as input rows; integer targets for a
/// class-index loss. Throws train::UserCodeError saying what was found and expected.
void check_batch(const Batch& batch, bool class_indices);

/// Every batch's rows against what the dataset was asked for: `rows` samples (one per index).
/// Throws train::UserCodeError naming `context.data`. Sizes only: no device sync.
void check_batch_shape(const Batch& batch, int64_t rows, const StepContext& context);

/// The first batch's output against its targets: one row per sample, and for a class-index loss
/// a score for every class the targets name (dimension 1 larger than the largest target). Throws
/// train::UserCodeError naming the output's shape and the targets' largest class. Reads one value
/// from the device.
void check_output(const at::Tensor& output, const Batch& batch, bool class_indices);

/// throw_user_error for the training step, from `context`: its phase, the batch and the training
/// data it came from; a failing forward's hint names the dataset as well as the model.
[[noreturn]] void throw_step_error(const StepContext& context, const std::string& where, std::exception_ptr e);

/// Throws train::UserCodeError: `part` failed `where` ("at step 5 (epoch 1) on rank 1"), the
/// batch (if any) and `e`'s message; its hint when `e` is a train::Error, else `hint` (or a general one). A communication error
/// (train::CommError, c10::DistError) is rethrown as it is: it is no error in the user's code.
[[noreturn]] void throw_user_error(const std::string& part, const std::string& where, const std::string& batch,
                                   std::exception_ptr e, const std::string& hint = "");

}  // namespace train::detail
