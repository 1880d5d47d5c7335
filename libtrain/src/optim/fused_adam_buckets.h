// libtrain's captured step's access to FusedAdam's and FusedAdamW's update one gradient bucket at
// a time (private; train/fused_optim.h names it a friend). A step's update is the step counts
// advanced, then ATen's fused kernel on every parameter; element by element it is the same on any
// split of the parameters, so the step can advance the counts once, early, and update each bucket
// as soon as its average is done (ATen's kernel on the bucket's parameters, or the tensors handed
// to the caller's kernel: the GPUs' peer all-reduce).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace train::details {

/// Whether every parameter of `optimizer` that requires a gradient is one of `params` (the
/// parameters a step averages): an update bucket by bucket then leaves none of the optimizer's
/// behind (a tensor trained outside the model, which step() would update, keeps the step's update
/// after the averages).
bool updates_only(const torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params);

struct FusedAdamBuckets {
  /// One parameter's state as a caller's kernel reads it.
  struct Tensors {
    at::Tensor param, exp_avg, exp_avg_sq, step;
  };
  /// The options of the group a bucket's parameters share.
  struct Hyper {
    double beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
    bool decoupled = true;  ///< AdamW
    at::Tensor lr;          ///< float32 [] on the parameters' device
  };

  /// Whether `optimizer` is a FusedAdam or FusedAdamW (subclasses too).
  static bool is_fused_adam(torch::optim::Optimizer& optimizer);
  /// Whether `optimizer` is a FusedAdam or FusedAdamW whose update of `params` (every parameter
  /// the step averages; their gradients need not exist yet) can run bucket by bucket: it trains
  /// no other parameter (updates_only), each is one of its parameters, CUDA float32 and dense,
  /// with its state from an eager step before (laid out like it) and its group's rate in device
  /// memory. False, with the reason in `why`.
  static bool applies(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params, std::string* why);
  /// Queues the step counts of `params` advanced by one (one kernel), as step() does first.
  static void advance_steps(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params);
  /// Queues the update of `params` with their gradients, their counts already advanced: ATen's
  /// fused kernel, one launch per parameter group.
  static void update(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params);
  /// The tensors of `params` for a caller's kernel of the same update, and their group's options,
  /// where they share one group without amsgrad; nullopt otherwise.
  static std::optional<Hyper> describe(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params,
                                       std::vector<Tensors>* tensors);
};

}  // namespace train::details
