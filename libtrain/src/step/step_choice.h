// Which training step a run gets: the CUDA graph only where replaying it repeats exactly what the
// eager step computes; otherwise the eager step, with one log line that says why.
#pragma once

#include "train/config.h"

#include <cstdint>
#include <optional>
#include <string>

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace train::detail {

/// Why replaying a captured step would not update the parameters as the eager step does with
/// `optimizer`, or "" when it would. A CUDA graph freezes every value its step read on the host at
/// capture time, so only optimizers known to keep their per-step state on the device are captured:
/// libtrain's Adadelta and torch::optim::SGD. torch::optim::Adam and AdamW (their bias correction
/// comes from a host step count), Adagrad (its rate decay likewise), LBFGS (a closure and host
/// branches) and any optimizer libtrain doesn't know (a user's own) are refused.
std::string capture_refusal(const torch::optim::Optimizer& optimizer);

/// What make_step runs: the CUDA graph, or the eager step and why (empty when nobody asked for a
/// graph: the CPU, or --cuda-graph off).
struct StepChoice {
  bool graph = false;
  std::string why_eager;
  bool warn = false;  ///< the user asked for the graph (--cuda-graph on): say it as a warning
};

/// The decision itself. `cuda_graph` is the --cuda-graph setting;
/// `lr_every_step` whether the LR schedule changes the rate after every step.
StepChoice choose_step(bool cuda, Switch cuda_graph, bool lr_every_step,
                       const torch::optim::Optimizer& optimizer);

/// What --precision resolved to, and the log line that says why (empty when nothing was chosen).
struct PrecisionChoice {
  Precision precision = Precision::fp32;  ///< fp32, tf32 or bf16 (never automatic)
  std::string why;
};

/// --precision `flag` on this device. auto is bf16 autocast only where
/// the spec asks for it, from `auto_bf16_batch` samples per rank up (TrainSpec::auto_bf16_batch:
/// the built-in MNIST recipe, where bf16 was measured within half a point of fp32), on a GPU that
/// has bf16; fp32 otherwise (a user's model is never switched to bf16 unasked). The CPU: fp32.
PrecisionChoice resolve_precision(bool cuda, bool bf16_supported, Precision flag,
                                  std::optional<int64_t> auto_bf16_batch, int64_t batch);

}  // namespace train::detail
