// Errors in the user's code with their context (user_code.h).
#include "trainer/user_code.h"

#include "train/base/error.h"
#include "train/user_code_error.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <sstream>

namespace train::detail {

namespace {

std::string describe_tensor(const at::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::ostringstream s;
  s << c10::toString(t.scalar_type()) << " " << t.sizes();
  return s.str();
}

bool show_cpp_frames() {
  const char* v = std::getenv("TORCH_SHOW_CPP_STACKTRACES");
  return v != nullptr && std::string(v) == "1";
}

}  // namespace

std::string describe_batch(const Batch& b) {
  return "inputs " + describe_tensor(b.inputs) + ", targets " + describe_tensor(b.targets);
}

std::string original_message(const std::exception& e) {
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e); c10e != nullptr && !show_cpp_frames()) {
    return c10e->what_without_backtrace();
  }
  return e.what();
}

void check_batch(const Batch& b, bool class_indices) {
  const std::string found = "found " + describe_batch(b) + ".";
  if (!b.inputs.defined() || !b.targets.defined()) {
    throw UserCodeError("Dataset::get_batch's first batch: expected inputs and targets, " + found,
                        "return a train::Batch with both tensors set.");
  }
  if (b.inputs.dim() > 0 && b.targets.dim() > 0 && b.inputs.size(0) != b.targets.size(0)) {
    throw UserCodeError("Dataset::get_batch's first batch: expected as many target rows as input rows (one target per "
                            "sample, along dimension 0), " + found,
                        "check that get_batch indexes inputs and targets with the same indices.");
  }
  if (class_indices && (b.targets.is_floating_point() || b.targets.is_complex() || b.targets.scalar_type() == at::kBool)) {
    throw UserCodeError("Dataset::get_batch's first batch: expected integer class indices as targets (int64) for the "
                            "class-index loss (nll_loss / cross_entropy_loss), " + found,
                        "convert the labels with targets.to(torch::kLong), or pass a loss of your own that takes "
                        "these targets.");
  }
}

void check_batch_shape(const Batch& b, int64_t rows, const StepContext& context) {
  if (!b.inputs.defined() || b.inputs.dim() == 0) return;  // check_batch names it
  if (b.inputs.size(0) != rows) {
    throw UserCodeError(context.data + " returned " + std::to_string(b.inputs.size(0)) + " input rows for " +
                            std::to_string(rows) + " indices: expected one row per index, found " + describe_batch(b) + ".",
                        "get_batch(indices) must return the samples at `indices`, in their order (e.g. "
                        "inputs.index_select(0, indices)).");
  }
}

void check_output(const at::Tensor& out, const Batch& b, bool class_indices) {
  if (!out.defined() || !b.targets.defined() || !class_indices || out.dim() < 1) return;
  const std::string found = "found output " + describe_tensor(out) + " for " + describe_batch(b) + ".";
  if (b.targets.dim() > 0 && out.size(0) != b.targets.size(0)) {
    throw UserCodeError("the model's output: expected one row per sample (" + std::to_string(b.targets.size(0)) +
                            " along dimension 0), " + found,
                        "the forward must keep the batch dimension first (e.g. x.flatten(1), not x.flatten()).");
  }
  if (out.dim() < 2 || b.targets.numel() == 0) return;
  const int64_t largest = b.targets.max().item<int64_t>();
  if (largest >= out.size(1)) {
    throw UserCodeError("the model's output: expected a score for each class along dimension 1, at least " +
                            std::to_string(largest + 1) + " (the first batch's targets go up to class " +
                            std::to_string(largest) + "), " + found,
                        "give the model's last layer one output per class of the dataset, e.g. torch::nn::Linear(in, " +
                            std::to_string(largest + 1) + ") or more, or check the dataset's targets.");
  }
}

void throw_user_error(const std::string& part, const std::string& where, const std::string& batch,
                      std::exception_ptr ep, const std::string& hint) {
  try {
    std::rethrow_exception(ep);
  } catch (const CommError&) {
    throw;
  } catch (const c10::DistError&) {
    throw;
  } catch (const UserCodeError& e) {
    throw UserCodeError(part + " failed " + where + ": " + e.message(), e.hint());
  } catch (const Error& e) {
    throw UserCodeError(part + " failed " + where + ": " + e.message() +
                            (batch.empty() ? "" : " The batch: " + batch + "."), e.hint());
  } catch (const std::exception& e) {
    std::string msg = original_message(e);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    throw UserCodeError(part + " failed " + where + ": " + msg + (batch.empty() ? "" : " (the batch: " + batch + ")") + ".",
                        (hint.empty() ? "the error comes from " + part + " (your code, or the tensors it was given)" : hint) +
                            "; set TORCH_SHOW_CPP_STACKTRACES=1 to see LibTorch's C++ frames.");
  }
}

void throw_step_error(const StepContext& context, const std::string& where, std::exception_ptr e) {
  // A forward that fails on a batch may be the dataset's fault as well as the model's: name both.
  const bool forward = std::string(context.phase) == "the model's forward";
  throw_user_error(context.phase, where, context.batch.empty() ? "" : context.batch + " from " + context.data, e,
                   forward ? "the model's forward rejected a batch of " + context.data +
                                 ": either that dataset's samples have the wrong shape or the model expects another "
                                 "(its first layer)"
                           : "");
}

}  // namespace train::detail
