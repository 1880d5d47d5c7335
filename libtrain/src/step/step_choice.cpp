// The CUDA graph or the eager step: only optimizers whose update a replay repeats exactly are
// captured; a graph that silently trains differently from the eager step is never an option.
#include "step/step_choice.h"

#include "optim/device_rates.h"
#include "train/adadelta.h"
#include "train/fused_optim.h"

#include <c10/util/Type.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/sgd.h>

#include <typeinfo>

namespace train::detail {

std::string capture_refusal(const torch::optim::Optimizer& optimizer) {
  const std::type_info& type = typeid(optimizer);
  // Exact types, not subclasses: a subclass may override step() with host state of its own.
  if (type == typeid(optim::Adadelta) || type == typeid(torch::optim::SGD) || type == typeid(optim::FusedSGD) ||
      type == typeid(optim::FusedAdam) || type == typeid(optim::FusedAdamW)) {
    return "";
  }
  if (type == typeid(torch::optim::Adam) || type == typeid(torch::optim::AdamW)) {
    const bool w = type == typeid(torch::optim::AdamW);
    return std::string(w ? "torch::optim::AdamW" : "torch::optim::Adam") +
           " computes its bias correction on the host from a host step count, which a replayed CUDA graph would "
           "freeze at its capture-time value (training would silently differ from the eager step); " +
           (w ? "train::optim::FusedAdamW" : "train::optim::FusedAdam") +
           " (train/fused_optim.h) keeps its step count on the device and is captured";
  }
  if (type == typeid(torch::optim::Adagrad)) {
    return "torch::optim::Adagrad decays its rate on the host from a host step count, which a replayed CUDA graph "
           "would freeze at its capture-time value";
  }
  if (type == typeid(torch::optim::LBFGS)) {
    return "torch::optim::LBFGS re-evaluates the loss through a closure and branches on host values, which a CUDA "
           "graph can't replay";
  }
  return c10::demangle(type.name()) +
         " is not an optimizer libtrain knows to keep its per-step state on the device (a step that reads host "
         "state would replay its capture-time values); libtrain captures its Adadelta, FusedSGD, FusedAdam and "
         "FusedAdamW, and torch::optim::SGD";
}

StepChoice choose_step(bool cuda, Switch cuda_graph, bool lr_every_step,
                       const torch::optim::Optimizer& optimizer) {
  StepChoice choice;
  if (!cuda || cuda_graph == Switch::off) return choice;
  choice.warn = cuda_graph == Switch::on;
  choice.why_eager = capture_refusal(optimizer);
  if (choice.why_eager.empty() && lr_every_step && optim::device_state(optimizer) == nullptr) {
    // This optimizer's rate is baked into a captured step: one that changes every step can't be replayed.
    choice.why_eager = c10::demangle(typeid(optimizer).name()) +
                       " bakes its rate into a captured step, and the LR schedule changes it every step; "
                       "train::optim::FusedSGD (train/fused_optim.h) reads it from the device and is captured";
  }
  choice.graph = choice.why_eager.empty();
  return choice;
}

PrecisionChoice resolve_precision(bool cuda, bool bf16_supported, Precision flag,
                                  std::optional<int64_t> auto_bf16_batch, int64_t batch) {
  if (!cuda) return {Precision::fp32, ""};
  if (flag != Precision::automatic) return {flag, ""};
  if (!auto_bf16_batch) {
    return {Precision::fp32, "--precision auto: fp32 (this model's spec doesn't ask for bf16: set TrainSpec::auto_bf16_batch "
                    "where you measured it, or pass --precision bf16)"};
  }
  const int64_t from = *auto_bf16_batch;
  if (batch >= from && bf16_supported) {
    return {Precision::bf16, "--precision auto: bf16 autocast (batch " + std::to_string(batch) + " per rank >= " +
                        std::to_string(from) + "); --precision fp32 keeps float32"};
  }
  return {Precision::fp32, "--precision auto: fp32 (bf16 is picked for batches of " + std::to_string(from) +
                      " or more per rank on GPUs that have it)"};
}

}  // namespace train::detail
